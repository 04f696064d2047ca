"""Training episodes drawn on a torch device (``train.sampler=device``): the bank's truth bits
held on the GPU (or the CPU), and a whole step's batch of episodes drawn there with tensor
operations, so no CPU worker is in the training loop.

`DeviceEpisodeSampler` draws from the distribution of `curi.EpisodeSampler` (CURI paper,
section 3 and Appendix D), with other random numbers: a concept by its prior, 2 x 5 distinct
positives uniformly among its scenes, and per set 20 negatives, hard (uniform over the scenes
of the alternates, the other concepts true on the set's positives, that do not satisfy the
concept; random scenes that do not fill in when that pool is short) or easy (uniform over the
scenes that do not satisfy it), each set in a random order. A big pool is drawn by rejection
(random scenes kept when they are in it), a small one exactly from the OR of its alternates'
rows, as `EpisodeSampler` does; both give a uniform draw. Negatives matched to the positives'
scene statistics (``negative_sampler="matched"``) come from `curi.models.device_matched`.
`EpisodeSampler` stays the reference and the only source of validation and test episodes."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import Tensor

from curi.episodes import EpisodeSampler, EpisodeSpec
from curi.errors import ConfigError
from curi.models.device_bits import (
    clear_bits,
    distinct_ranks,
    first_occurrence,
    list_bits,
    or_rows,
    popcount,
    select_bits,
)
from curi.rng import derive_rng

__all__ = ["DeviceBank", "DeviceEpisodeSampler", "take_uniform"]

EXACT_MAX_ALTERNATES = 32  # as EpisodeSampler: above this, a pool is drawn by rejection
_CANDIDATES = 128  # random scenes per episode in the first rejection round
_POOL_ROUNDS = 8  # rejection rounds before a pool is drawn exactly (128, 256, ..., 2,048 scenes)


def _on(array: np.ndarray, device: torch.device) -> Tensor:
    """A bank array (uint64 words, memory-mapped) as an int64 tensor on `device`; on the CPU
    it stays memory-mapped (torch warns that the map is read-only: nothing writes to it)."""
    a = np.asarray(array)
    if a.dtype == np.uint64:
        a = a.view(np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a).to(device)


class DeviceBank:
    """What the device sampler reads, on one device: the truth rows ``words`` (H, W), the same
    bits scene-major ``by_scene`` (N, ceil(H / 64)) and the concepts' scene ``counts`` (H,).

    Raises:
        ConfigError: the bits do not fit in the free memory of a CUDA device.
    """

    def __init__(self, bank, device: str | torch.device) -> None:
        self.device = torch.device(device)
        _check_fits(bank, self.device)
        self.num_scenes = int(bank.num_scenes)
        self.words = _on(bank.truth_words, self.device)
        self.by_scene = _on(bank.truth_by_scene, self.device)
        self.counts = torch.as_tensor(np.asarray(bank.counts), dtype=torch.int64).to(self.device)

    @staticmethod
    def nbytes(bank) -> int:
        """Bytes the bank's bits take on a device."""
        return int(np.asarray(bank.truth_words).nbytes + np.asarray(bank.truth_by_scene).nbytes)


def _check_fits(bank, device: torch.device) -> None:
    if device.type != "cuda":
        return
    need = DeviceBank.nbytes(bank)
    free, _ = torch.cuda.mem_get_info(device)
    if need > 0.8 * free:
        raise ConfigError(
            f"train.sampler=device: the bank's truth bits need {need / 2**30:.1f} GiB on {device} "
            f"but {free / 2**30:.1f} GiB are free; use train.sampler=loader"
        )


class DeviceEpisodeSampler:
    """A batch of training episodes per call, drawn with torch on `device`.

    ``sample(draw, size, rank=rank)`` is a pure function of (seed, draw, rank, size) on a
    given device: a run resumed at step t draws what the uninterrupted run drew (a draw is one
    step's episodes, or on CUDA several steps': `curi.models.device_batches.DrawnEpisodes`),
    and DDP processes (`rank`) draw independent episodes. The episodes are those of `spec`
    (`curi.episodes.EpisodeSpec`: split, subset, negatives, query negatives, negative sampler,
    seed and set sizes; ``random`` query negatives are drawn easy; its size and shuffle do not
    apply: every draw is shuffled).

    Args:
        bank: a `ConceptBank`.
        spec: the episodes, checked against `bank` here (`EpisodeSpec.check`).
        device: where the bits live and the episodes are drawn.
        data: the bank's `DeviceBank` on `device`, when the caller has it.

    Raises:
        ConfigError: what `EpisodeSpec.check` refuses, or a bank too big for the device.
    """

    def __init__(
        self,
        bank,
        spec: EpisodeSpec,
        *,
        device: str | torch.device = "cpu",
        data: DeviceBank | None = None,
    ) -> None:
        self.spec = spec
        self.reference = ref = EpisodeSampler.from_spec(bank, spec)
        self.device = torch.device(device)
        self.data = data if data is not None else DeviceBank(bank, self.device)
        self.seed, self.negatives, self.query_negatives = (
            ref.seed,
            ref.negatives,
            ref.query_negatives,
        )
        self.num_positives, self.num_negatives = ref.num_positives, ref.num_negatives
        self.concepts = torch.as_tensor(ref.concepts, dtype=torch.int64).to(self.device)
        self.cdf = torch.as_tensor(ref.prior_cdf, dtype=torch.float64).to(self.device)
        self._matched = None
        if ref.negative_sampler == "matched":
            from curi.models.device_matched import MatchedNegatives

            self._matched = MatchedNegatives(self)

    def __repr__(self) -> str:
        return f"DeviceEpisodeSampler({self.reference!r}, device={self.device})"

    def generator(self, step: int, rank: int = 0) -> torch.Generator:
        """The random stream of one step's batch (of one process)."""
        seed = int(derive_rng(self.seed, "device-episodes", step, rank).integers(2**62))
        return torch.Generator(self.device).manual_seed(seed)

    def sample(self, step: int, batch_size: int, *, rank: int = 0) -> dict[str, Tensor]:
        """The episodes of one draw: a step's (`curi.models.device_batches.DrawnEpisodes`
        draws several steps' at once on CUDA and numbers the draws).

        Returns:
            ``ids`` (B, S + Q) scene ids, support then query, ``support_labels`` (B, S) and
            ``query_labels`` (B, Q) int64 (1 = positive; each set in a random order), and
            ``concept`` (B,) the concepts' indices in the bank; all on the sampler's device.
        """
        gen = self.generator(step, rank)
        p = self.num_positives
        h = self._concepts(batch_size, gen)
        pos = self._positives(h, gen)  # (B, 2p): support then query positives
        s_neg = self.negatives_of(self.negatives, h, pos[:, :p], pos, gen)
        q_kind = "easy" if self.query_negatives == "random" else self.query_negatives
        q_neg = self.negatives_of(q_kind, h, pos[:, p:], torch.cat([pos, s_neg], 1), gen)
        s_ids, s_lab = self._shuffle(pos[:, :p], s_neg, gen)
        q_ids, q_lab = self._shuffle(pos[:, p:], q_neg, gen)
        return {
            "ids": torch.cat([s_ids, q_ids], 1),
            "support_labels": s_lab,
            "query_labels": q_lab,
            "concept": h,
        }

    # --- concepts and positives -------------------------------------------------------------
    def _concepts(self, b: int, gen: torch.Generator) -> Tensor:
        """(B,) concepts drawn by the prior (the inverse of its cumulative weights)."""
        u = torch.rand(b, dtype=torch.float64, device=self.device, generator=gen)
        k = torch.searchsorted(self.cdf, u, right=True).clamp(max=len(self.cdf) - 1)
        return self.concepts[k]

    def _positives(self, h: Tensor, gen: torch.Generator) -> Tensor:
        """(B, 2p) distinct scenes of each concept, uniformly, in random order."""
        k = 2 * self.num_positives
        n = self.data.counts[h]
        ranks = distinct_ranks(n, torch.full_like(n, k), k, gen)
        return select_bits(_rows(self.data.words, h), ranks)

    def _shuffle(self, pos: Tensor, neg: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """One set's ids (B, p + n) and labels in a random order."""
        ids = torch.cat([pos, neg], 1)
        labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)], 1)
        order = torch.rand(ids.shape, device=self.device, generator=gen).argsort(1)
        return torch.gather(ids, 1, order), torch.gather(labels, 1, order)

    # --- negatives --------------------------------------------------------------------------
    def negatives_of(
        self, kind: str, h: Tensor, positives: Tensor, used: Tensor, gen: torch.Generator
    ) -> Tensor:
        """(B, num_negatives) negatives of one set: `kind` ``hard`` or ``easy`` for concepts h
        (B,) and the set's positives (B, p), none of them in `used` (B, U)."""
        if self._matched is not None:
            return self._matched(kind, h, positives, used, gen)
        m = self.num_negatives
        if kind == "easy":
            return self.not_h(h, used, torch.full_like(h, m), m, gen)
        alt = self.alternates(h, positives)
        chosen = self.pool(h, alt, used, gen)
        return self.fill(h, chosen, used, gen)

    def alternates(self, h: Tensor, positives: Tensor) -> Tensor:
        """(B, ceil(H / 64)) words: the concepts other than h true on every positive."""
        rows = _rows(self.data.by_scene, positives)  # (B, p, HW)
        alt = rows[:, 0].clone()
        for j in range(1, rows.shape[1]):
            alt &= rows[:, j]
        return clear_bits(alt, h[:, None])

    def pool(self, h: Tensor, alt: Tensor, used: Tensor, gen: torch.Generator) -> Tensor:
        """(B, m) distinct scenes uniformly from each episode's hard pool (scenes of an
        alternate that do not satisfy h, less `used`), -1 where the pool ran out: by rejection
        when there are many alternates, else (and where rejection came up short) exactly."""
        m = self.num_negatives
        out = torch.full((len(h), m), -1, dtype=torch.int64, device=self.device)
        n_alt = popcount(alt).sum(1)
        big = torch.nonzero(n_alt > EXACT_MAX_ALTERNATES).squeeze(1)
        exact = torch.nonzero((n_alt > 0) & (n_alt <= EXACT_MAX_ALTERNATES)).squeeze(1)
        if len(big):
            got, n = self.reject(
                self.in_pool(h[big], alt[big]),
                self.uniform,
                used[big],
                torch.full_like(big, m),
                gen,
            )
            done = n == m
            out[big[done]] = got[done]
            exact = torch.cat([exact, big[~done]])
        if len(exact):
            out[exact] = self.exact_pool(h[exact], alt[exact], used[exact], gen)
        return out

    def in_pool(self, h: Tensor, alt: Tensor):
        """``accept(rows, cand)`` for `reject`: whether candidates (R, M) of rows `rows` are in
        the hard pools of concepts h (B,) with alternates `alt` (B, ceil(H / 64))."""
        by_scene, words = self.data.by_scene, self.data.words

        def accept(rows: Tensor, cand: Tensor) -> Tensor:
            rows_of = _rows(by_scene, cand)  # (R, M, HW), AND-ed in place: no second copy
            hit = rows_of.bitwise_and_(alt[rows][:, None, :]).any(2)  # (R, M)
            return hit & ~_bit(words, h[rows], cand)

        return accept

    def exact_pool(self, h: Tensor, alt: Tensor, used: Tensor, gen: torch.Generator) -> Tensor:
        """(E, m) distinct scenes uniformly from the pools of E episodes, from the OR of their
        alternates' rows; -1 padded when a pool has fewer than m scenes."""
        bits = clear_bits(self.pool_bits(h, alt), used)
        m = self.num_negatives
        return take_uniform(bits, torch.full_like(h, m), m, gen)

    def pool_bits(self, h: Tensor, alt: Tensor) -> Tensor:
        """(E, W) the hard pools of E episodes as bits: the OR of their alternates' rows, less
        the scenes of h."""
        words = self.data.words
        limit = int(popcount(alt).sum(1).max())
        return or_rows(words, list_bits(alt, limit=limit)) & ~_rows(words, h)

    def fill(self, h: Tensor, chosen: Tensor, used: Tensor, gen: torch.Generator) -> Tensor:
        """`chosen` (B, m), its -1 slots filled with random scenes that do not satisfy h and
        are in neither `used` nor `chosen` (a pool smaller than m)."""
        short = (chosen < 0).sum(1)
        rows = torch.nonzero(short > 0).squeeze(1)
        if not len(rows):
            return chosen
        m = chosen.shape[1]
        taken = torch.cat([used[rows], chosen[rows]], 1)
        extra = self.not_h(h[rows], taken, short[rows], m, gen)  # (R, m)
        # the chosen first, then the extra ones in the free slots
        kept = torch.gather(chosen[rows], 1, (chosen[rows] < 0).long().argsort(dim=1, stable=True))
        at = torch.arange(m, device=self.device) - (m - short[rows])[:, None]  # (R, m)
        fill = torch.gather(extra, 1, at.clamp(min=0))
        out = chosen.clone()
        out[rows] = torch.where(at >= 0, fill, kept)
        return out

    def not_h(
        self, h: Tensor, used: Tensor, need: Tensor, width: int, gen: torch.Generator
    ) -> Tensor:
        """(B, width) distinct random scenes that do not satisfy h and are not in `used`,
        `need` (B,) of them per row (-1 after)."""
        accept = self.in_not_h(h)
        got, _ = self.reject(accept, self.uniform, used, need, gen, width=width, rounds=None)
        return got

    def in_not_h(self, h: Tensor):
        """``accept(rows, cand)`` for `reject`: whether candidates (R, M) of rows `rows` do not
        satisfy concepts h (B,)."""
        words = self.data.words

        def accept(rows: Tensor, cand: Tensor) -> Tensor:
            return ~_bit(words, h[rows], cand)

        return accept

    # --- rejection ---------------------------------------------------------------------------
    def uniform(self, rows: Tensor, size: int, gen: torch.Generator) -> Tensor:
        """(R, size) random scenes of the whole bank for rows `rows`."""
        shape = (len(rows), size)
        return torch.randint(0, self.data.num_scenes, shape, device=self.device, generator=gen)

    def reject(
        self,
        accept,
        propose,
        used: Tensor,
        need: Tensor,
        gen: torch.Generator,
        *,
        width: int | None = None,
        rounds: int | None = _POOL_ROUNDS,
    ) -> tuple[Tensor, Tensor]:
        """Distinct scenes by rejection: each round, `propose(rows, size, gen)` gives `size`
        candidates (R, size) for each row still short, and those that `accept(rows, cand)`
        passes, are not in `used` (B, U), not taken yet and first of their value in the round
        are taken in order, until row b holds need[b] of them or `rounds` rounds have passed
        (None: no limit; the caller knows the accepted are plentiful). A round proposes twice
        as many as the one before (up to 16 times the first): the rows still short are those
        whose accepted scenes are rare.

        Returns:
            ``(taken (B, width) -1 padded, how many (B,))``; the taken are a uniform draw from
            the accepted scenes, in random order.
        """
        b = len(need)
        width = int(need.max()) if width is None else width
        got = torch.full((b, width), -1, dtype=torch.int64, device=self.device)
        n = torch.zeros(b, dtype=torch.int64, device=self.device)
        act = torch.nonzero(need > 0).squeeze(1)
        r = 0
        while len(act) and (rounds is None or r < rounds):
            cand = propose(act, _CANDIDATES << min(r, 4), gen)  # (A, M)
            ok = accept(act, cand) & first_occurrence(cand)
            ok &= ~(cand[:, :, None] == used[act][:, None, :]).any(2)
            ok &= ~(cand[:, :, None] == got[act][:, None, :]).any(2)
            rank = n[act][:, None] + ok.cumsum(1) - 1  # (A, M) its slot, if taken
            keep = ok & (rank < need[act][:, None])
            row = act[:, None].expand_as(cand)[keep]
            got[row, rank[keep]] = cand[keep]
            n[act] = torch.minimum(n[act] + ok.sum(1), need[act])
            act = act[n[act] < need[act]]
            r += 1
        return got, n


def take_uniform(bits: Tensor, k: Tensor, width: int, gen: torch.Generator) -> Tensor:
    """(R, width) min(k, set bits) distinct set bits of each row of bits (R, W), uniformly and
    in random order, -1 padded."""
    cum = popcount(bits).cumsum(1)
    size = cum[:, -1]
    ranks = distinct_ranks(size, torch.minimum(size, k), width, gen)
    return select_bits(bits, ranks, cum=cum)


def _rows(table: Tensor, index: Tensor) -> Tensor:
    """Rows `index` (any shape) of a 2-d `table`: (*index.shape, W), by `index_select` (a few
    times faster than advanced indexing on the CPU)."""
    return table.index_select(0, index.reshape(-1)).reshape(*index.shape, table.shape[1])


def _bit(words: Tensor, rows: Tensor, ids: Tensor) -> Tensor:
    """Bit ids (R, M) of truth rows `rows` (R,) of `words` (H, W): bool (R, M)."""
    w = torch.take(words, rows[:, None] * words.shape[1] + (ids >> 6))  # (R, M)
    return ((w >> (ids & 63)) & 1).bool()

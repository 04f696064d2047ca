"""Few-shot episodes built on demand (CURI paper, section 3 and Appendix D): a concept drawn by
its length prior, 5 + 5 positives, and hard or easy negatives for support and query, all a pure
function of (bank, split, subset, negatives, seed, index) and found with bit operations on the
bank. Every random draw is curi's own (`curi.pcg`, through the kernels of
`curi.episodes.draws`), whichever numpy is installed, and the batched path
(`curi.episodes.batch`) draws through the same functions, so the two cannot diverge."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from curi.bits import select_bits, set_bits
from curi.episodes.spec import EpisodeSpec
from curi.posterior import NUM_NEGATIVES, NUM_POSITIVES
from curi.rng import DerivedStream
from curi.splits import Split

__all__ = ["Episode", "EpisodeSampler"]
_EXACT_MAX_ALTERNATES = 32  # above this, sample the pool by rejection instead of OR-ing rows
_BATCH = 64  # candidate scenes per rejection round
_MAX_ROUNDS = 64
_MATCH_ROUNDS = 8  # rejection rounds of a matched draw before it tests every scene of its key
_BIT = (1 << np.arange(8)).astype(np.uint8)  # bit s of a row is bit s % 8 of byte s // 8
_CACHE_BYTES = 1 << 25  # the cumulative popcounts of concepts' rows a sampler keeps (int32)


@dataclass(frozen=True)
class Episode:
    """One episode. Labels are 1 for positives, 0 for negatives; each set is in a seeded random
    order (`EpisodeSampler` ``shuffle``), so a position says nothing about the label.

    Attributes:
        index: the episode's index in its sampler.
        concept: the concept's index in the bank.
        concept_text: its canonical postfix string.
        support_ids, support_labels, query_ids, query_labels: (25,) arrays by default.
        support_alternates, query_alternates: concepts of the whole bank (h excluded) true on
            all the set's positives (empty for easy negatives).
    """

    index: int
    concept: int
    concept_text: str
    support_ids: np.ndarray
    support_labels: np.ndarray
    query_ids: np.ndarray
    query_labels: np.ndarray
    support_alternates: np.ndarray
    query_alternates: np.ndarray
    bank: object = field(repr=False, compare=False, default=None)

    def support_records(self) -> list[dict]:
        """Scene records of the support set, in order."""
        return self.bank.scene_records(self.support_ids)

    def query_records(self) -> list[dict]:
        """Scene records of the query set, in order."""
        return self.bank.scene_records(self.query_ids)

    def to_dict(self, *, records: bool = True) -> dict:
        """JSON-ready form (with the scene records unless `records` is False)."""
        d = {
            "index": self.index,
            "concept": self.concept,
            "concept_text": self.concept_text,
            "support_ids": self.support_ids.tolist(),
            "support_labels": self.support_labels.tolist(),
            "query_ids": self.query_ids.tolist(),
            "query_labels": self.query_labels.tolist(),
        }
        if records:
            d["support_records"] = self.support_records()
            d["query_records"] = self.query_records()
        return d


def _matched_keys(scenes) -> np.ndarray:
    """(N,) int64 key of each scene for the ``matched`` sampler: 16 * object count + number of
    distinct colours."""
    n = np.asarray(scenes.n_objects).astype(np.int64)
    color = np.asarray(scenes.props[:, :, 1]).astype(np.int64)  # -1 in padding slots
    present = np.zeros((len(n), 9), bool)
    np.put_along_axis(present, color + 1, True, axis=1)
    return 16 * n + present[:, 1:].sum(1)


class EpisodeSampler:
    """Episodes of one subset of a split, built on demand: ``sampler[i]`` is episode i.

    The concept and positives of episode i come from one random stream and the negatives from
    another, so episode i has the same concept and positives with hard or easy negatives.

    Args:
        bank: a `ConceptBank`.
        split: a `Split` or a split name (see `curi.splits.list_splits`).
        subset: ``train``, ``val`` or ``test``.
        negatives: ``hard`` (paper Appendix D) or ``easy`` (random scenes not satisfying h).
        seed: the seed.
        query_negatives: negatives of the query set: ``hard`` / ``easy`` as the support
            (default: same as `negatives`), or ``random`` (the original release: random scenes
            not satisfying h, whatever the support used).
        num_positives: positives per set (5).
        num_negatives: negatives per set (20).
        size: number of episodes (default: paper sizes, 500,000 / 5,000 / 20,000).
        shuffle: put each set in a random order, labels alongside, drawn from (seed, split,
            subset, index) alone, so hard and easy episodes i share it. False: positives
            first (the original release's order, which hands the answer to an
            order-sensitive model). Oracles and prototypical networks are order-invariant.
        negative_sampler: `NEGATIVE_SAMPLERS`: ``paper`` (Appendix D: the default) or
            ``matched``: the same pools (hard: scenes of the alternates; easy: scenes not
            satisfying h), but negative j has the object count and the number of distinct
            colours of positive j mod num_positives, so the negatives repeat the positives'
            values and these statistics (the strongest shortcut `curi audit` finds) say
            nothing of a scene's label within an episode. When the hard pool lacks scenes of
            a value, scenes not satisfying h with it fill in; when every scene with it
            satisfies h (a concept that is the statistic), a scene of the pool whatever its
            value, or one not satisfying h.
            The concept and positives of episode i are the same for both.

    Raises:
        ConfigError: an unknown option, or a subset without concepts.
    """

    def __init__(
        self,
        bank,
        split: Split | str,
        subset: str,
        negatives: str = "hard",
        seed: int = 0,
        *,
        query_negatives: str | None = None,
        num_positives: int = NUM_POSITIVES,
        num_negatives: int = NUM_NEGATIVES,
        size: int | None = None,
        shuffle: bool = True,
        negative_sampler: str = "paper",
    ):
        spec = EpisodeSpec(
            split=split,
            subset=subset,
            negatives=negatives,
            seed=seed,
            query_negatives=query_negatives,
            negative_sampler=negative_sampler,
            num_positives=num_positives,
            num_negatives=num_negatives,
            size=size,
            shuffle=shuffle,
        )
        self._open(bank, spec.check(bank))

    @classmethod
    def from_spec(cls, bank, spec: EpisodeSpec) -> EpisodeSampler:
        """The sampler of `spec`'s episodes of `bank` (`EpisodeSpec.check` run first).

        Raises:
            ConfigError: what `EpisodeSpec.check` refuses."""
        sampler = cls.__new__(cls)
        sampler._open(bank, spec.check(bank))
        return sampler

    def _open(self, bank, spec: EpisodeSpec) -> None:
        """Set the sampler up for the checked `spec` (its split resolved)."""
        from curi.episodes import draws  # numba, loaded when a sampler is made

        self.spec, self.bank, self.split = spec, bank, spec.split
        self.subset, self.negatives, self.seed = spec.subset, spec.negatives, spec.seed
        self.query_negatives, self.negative_sampler = spec.query_negatives, spec.negative_sampler
        self.num_positives, self.num_negatives = spec.num_positives, spec.num_negatives
        self.size, self.shuffle = spec.size, spec.shuffle
        self.concepts = self.split.subset(self.subset)
        w = np.exp(np.asarray(bank.log_prior, np.float64)[self.concepts])
        self._cum = np.cumsum(w / w.sum())
        self._tag = f"{self.split.name}:{self.subset}"
        # the streams of derive_rng(seed, purpose, i), for concept and positives, negatives and
        # order: their PCG64 states, drawn from by `curi.pcg`
        self._streams = (
            DerivedStream(self.seed, f"episode:{self._tag}", "episode"),
            DerivedStream(self.seed, f"negatives:{self._tag}:{self.negatives}", "negatives"),
            DerivedStream(self.seed, f"order:{self._tag}", "order"),
        )
        self._draws = draws
        self._concepts64 = np.asarray(self.concepts, np.int64)
        self._counts64 = np.asarray(bank.counts, np.int64)
        self._labels = np.r_[
            np.ones(self.num_positives, np.int8), np.zeros(self.num_negatives, np.int8)
        ]
        self._cums: dict[int, np.ndarray] = {}  # concept -> cumulative popcount of its row
        if self._matched:
            self._key = _matched_keys(bank.scenes)
            self._key_order = np.argsort(self._key, kind="stable")
            self._key_start = np.searchsorted(
                self._key[self._key_order], np.arange(self._key.max() + 2)
            )

    def __len__(self) -> int:
        return self.size

    @property
    def prior_cdf(self) -> np.ndarray:
        """(C,) cumulative prior of the subset's concepts (`concepts` order): episode i draws
        concept ``concepts[k]`` for the first k with ``prior_cdf[k] > u``, u uniform on [0, 1)
        (`curi.models.device_sampler` draws the same way on a torch device)."""
        return self._cum

    @property
    def scene_keys(self) -> np.ndarray | None:
        """(N,) the key every scene is matched on by ``negative_sampler="matched"`` (16 x object
        count + number of distinct colours), None for the paper sampler."""
        return self._key if self._matched else None

    def __repr__(self) -> str:
        return (
            f"EpisodeSampler(split={self.split.name!r}, subset={self.subset!r}, "
            f"negatives={self.negatives!r}, seed={self.seed}, size={self.size}, "
            f"shuffle={self.shuffle}"
            + (f", negative_sampler={self.negative_sampler!r})" if self._matched else ")")
        )

    def __getitem__(self, i: int) -> Episode:
        i = int(i)
        if not 0 <= i < self.size:
            raise IndexError(f"episode {i} out of range [0, {self.size})")
        h, pos = self._positives(i)
        s_neg, s_alt, q_neg, q_alt = self._both_negatives(i, h, pos)
        npos = self.num_positives
        s_ids = np.concatenate([pos[:npos], s_neg])
        q_ids = np.concatenate([pos[npos:], q_neg])
        if self.shuffle:  # its own stream: the draws above are those of shuffle=False
            s_perm, q_perm = self._orders(i)
            s_ids, s_lab = s_ids[s_perm], self._labels[s_perm]
            q_ids, q_lab = q_ids[q_perm], self._labels[q_perm]
        else:
            s_lab, q_lab = self._labels.copy(), self._labels.copy()
        return Episode(
            index=i,
            concept=h,
            concept_text=self.bank.concepts[h],
            support_ids=s_ids,
            support_labels=s_lab,
            query_ids=q_ids,
            query_labels=q_lab,
            support_alternates=s_alt,
            query_alternates=q_alt,
            bank=self.bank,
        )

    def stacked(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Episodes [start, stop) as arrays: ``concept`` (E,), ``support_ids``,
        ``support_labels`` (E, S), ``query_ids``, ``query_labels`` (E, Q), equal to stacking
        ``self[i]``'s, built many at a time (`curi.episodes.batch`: the negatives drawn from
        the same streams, found for all episodes together)."""
        from curi.episodes.batch import stacked_episodes

        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"episodes [{start}, {stop}) out of range [0, {self.size})")
        return stacked_episodes(self, start, stop)

    def _positives(self, i: int) -> tuple[int, np.ndarray]:
        """(concept, its 2 x num_positives positives: support then query) of episode i."""
        h, ranks = self._positive_ranks(i)
        return h, select_bits(self.bank.truth_words[h], ranks, cum=self._cum_of(h))

    def _positive_ranks(self, i: int) -> tuple[int, np.ndarray]:
        """(concept, the ranks of episode i's positives among the concept's scenes)."""
        state = self._streams[0].state(i)
        h, ranks = self._draws.head(
            state, self._cum, self._concepts64, self._counts64, 2 * self.num_positives
        )
        return int(h), ranks

    def _both_negatives(self, i: int, h: int, pos: np.ndarray) -> tuple:
        """(support negatives, support alternates, query negatives, query alternates) of
        episode i, from its negatives' stream."""
        npos, row = self.num_positives, self.bank.truth_words[h]
        state = self._streams[1].state(i)
        s_neg, s_alt = self._negatives(self.negatives, h, row, pos[:npos], pos, state)
        used = np.concatenate([pos, s_neg])
        q_neg, q_alt = self._negatives(self._query_kind, h, row, pos[npos:], used, state)
        return s_neg, s_alt, q_neg, q_alt

    @property
    def _query_kind(self) -> str:
        """The kind of negatives of the query set (``random``: ``easy``)."""
        return self.query_negatives if self.query_negatives != "random" else "easy"

    def _orders(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The permutations that shuffle episode i's support and query sets."""
        n = self.num_positives + self.num_negatives
        return self._draws.order_pair(self._streams[2].state(i), n)

    def _cum_of(self, h: int) -> np.ndarray:
        """The cumulative popcount of concept h's row (`select_bits`), kept for the next
        episode of h (a split's concepts recur thousands of times in a sampler's episodes)."""
        cum = self._cums.get(h)
        if cum is None:
            if (len(self._cums) + 1) * 4 * self.bank.truth_words.shape[1] > _CACHE_BYTES:
                self._cums.clear()
            dtype = np.int32 if self.bank.num_scenes < 2**31 else np.int64  # half the bytes
            cum = self._cums[h] = np.bitwise_count(self.bank.truth_words[h]).cumsum(dtype=dtype)
        return cum

    # --- negatives --------------------------------------------------------------------------
    @property
    def _matched(self) -> bool:
        return self.negative_sampler != "paper"

    def _negatives(self, kind, h, row, positives, used, state):
        """(negative ids, alternates) for one set, drawn from the stream at `state` (advanced);
        `used`: the scenes it must leave out (int64)."""
        if self._matched:
            return self._matched_negatives(kind, h, row, positives, set(used.tolist()), state)
        if kind == "easy":
            alt_words = np.zeros(self.bank.truth_by_scene.shape[1], np.uint64)
            alternates = np.zeros(0, np.int64)
        else:  # the concepts true on every positive (`consistent_words`, positives only), but h
            alt_words = np.bitwise_and.reduce(self.bank.truth_by_scene[positives], 0)
            alt_words[h >> 6] &= ~np.uint64(1 << (h & 63))
            alternates = set_bits(alt_words)
        chosen = self._draws.negative_set(
            self.bank.truth_words,
            self.bank.truth_by_scene,
            alt_words,
            h,
            used,
            self.num_negatives,
            _EXACT_MAX_ALTERNATES,
            _BATCH,
            _MAX_ROUNDS,
            state,
        )
        return chosen, alternates

    # --- negatives matched to the positives' scene statistics (negative_sampler) -------------
    def _matched_negatives(self, kind, h, row, positives, used, state):
        """(negative ids, alternates) for one set: negative j has the `_matched_keys` key of
        positive j mod num_positives, uniform over the pool's scenes of that key."""
        row8 = row.view(np.uint8)

        def not_h(cand):
            return (row8[cand >> 3] & _BIT[cand & 7]) == 0

        alternates, accept = np.zeros(0, np.int64), not_h
        if kind == "hard":
            alt_words = np.bitwise_and.reduce(self.bank.truth_by_scene[positives], 0)
            alt_words[h >> 6] &= ~np.uint64(1 << (h & 63))
            alternates = set_bits(alt_words)
            by_scene, h_word, h_bit = self.bank.truth_by_scene, h >> 6, np.uint64(1 << (h & 63))

            def accept(cand):
                rows = by_scene[cand]
                hit = np.bitwise_or.reduce(rows & alt_words, 1) != 0
                return hit & ((rows[:, h_word] & h_bit) == 0)

        want = self._key[positives[np.arange(self.num_negatives) % len(positives)]]
        keys, need = np.unique(want, return_counts=True)
        seen, got = set(used), []
        pool = None  # the hard pool's scenes, listed when small or when rejection falls short
        if 0 < len(alternates) <= _EXACT_MAX_ALTERNATES:
            pool = self._list_pool(alternates, row)
        for k, m in zip(keys.tolist(), need.tolist(), strict=True):
            ids = self._key_order[self._key_start[k] : self._key_start[k + 1]]
            picks = []
            if len(alternates) and pool is None:
                picks = self._draw_matching(ids, accept, m, seen, state, exact=False)
                if len(picks) < m:
                    pool = self._list_pool(alternates, row)
            if len(alternates) and len(picks) < m:
                picks += _draw_distinct(pool[self._key[pool] == k], m - len(picks), seen, state)
            if len(picks) < m:  # easy, or the pool lacks scenes of this key
                picks += self._draw_matching(ids, not_h, m - len(picks), seen, state)
            if len(picks) < m and len(alternates):  # no scene of this key outside h: the pool
                picks += _draw_distinct(pool, m - len(picks), seen, state)
            if len(picks) < m:  # nor in the pool: a random scene not satisfying h
                used_now = np.fromiter(seen, np.int64, len(seen))
                short = m - len(picks)
                picks += self._draws.not_h_set(
                    row, used_now, short, self.bank.num_scenes, state
                ).tolist()
            seen.update(picks)
            got += picks
        return np.array(got, np.int64), alternates

    def _list_pool(self, alternates, row) -> np.ndarray:
        """The hard pool's scenes (of some alternate, not of h), ascending: the OR of the
        alternates' rows, one row at a time (no (alternates, W) copy)."""
        words = self.bank.truth_words
        bits = words[alternates[0]].copy()
        for a in alternates[1:].tolist():
            bits |= words[a]
        return set_bits(bits & ~row)

    def _draw_matching(self, ids, accept, m, seen, state, *, exact=True) -> list[int]:
        """Up to m distinct scenes of `ids` that `accept` passes and `seen` lacks, uniformly:
        by rejection, then (`exact`) by testing every scene of `ids`; `seen` grows."""
        got: list[int] = []
        draw = np.empty(_BATCH, np.int64)
        for _ in range(_MATCH_ROUNDS):
            self._draws.pcg.integers(state, len(ids), draw)
            cand = ids[draw]
            for c in cand[accept(cand)].tolist():
                if c not in seen:
                    seen.add(c)
                    got.append(c)
                    if len(got) == m:
                        return got
        if not exact:
            return got
        return got + _draw_distinct(ids[accept(ids)], m - len(got), seen, state)


def _draw_distinct(ids, m, seen, state) -> list[int]:
    """Up to m distinct scenes of `ids` that `seen` lacks, uniformly (`draws.distinct`
    from the stream at `state`); `seen` grows."""
    from curi.episodes.draws import distinct

    ids = ids[~np.isin(ids, np.fromiter(seen, np.int64, len(seen)))]
    got = ids[distinct(state, len(ids), min(len(ids), m))].tolist()
    seen.update(got)
    return got

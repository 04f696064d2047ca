"""Many episodes of one `EpisodeSampler` at once (`EpisodeSampler.stacked`), equal to its
episodes one by one. The concept, positives and orders are drawn episode by episode as
``sampler[i]`` draws them. The negatives of a set are, most often, the first distinct scenes
that pass a test (not satisfying h; or, hard negatives by rejection, also satisfying an
alternate) in a stream of uniform candidates, drawn in rounds from the episode's negatives
stream (`EpisodeSampler._random_not_h`, `EpisodeSampler._pool_by_rejection`). Consecutive
``rng.integers(0, N, size)`` calls draw the same numbers as one call of their total size, so
here each episode draws `_SPECULATE` candidates in one call and the rounds are run for all
episodes together on arrays. A set of another kind (an exact pool of a few alternates) is
drawn by the sampler's own code from the episode's stream where the set before left it (past
the candidates the support used, or at the state its exact pool left); an episode whose
rounds outrun its candidates is built by the sampler's own code."""

from __future__ import annotations

import numpy as np

from curi import episodes as _episodes
from curi.episodes import _BATCH, _BIT, _MAX_ROUNDS

__all__ = ["stacked_episodes"]

_SPECULATE = 640  # candidates an episode draws at once: 13 rounds of 48, or 10 of 64
_EPISODES_PER_GATHER = 128  # episodes whose candidates' scene-major rows are read at once
_NOT_H, _REJECTION, _OTHER = 0, 1, 2  # how a set's negatives are found


def stacked_episodes(sampler, start: int, stop: int) -> dict[str, np.ndarray]:
    """`EpisodeSampler.stacked`: episodes [start, stop) of `sampler` as arrays."""
    idx = range(start, stop)
    if sampler._matched or not len(idx):
        return _stack([sampler[i] for i in idx], len(idx), sampler)
    heads = [sampler._positive_ranks(i) for i in idx]
    h = np.array([c for c, _ in heads], np.int64)
    pos = _select(sampler, h, np.stack([r for _, r in heads]))
    s_neg, q_neg = _Negatives(sampler, idx, h, pos).find()
    npos = sampler.num_positives
    s_ids = np.concatenate([pos[:, :npos], s_neg], 1)
    q_ids = np.concatenate([pos[:, npos:], q_neg], 1)
    labels = np.broadcast_to(sampler._labels, s_ids.shape)
    s_lab, q_lab = labels.copy(), labels.copy()
    if sampler.shuffle:
        orders = [sampler._orders(i) for i in idx]
        s_perm = np.stack([s for s, _ in orders])
        q_perm = np.stack([q for _, q in orders])
        s_ids, s_lab = np.take_along_axis(s_ids, s_perm, 1), sampler._labels[s_perm]
        q_ids, q_lab = np.take_along_axis(q_ids, q_perm, 1), sampler._labels[q_perm]
    return {
        "concept": h,
        "support_ids": s_ids,
        "support_labels": s_lab,
        "query_ids": q_ids,
        "query_labels": q_lab,
    }


def _select(sampler, h: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """(E, R) the scenes of rank `ranks` among each episode's concept's scenes
    (`curi.bits.select_bits` of every row at once, from the sampler's cumulative popcounts):
    each rank's word by a binary search of its row's counts, then its bit in the word."""
    uniq, u = np.unique(h, return_inverse=True)
    cums = np.stack([sampler._cum_of(int(c)) for c in uniq.tolist()])  # (U, W)
    row = u[:, None]
    lo, hi = np.zeros(ranks.shape, np.int64), np.full(ranks.shape, cums.shape[1])
    while (lo < hi).any():  # the first word whose count exceeds the rank
        mid = (lo + hi) // 2
        right = (lo < hi) & (cums[row, np.minimum(mid, cums.shape[1] - 1)] <= ranks)
        lo, hi = np.where(right, mid + 1, lo), np.where(right | (lo >= hi), hi, mid)
    words = sampler.bank.truth_words[h[:, None], lo]  # (E, R)
    within = ranks - (cums[row, lo] - np.bitwise_count(words))  # the rank among its bits
    bits = np.unpackbits(words[..., None].view(np.uint8), -1, bitorder="little")
    return lo * 64 + np.argmax(np.cumsum(bits, -1) > within[..., None], -1)


def _stack(eps: list, n: int, sampler) -> dict[str, np.ndarray]:
    """Episodes stacked as `stacked_episodes` returns them."""
    keys = ("support_ids", "support_labels", "query_ids", "query_labels")
    if n:
        out = {k: np.stack([getattr(e, k) for e in eps]) for k in keys}
    else:
        size = sampler.num_positives + sampler.num_negatives
        dtypes = (np.int64, np.int8, np.int64, np.int8)
        out = {k: np.zeros((0, size), d) for k, d in zip(keys, dtypes, strict=True)}
    return {"concept": np.array([e.concept for e in eps], np.int64), **out}


class _Negatives:
    """The support and query negatives of episodes (concepts `h`, positives `pos`)."""

    def __init__(self, sampler, idx: range, h: np.ndarray, pos: np.ndarray):
        self.s, self.idx, self.h, self.pos = sampler, idx, h, pos
        bank = sampler.bank
        self.n, self.k = bank.num_scenes, sampler.num_negatives
        self.by_scene, self.words8 = bank.truth_by_scene, bank.truth_words.view(np.uint8)
        npos = sampler.num_positives
        kinds = (sampler.negatives, sampler._query_kind)
        sets = [
            self._kind_of(kind, pos[:, j * npos : (j + 1) * npos]) for j, kind in enumerate(kinds)
        ]
        (self.s_type, self.s_alt), (self.q_type, self.q_alt) = sets

    def _kind_of(self, kind: str, positives: np.ndarray):
        """(E,) how each episode's set is found, and (E, ceil(H / 64)) its alternates' words
        (the concepts true on all its positives, h excepted: `EpisodeSampler._negatives`)."""
        e = len(self.h)
        if kind == "easy":
            return np.full(e, _NOT_H), None
        alt = np.bitwise_and.reduce(self.by_scene[positives], 1)  # (E, W)
        alt[np.arange(e), self.h >> 6] &= ~(np.uint64(1) << (self.h & 63).astype(np.uint64))
        n_alt = np.bitwise_count(alt).sum(1)
        kinds = np.where(n_alt > _episodes._EXACT_MAX_ALTERNATES, _REJECTION, _OTHER)
        return np.where(n_alt == 0, _NOT_H, kinds), alt  # no alternate: random, not h

    def find(self) -> tuple[np.ndarray, np.ndarray]:
        """((E, k) support negatives, (E, k) query negatives): the sets of the fast kinds
        found for all episodes together, each exact pool by the sampler's own code on the
        episode's stream where the set before left it."""
        e, k, npos = len(self.h), self.k, self.s.num_positives
        s_neg, q_neg, ok = np.full((e, k), -1), np.full((e, k), -1), np.ones(e, bool)
        # the support: fast sets from the first candidates of each episode's stream
        fast = np.flatnonzero(self.s_type != _OTHER)
        cand = self._candidates(fast)
        s_neg[fast], at, ok[fast] = self._set(fast, cand, np.zeros(len(fast), np.int64), "s")
        left: dict[int, object] = {}  # where each stream is: (candidates' row, used) or a state
        left.update((j, (row, int(at[row]))) for row, j in enumerate(fast.tolist()))
        for j in np.flatnonzero(self.s_type == _OTHER).tolist():
            rng = self._stream(j)
            s_neg[j] = self._one_set(self.s.negatives, j, self.pos[j, :npos], (), rng)
            left[j] = rng.bit_generator.state
        # the query: fast sets from the candidates left, or drawn where an exact pool left off
        fast_q = np.flatnonzero((self.q_type != _OTHER) & ok)
        cand_q = np.empty((len(fast_q), _SPECULATE), np.int64)
        at_q = np.zeros(len(fast_q), np.int64)
        for row, j in enumerate(fast_q.tolist()):
            if isinstance(left[j], dict):
                cand_q[row] = self._stream(j, left[j]).integers(0, self.n, _SPECULATE)
            else:
                cand_q[row], at_q[row] = cand[left[j][0]], left[j][1]
        q_neg[fast_q], _, ok[fast_q] = self._set(fast_q, cand_q, at_q, "q", s_neg[fast_q])
        for j in np.flatnonzero((self.q_type == _OTHER) & ok).tolist():
            place = left[j] if isinstance(left[j], dict) else left[j][1]
            rng = self._stream(j, place)
            q_neg[j] = self._one_set(self.s._query_kind, j, self.pos[j, npos:], s_neg[j], rng)
        for j in np.flatnonzero(~ok).tolist():  # rounds that outran the candidates
            got = self.s._both_negatives(self.idx[j], int(self.h[j]), self.pos[j])
            s_neg[j], q_neg[j] = got[0], got[2]
        return s_neg, q_neg

    def _candidates(self, eps: np.ndarray) -> np.ndarray:
        """(F, `_SPECULATE`) the first candidates of the fresh negatives stream of `eps`."""
        cand = np.empty((len(eps), _SPECULATE), np.int64)
        for row, j in enumerate(eps.tolist()):
            cand[row] = self._stream(j).integers(0, self.n, _SPECULATE)
        return cand

    def _stream(self, j: int, where=None) -> np.random.Generator:
        """Episode j's negatives stream: fresh, or at a saved state, or past the first `where`
        candidates."""
        rng = self.s._streams[1].rng(self.idx[j])
        if isinstance(where, dict):
            rng.bit_generator.state = where
        elif where is not None:
            rng.integers(0, self.n, where)
        return rng

    def _one_set(self, kind, j, positives, negatives, rng) -> np.ndarray:
        """One set's negatives by the sampler's own code (`EpisodeSampler._negatives`),
        the episode's positives and `negatives` (the support's) used."""
        used = set(self.pos[j].tolist()) | set(np.asarray(negatives).tolist())
        h = int(self.h[j])
        return self.s._negatives(kind, h, self.s.bank.truth_words[h], positives, used, rng)[0]

    def _set(self, eps, cand, at, which, support=None):
        """((F, k) negatives, (F,) where the next set's candidates start, (F,) whether
        found within the candidates) of the support (`which` ``s``) or query set (``q``,
        the `support` negatives used) of the episodes `eps` (a set not found: -1s)."""
        used = self.pos[eps] if support is None else np.concatenate([self.pos[eps], support], 1)
        types = self.s_type if which == "s" else self.q_type
        alt = self.s_alt if which == "s" else self.q_alt
        got = np.full((len(eps), self.k), -1)
        end, ok = at.copy(), np.zeros(len(eps), bool)
        for kind, size, rounds in (
            (_NOT_H, 2 * self.k + 8, None),
            (_REJECTION, _BATCH, _MAX_ROUNDS),
        ):
            part = np.flatnonzero(types[eps] == kind)
            if len(part) == 0:
                continue
            alt_part = alt[eps[part]] if kind == _REJECTION else None
            found = _Rounds(self, eps[part], alt_part, size, rounds)
            got[part], end[part], ok[part] = found.run(cand[part], at[part], used[part])
        return got, end, ok

    def not_h(self, eps: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """(A, B) whether each candidate of each episode does not satisfy its concept."""
        byte = self.words8[self.h[eps][:, None], cand >> 3]
        return (byte & _BIT[cand & 7]) == 0

    def in_pool(self, eps: np.ndarray, alt: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """(A, B) whether each candidate satisfies an alternate and not the concept
        (`EpisodeSampler._pool_by_rejection`), a few episodes' rows at a time."""
        out = np.empty(cand.shape, bool)
        for a in range(0, len(eps), _EPISODES_PER_GATHER):
            b = slice(a, a + _EPISODES_PER_GATHER)
            rows = self.by_scene[cand[b]]  # (A, B, W)
            hit = np.bitwise_or.reduce(rows & alt[b][:, None, :], 2) != 0
            h = self.h[eps[b]]
            h_words = np.take_along_axis(rows, (h >> 6)[:, None, None], 2)[:, :, 0]
            h_bit = np.uint64(1) << (h & 63).astype(np.uint64)
            out[b] = hit & ((h_words & h_bit[:, None]) == 0)
        return out


class _Rounds:
    """One set's negatives of some episodes, found round after round of `size` candidates
    as the sampler's loops find them: a candidate is kept when it passes the test, is not
    used (the positives, the support's negatives), and is not kept already; the set ends
    with the round of its k-th; the rest of that round is never looked at."""

    def __init__(self, neg: _Negatives, eps: np.ndarray, alt, size: int, rounds: int | None):
        self.neg, self.eps, self.alt, self.size, self.rounds = neg, eps, alt, size, rounds

    def run(self, cand: np.ndarray, at: np.ndarray, used: np.ndarray):
        """((A, k) negatives, (A,) where the set's rounds end, (A,) found)."""
        k, a = self.neg.k, len(self.eps)
        got, count = np.full((a, k), -1), np.zeros(a, np.int64)
        end, ok = at.copy(), np.zeros(a, bool)
        active, r = np.arange(a), 0
        while len(active) and (self.rounds is None or r < self.rounds):
            first = at[active] + r * self.size
            fits = first + self.size <= cand.shape[1]
            active, first = active[fits], first[fits]  # the others: by the sampler's code
            if len(active) == 0:
                break
            c = np.take_along_axis(cand[active], first[:, None] + np.arange(self.size), 1)
            fresh = self._passes(active, c) & ~_seen(c, used[active], got[active])
            rank = np.cumsum(fresh, 1)
            take = fresh & (rank <= (k - count[active])[:, None])
            rows, cols = np.nonzero(take)
            got[active[rows], count[active][rows] + rank[rows, cols] - 1] = c[rows, cols]
            count[active] += take.sum(1)
            done = count[active] == k
            end[active[done]], ok[active[done]] = first[done] + self.size, True
            active, r = active[~done], r + 1
        return got, end, ok

    def _passes(self, active: np.ndarray, c: np.ndarray) -> np.ndarray:
        eps = self.eps[active]
        if self.alt is None:
            return self.neg.not_h(eps, c)
        return self.neg.in_pool(eps, self.alt[active], c)


def _seen(c: np.ndarray, used: np.ndarray, got: np.ndarray) -> np.ndarray:
    """(A, B) whether each candidate is used, kept already, or repeats an earlier candidate
    of its round (which, passing, was kept before it; failing, fails it too)."""
    known = np.concatenate([used, got], 1)  # (A, U); -1 where nothing is kept yet
    seen = (c[:, :, None] == known[:, None, :]).any(2)
    earlier = np.tri(c.shape[1], k=-1, dtype=bool)  # [j, j']: j' before j
    return seen | ((c[:, :, None] == c[:, None, :]) & earlier).any(2)

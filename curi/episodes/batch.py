"""Many episodes of one `EpisodeSampler` at once (`EpisodeSampler.stacked`), equal to its
episodes one by one. Every draw is the sampler's own, made by `curi.episodes.draws` (numba,
`curi.pcg`) from each episode's stream states (`DerivedStream.states`): the concept and
positives, the orders, and the negatives. The negatives of a set are, most often, the first
distinct scenes that pass a test (not satisfying h; or, hard negatives by rejection, also
satisfying an alternate) in a stream of uniform candidates, drawn in rounds from the
episode's negatives stream (`EpisodeSampler._random_not_h`, `_pool_by_rejection`).
Consecutive ``rng.integers(0, N, size)`` calls draw the same numbers as one call of their
total size, so each episode draws `_SPECULATE` candidates at once and its rounds read them. An
exact pool of a few alternates is drawn from the episode's stream where the set before left
it (past the candidates the support used, or where its exact pool left it); an episode whose
rounds outrun its candidates is built by the sampler's own code."""

from __future__ import annotations

import logging

import numpy as np

from curi.episodes import sampler as _episodes
from curi.episodes.sampler import _BATCH, _MAX_ROUNDS

__all__ = ["stacked_episodes"]

log = logging.getLogger(__name__)

_SPECULATE = 640  # candidates an episode draws at once: 13 rounds of 48, or 10 of 64
_NOT_H, _REJECTION, _OTHER = 0, 1, 2  # how a set's negatives are found


def stacked_episodes(sampler, start: int, stop: int) -> dict[str, np.ndarray]:
    """`EpisodeSampler.stacked`: episodes [start, stop) of `sampler` as arrays."""
    idx = range(start, stop)
    if sampler._matched and len(idx) and not getattr(sampler, "_told", False):
        sampler._told = True  # one line per sampler, not one per chunk
        log.info(
            "negative_sampler=matched: episodes built one at a time by the reference sampler "
            "(the same episodes; the batched path draws paper negatives only)"
        )
    if sampler._matched or not len(idx):
        return _stack([sampler[i] for i in idx], len(idx), sampler)
    from curi.episodes import draws

    npos, bank = sampler.num_positives, sampler.bank
    concepts, counts = (np.asarray(a, np.int64) for a in (sampler.concepts, bank.counts))
    first = sampler._streams[0].states(start, stop)  # concept and positives
    h, ranks = draws.heads(first, sampler.prior_cdf, concepts, counts, 2 * npos)
    pos = draws.select(np.asarray(bank.truth_words), h, ranks)
    s_neg, q_neg = _Negatives(sampler, idx, h, pos).find()
    s_ids = np.concatenate([pos[:, :npos], s_neg], 1)
    q_ids = np.concatenate([pos[:, npos:], q_neg], 1)
    labels = np.broadcast_to(sampler._labels, s_ids.shape)
    s_lab, q_lab = labels.copy(), labels.copy()
    if sampler.shuffle:
        size = sampler.num_positives + sampler.num_negatives
        s_perm, q_perm = draws.orders(sampler._streams[2].states(start, stop), size)
        s_ids, s_lab = np.take_along_axis(s_ids, s_perm, 1), sampler._labels[s_perm]
        q_ids, q_lab = np.take_along_axis(q_ids, q_perm, 1), sampler._labels[q_perm]
    return {
        "concept": h,
        "support_ids": s_ids,
        "support_labels": s_lab,
        "query_ids": q_ids,
        "query_labels": q_lab,
    }


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
        self.by_scene, self.words = np.asarray(bank.truth_by_scene), np.asarray(bank.truth_words)
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
        found for all episodes together, each exact pool drawn (`draws.exact_set`)
        from the episode's stream where the set before left it."""
        from curi.episodes import draws
        from curi.pcg import integers

        e, k, n = len(self.h), self.k, self.n
        s_neg, q_neg, ok = np.full((e, k), -1), np.full((e, k), -1), np.ones(e, bool)
        states = self.s._streams[1].states(self.idx.start, self.idx.stop)  # fresh; advanced
        fresh = states.copy()
        # the support: fast sets from the first candidates of each stream, exact pools drawn
        fast = np.flatnonzero(self.s_type != _OTHER)
        cand = draws.candidates(fresh[fast], n, _SPECULATE, np.zeros(len(fast), np.int64))
        s_neg[fast], at, ok[fast] = self._set(fast, cand, np.zeros(len(fast), np.int64), "s")
        row_of = np.full(e, -1)  # an episode's row in `cand`, if its support was fast
        row_of[fast] = np.arange(len(fast))
        for j in np.flatnonzero(self.s_type == _OTHER).tolist():
            s_neg[j] = self._exact(j, self.s_alt[j], self.pos[j], states[j])
        # the query: fast sets from the candidates left, or drawn where an exact pool left off
        fast_q = np.flatnonzero((self.q_type != _OTHER) & ok)
        rows = row_of[fast_q]
        cand_q = np.empty((len(fast_q), _SPECULATE), np.int64)
        at_q = np.zeros(len(fast_q), np.int64)
        cand_q[rows >= 0], at_q[rows >= 0] = cand[rows[rows >= 0]], at[rows[rows >= 0]]
        after = fast_q[rows < 0]
        cand_q[rows < 0] = draws.candidates(states[after], n, _SPECULATE, np.zeros_like(after))
        q_neg[fast_q], _, ok[fast_q] = self._set(fast_q, cand_q, at_q, "q", s_neg[fast_q])
        for j in np.flatnonzero((self.q_type == _OTHER) & ok).tolist():
            st = states[j]
            if row_of[j] >= 0:  # past the candidates the support used
                st = fresh[j].copy()
                integers(st, n, np.empty(at[row_of[j]], np.int64))
            used = np.concatenate([self.pos[j], s_neg[j]])
            q_neg[j] = self._exact(j, self.q_alt[j], used, st)
        for j in np.flatnonzero(~ok).tolist():  # rounds that outran the candidates
            got = self.s._both_negatives(self.idx[j], int(self.h[j]), self.pos[j])
            s_neg[j], q_neg[j] = got[0], got[2]
        return s_neg, q_neg

    def _exact(self, j: int, alt: np.ndarray, used: np.ndarray, state: np.ndarray):
        """Episode j's negatives from the exact pool of its alternates `alt` (packed), the
        scenes `used` left out, drawn from its stream at `state` (advanced)."""
        from curi.episodes.draws import exact_set

        return exact_set(self.words, alt, int(self.h[j]), used, self.k, self.n, state)

    def _set(self, eps, cand, at, which, support=None):
        """((F, k) negatives, (F,) where the next set's candidates start, (F,) whether
        found within the candidates) of the support (`which` ``s``) or query set (``q``,
        the `support` negatives used) of the episodes `eps` (a set not found: -1s), found
        round after round (`draws.rounds`)."""
        from curi.episodes.draws import rounds

        used = self.pos[eps] if support is None else np.concatenate([self.pos[eps], support], 1)
        types = self.s_type if which == "s" else self.q_type
        alt = self.s_alt if which == "s" else self.q_alt
        got = np.full((len(eps), self.k), -1)
        end, ok = at.copy(), np.zeros(len(eps), bool)
        for kind, size, most in ((_NOT_H, 2 * self.k + 8, -1), (_REJECTION, _BATCH, _MAX_ROUNDS)):
            part = np.flatnonzero(types[eps] == kind)
            if len(part) == 0:
                continue
            on = eps[part]
            alt_part = alt[on] if kind == _REJECTION else np.zeros((len(part), 0), np.uint64)
            args = (cand[part], at[part], used[part], self.k, size, most, alt_part, self.h[on])
            got[part], end[part], ok[part] = rounds(*args, self.by_scene, self.words)
        return got, end, ok

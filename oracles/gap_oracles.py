"""The gap table's oracles as `curi.oracles.gap` scores them, a chunk of a row's episodes at a
time: the chunk (its episodes stacked), the clock that charges each stage its seconds, and the
strong / weak (`_PosteriorOracle`, with the AP cache they share), random and prior-only oracles."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from curi.episodes import EpisodeSampler
from curi.oracles.eval_ap import oracle_aps, random_aps
from curi.oracles.eval_set import EvalSet
from curi.oracles.oracle import Oracle, PriorOnlyOracle
from curi.posterior import Posteriors
from curi.rng import DerivedStream

__all__ = ["STAGES", "GapOracle"]

# where a row's time goes: building episodes, posteriors, query-set predictive, mAP, random
# oracle, prior-only oracle
STAGES = ("episodes", "posterior", "query", "map", "random", "prior")

_MAX_CACHED_APS = 200_000  # (concept, posterior) -> AP entries a process keeps


# --- one chunk of a (split, negatives) row ---------------------------------------------------
@dataclass(frozen=True)
class _Chunk:
    """Episodes [start, start + E) of a row, stacked: what every oracle scores."""

    start: int
    negatives: str
    concepts: np.ndarray  # (E,) int64
    s_ids: np.ndarray  # (E, S) support scenes
    s_labels: np.ndarray  # (E, S)
    q_ids: np.ndarray  # (E, Q) query scenes
    q_labels: np.ndarray  # (E, Q) int8

    @classmethod
    def of(cls, sampler: EpisodeSampler, negatives: str, start: int, stop: int) -> _Chunk:
        got = sampler.stacked(start, stop)  # = the episodes sampler[i], stacked
        return cls(start, negatives, got["concept"], *(got[k] for k in _EPISODE_ARRAYS))


_EPISODE_ARRAYS = ("support_ids", "support_labels", "query_ids", "query_labels")


class _Clock:
    """Seconds per stage (`STAGES`) of scoring one chunk: `lap` charges the time since the
    last lap (or the start) to a stage."""

    def __init__(self):
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self._since = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] += now - self._since
        self._since = now


class GapOracle(Protocol):
    """One oracle of the gap table, as the table scores it a chunk of episodes at a time.

    `name` is the suffix of its columns (``map_<name>``, ``cba_<name>``; `_ORACLES`).
    `score` returns the (E,) AP on the evaluation set and the (E, Q) predictive on the query
    sets of the chunk's episodes, charging its time to `clock` (stages of `STAGES`). Its
    numbers are those of scoring the episodes one by one, whichever chunks came before
    (an oracle may keep caches between chunks, never numbers that depend on them).
    """

    name: str

    def score(self, chunk: _Chunk, clock: _Clock) -> tuple[np.ndarray, np.ndarray]: ...


class _APCache:
    """The AP on the evaluation set of a posterior against an episode's concept, kept per
    (negatives, support size, positives in the support, concept, consistent hypotheses): the
    same concept often comes with the same consistent hypotheses, and the strong and weak
    oracles often agree. A new one is scored with the others of its call (`oracle_aps`)."""

    def __init__(self, ev: EvalSet, groups: np.ndarray):
        self.ev, self.groups = ev, groups
        self._aps: dict[tuple, float] = {}

    def __call__(self, chunk: _Chunk, post: Posteriors) -> np.ndarray:
        """(E,) AP of each episode's posterior in `post` against its concept."""
        if len(self._aps) > _MAX_CACHED_APS:  # before the look-ups: every key read is there
            self._aps.clear()
        key = (chunk.negatives, chunk.s_labels.shape[1])
        n_pos = chunk.s_labels.astype(bool).sum(1).tolist()
        idx, offsets = post.idx, post.offsets
        keys = [
            (key, n, h, idx[offsets[j] : offsets[j + 1]].tobytes())
            for j, (n, h) in enumerate(zip(n_pos, chunk.concepts.tolist(), strict=True))
        ]
        todo: dict[tuple, int] = {}  # new key -> its first episode
        for j, at in enumerate(keys):
            if at not in self._aps:
                todo.setdefault(at, j)
        if todo:
            which = np.array(list(todo.values()))
            aps = oracle_aps(self.ev, chunk.concepts[which], post.select(which), self.groups)
            self._aps.update(zip(todo, aps.tolist(), strict=True))
        return np.array([self._aps[at] for at in keys])


@dataclass(frozen=True)
class _PosteriorOracle:
    """The strong or weak oracle: its posterior given each episode's support set, scored by
    its predictive on the query set and its AP on the evaluation set."""

    name: str
    oracle: Oracle
    aps: _APCache

    def score(self, chunk: _Chunk, clock: _Clock) -> tuple[np.ndarray, np.ndarray]:
        post = self.oracle.posteriors(chunk.s_ids, chunk.s_labels)
        clock.lap("posterior")
        q_scores = post.predictive(self.oracle.bank, chunk.q_ids)
        clock.lap("query")
        ap = self.aps(chunk, post)
        clock.lap("map")
        return ap, q_scores


@dataclass(frozen=True)
class _RandomOracle:
    """The random oracle: uniform scores, drawn from episode i's own stream of `stream` (the
    same whichever chunk holds the episode)."""

    ev: EvalSet
    n_pos_eval: np.ndarray  # (H,) positives of each concept on the evaluation set
    stream: DerivedStream
    name: str = "random"

    def score(self, chunk: _Chunk, clock: _Clock) -> tuple[np.ndarray, np.ndarray]:
        """(E,) APs of uniform scores on the evaluation set and (E, Q) uniform query scores,
        positives first as the episode lists them unshuffled."""
        from curi.oracles.loops import random_oracle_draws

        m, q_labels = len(self.ev), chunk.q_labels
        n_pos = self.n_pos_eval[chunk.concepts].astype(np.int64)
        states = self.stream.states(chunk.start, chunk.start + len(n_pos))
        picks, scores = random_oracle_draws(states, n_pos, m, q_labels.shape[1])
        ap = random_aps(picks, n_pos, m)
        out = np.empty(q_labels.shape)
        order = np.argsort(-q_labels, axis=1, kind="stable")  # positives first: as unshuffled
        np.put_along_axis(out, order, scores, axis=1)
        clock.lap("random")
        return ap, out


@dataclass(frozen=True)
class _PriorOnly:
    """The prior-only oracle: its AP per concept and its predictive per scene (the same in
    every episode, each computed once: `PriorOnlyOracle`)."""

    oracle: PriorOnlyOracle
    ev: EvalSet
    name: str = "prior"

    def score(self, chunk: _Chunk, clock: _Clock) -> tuple[np.ndarray, np.ndarray]:
        concepts, q_ids = chunk.concepts.tolist(), chunk.q_ids
        aps = {h: self.oracle.eval_average_precision(self.ev, h) for h in set(concepts)}
        ap = np.array([aps[h] for h in concepts])
        q_scores = self.oracle.predictive(q_ids.reshape(-1)).reshape(q_ids.shape)
        clock.lap("prior")
        return ap, q_scores


_last_prior_only: list = []  # [(bank, prior, oracle)]: the last prior-only oracle of this process


def _prior_only(bank, prior: str) -> PriorOnlyOracle:
    """The prior-only oracle of (bank, prior), kept for the next table or row of the same
    bank in this process, so its per-scene and per-concept caches carry over (its scores do
    not depend on the split or the negatives); its per-scene cache is shared with the
    processes forked later (a pool's workers)."""
    last = _last_prior_only[0] if _last_prior_only else (None, None, None)
    if last[0] is not bank or last[1] != prior:
        oracle = Oracle.prior_only(bank, prior=prior)
        oracle.share_cache()
        _last_prior_only[:] = [(bank, prior, oracle)]
    return _last_prior_only[0][2]

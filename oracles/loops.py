"""The few loops of the gap report that numpy cannot run on whole arrays, compiled by numba
(a dependency of librosa, so of every install); the machine code is cached beside this file
after the first call. Each loop makes the same floating-point operations, in the same order,
as the numpy code it replaces, so the numbers are equal to the bits."""

from __future__ import annotations

import numpy as np

from curi import pcg
from curi.bit_loops import lowest, popcount, set_bits_rows
from curi.kernel import kernel

__all__ = ["bit_scores", "byte_terms", "cells", "random_oracle_draws", "rank_terms"]


@kernel
def _score_run(out, start, stop, scenes, e, rows, block_rows, tables, first, count):
    """Add to ``out[i]``, i in [start, stop), the score of scene ``scenes[i]`` under the
    posterior of episode e: the sum, block by block of 8 synonym groups in order from 0.0,
    of ``tables[t, code]`` where t is the episode's block (``first[e] + b``) and bit k of
    `code` says whether the scene holds the block's group k (row ``block_rows[8 t + k]`` of
    the packed `rows`). This is `curi.oracles.metrics._scene_scores` read at a few scenes,
    without the byte code of every scene (`curi.bits.byte_codes`); scenes in ascending
    order have the 8 words of a block read once per word."""
    one = np.uint64(1)
    words = np.zeros(8, np.uint64)
    n = count[e]
    for b in range((n + 7) // 8):
        t = first[e] + b
        held = min(8, n - 8 * b)
        last = -1
        for i in range(start, stop):
            word = scenes[i] >> 6
            if word != last:
                for k in range(held):
                    words[k] = rows[block_rows[8 * t + k], word]
                last = word
            bit = np.uint64(scenes[i] & 63)
            code = 0
            for k in range(held):
                code |= int((words[k] >> bit) & one) << k
            out[i] += tables[t, code]


@kernel
def bit_scores(rows, block_rows, tables, first, count, sets, owner):  # pragma: no cover
    """((P,) row, (P,) scene, (P,) score): the set bits of the packed rows `sets`
    (`curi.bit_loops.set_bits_rows`: row by row, ascending) and their scores, row r's under
    the posterior of episode ``owner[r]`` (`_score_run`: the blocks of 8 groups of episode e
    are ``first[e]`` on, ``count[e]`` groups)."""
    row, scenes = set_bits_rows(sets)
    out = np.zeros(len(scenes))
    start = 0
    while start < len(row):
        stop = start
        while stop < len(row) and row[stop] == row[start]:
            stop += 1
        e = owner[row[start]]
        _score_run(out, start, stop, scenes, e, rows, block_rows, tables, first, count)
        start = stop
    return row, scenes, out


@kernel
def random_oracle_draws(states, n_pos, m, q):  # pragma: no cover (compiled)
    """The random oracle's draws of E episodes, each from its own stream (`states`, one row
    each, advanced in place): ``rng.choice(m, n_pos[e], replace=False)`` then
    ``rng.random(q)`` (`curi.oracles.metrics.random_average_precision` and the query
    scores). Returns the picks, episode after episode, and the (E, q) scores."""
    ends = np.cumsum(n_pos)
    picks = np.empty(ends[-1] if len(ends) else 0, np.int64)
    scores = np.empty((len(n_pos), q))
    for e in range(len(n_pos)):
        s = states[e]
        drawn = pcg.choice(s, m, n_pos[e])
        for j in range(n_pos[e]):  # (element by element: an array assignment compiles slowly)
            picks[ends[e] - n_pos[e] + j] = drawn[j]
        pcg.random(s, scores[e])
    return picks, scores


@kernel
def rank_terms(picks, ends, m):  # pragma: no cover (compiled)
    """The terms of `curi.oracles.metrics.random_average_precision`'s mean, episode after
    episode: each episode's picks (``picks[ends[e - 1]:ends[e]]``, distinct ranks less 1, of
    `m`) in ascending order, the k-th (from 1) giving ``k / rank``: the picks set as bits of
    m, read back word by word."""
    out = np.empty(len(picks))
    marked = np.zeros((m + 63) // 64, np.uint64)
    start = 0
    for e in range(len(ends)):
        for p in picks[start : ends[e]]:
            marked[p >> 6] |= np.uint64(1) << np.uint64(p & 63)
        k = start
        for w in range(len(marked)):
            x = marked[w]
            marked[w] = 0
            while x:
                r = 64 * w + lowest(x)
                out[k] = (k - start + 1) / (r + 1)
                k += 1
                x &= x - np.uint64(1)
        start = ends[e]
    return out


@kernel
def cells(rows, all_scenes, labels, reps, weights, start, count, max_cells):  # pragma: no cover
    """The partition of the evaluation set by each episode's groups (at most 8; episode e's
    are ``reps[start[e]:start[e] + count[e]]``, rows of `rows`, weighing `weights`): for
    every signature (which groups hold a scene) that some scene has, its score (the weights
    of its groups added in order from 0.0) and its scenes and positives (``labels[e]``).
    Each word of scenes is split group by group, empty parts dropped. Returns ((n,) whether
    an episode has at most `max_cells` signatures, and (owner, score, n_pos, n_tot) of the
    signatures of those that do)."""
    n = len(start)
    fits = np.zeros(n, np.bool_)
    owner = np.empty(n * max_cells, np.int64)
    score = np.empty(n * max_cells)
    n_pos = np.empty(n * max_cells, np.int64)
    n_tot = np.empty(n * max_cells, np.int64)
    tot, pos = np.zeros(256, np.int64), np.zeros(256, np.int64)
    stack_v = np.empty(32, np.uint64)
    stack_d = np.empty(32, np.int64)
    stack_s = np.empty(32, np.int64)
    out = 0
    for e in range(n):
        g0, k = start[e], count[e]
        for sig in range(256):
            tot[sig], pos[sig] = 0, 0
        for w in range(len(all_scenes)):
            top = 0
            stack_v[0], stack_d[0], stack_s[0] = all_scenes[w], 0, 0
            while top >= 0:
                v, d, sig = stack_v[top], stack_d[top], stack_s[top]
                top -= 1
                if d == k:
                    tot[sig] += popcount(v)
                    pos[sig] += popcount(v & labels[e, w])
                    continue
                row = rows[reps[g0 + d], w]
                inside, outside = v & row, v & ~row
                if outside:
                    top += 1
                    stack_v[top], stack_d[top], stack_s[top] = outside, d + 1, sig
                if inside:
                    top += 1
                    stack_v[top], stack_d[top], stack_s[top] = inside, d + 1, sig | (1 << d)
        found = 0
        for sig in range(1 << k):
            if tot[sig]:
                found += 1
        if found > max_cells:
            continue
        fits[e] = True
        for sig in range(1 << k):
            if tot[sig]:
                s = 0.0
                for d in range(k):
                    if sig >> d & 1:
                        s += weights[g0 + d]
                owner[out], score[out], n_pos[out], n_tot[out] = e, s, pos[sig], tot[sig]
                out += 1
    return fits, owner[:out], score[:out], n_pos[:out], n_tot[:out]


@kernel
def byte_terms(row_bytes, scenes, tables):  # pragma: no cover (compiled)
    """(len(scenes), B) the table entry of each of the first B bytes of each scene's row
    (``row_bytes``: the scene-major truth as bytes; ``tables``: B tables of 256 entries one
    after another): the terms `PriorOnlyOracle.predictive` sums."""
    n_bytes = len(tables) // 256
    out = np.empty((len(scenes), n_bytes))
    for i in range(len(scenes)):
        row = row_bytes[scenes[i]]
        for b in range(n_bytes):
            out[i, b] = tables[256 * b + row[b]]
    return out

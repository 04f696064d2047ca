"""The few loops of the gap report that numpy cannot run on whole arrays, compiled by numba
(a dependency of librosa, so of every install); the machine code is cached beside this file
after the first call. Each loop makes the same floating-point operations, in the same order,
as the numpy code it replaces, so the numbers are equal to the bits."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["scores_at"]


@numba.njit(cache=True, nogil=True)
def scores_at(rows, block_rows, tables, first, count, pe, pu):  # pragma: no cover (compiled)
    """(P,) the score of scene ``pu[i]`` under the posterior of episode ``pe[i]``: the sum,
    block by block of 8 synonym groups in order from 0.0, of ``tables[t, code]`` where t is
    the episode's block (``first[e] + b``) and bit k of `code` says whether the scene holds
    the block's group k (row ``block_rows[8 t + k]`` of the packed `rows`). This is
    `curi.oracles.metrics._scene_scores` read at a few scenes, without the byte code of
    every scene (`curi.bits.byte_codes`). An episode's pairs come in runs, each run's scenes
    ascending (a run's 8 words of a block are read once per word of scenes)."""
    out = np.zeros(len(pe))
    one = np.uint64(1)
    words = np.zeros(8, np.uint64)
    start = 0
    while start < len(pe):
        e = pe[start]
        stop = start
        while stop < len(pe) and pe[stop] == e:
            stop += 1
        n = count[e]
        for b in range((n + 7) // 8):
            t = first[e] + b
            held = min(8, n - 8 * b)
            last = -1
            for i in range(start, stop):
                word = pu[i] >> 6
                if word != last:
                    for k in range(held):
                        words[k] = rows[block_rows[8 * t + k], word]
                    last = word
                bit = np.uint64(pu[i] & 63)
                code = 0
                for k in range(held):
                    code |= int((words[k] >> bit) & one) << k
                out[i] += tables[t, code]
        start = stop
    return out

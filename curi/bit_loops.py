"""Bit operations on packed uint64 words for the loops numba compiles (`curi.pcg`,
`curi.episodes.draws`, `curi.posterior_loops`, `curi.oracles.loops`): the popcount of a word,
the position of its lowest set bit, and the set bits of many packed rows."""

from __future__ import annotations

import numpy as np

from curi.kernel import kernel

__all__ = ["lowest", "popcount", "set_bits_rows"]

_ONE = np.uint64(1)


@kernel
def popcount(x):
    """The number of set bits of a uint64 (the SWAR sum, which LLVM turns into one
    instruction where the machine has it)."""
    x = x - ((x >> _ONE) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@kernel
def lowest(x):
    """The position of the lowest set bit of a nonzero uint64."""
    return popcount((x & (~x + _ONE)) - _ONE)


@kernel
def set_bits_rows(words):  # pragma: no cover (compiled)
    """((P,) row, (P,) position) of every set bit of the packed rows (R, W), row by row,
    ascending (`curi.bits.set_bits_rows`)."""
    total = 0
    for r in range(words.shape[0]):
        for w in range(words.shape[1]):
            total += popcount(words[r, w])
    row, at = np.empty(total, np.int64), np.empty(total, np.int64)
    p = 0
    for r in range(words.shape[0]):
        for w in range(words.shape[1]):
            x = words[r, w]
            while x:
                row[p], at[p] = r, 64 * w + lowest(x)
                p += 1
                x &= x - _ONE
    return row, at

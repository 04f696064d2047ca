"""Counter-based randomness: every random choice comes from a generator derived from
(seed, purpose, index), so results never depend on order of access, process or worker count."""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["derive_rng"]


def derive_rng(seed: int, purpose: str, *index: int) -> np.random.Generator:
    """Return an independent generator for (seed, purpose, *index).

    Args:
        seed: the user's seed (a non-negative int).
        purpose: a short name of what the numbers are for, e.g. ``"scenes"``.
        *index: counters (chunk, episode, ...) that select one stream among many.
    """
    if int(seed) < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    key = [int(seed), zlib.crc32(purpose.encode())] + [int(i) for i in index]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(key)))

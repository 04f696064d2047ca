"""Counter-based randomness: every random choice comes from a generator derived from
(seed, purpose, index), so results never depend on order of access, process or worker count."""

from __future__ import annotations

import threading
import zlib

import numpy as np

__all__ = ["DerivedStream", "derive_rng"]


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


# `derive_rng(seed, purpose, i)` seeds PCG64 through numpy's SeedSequence (about 20 us a call,
# three calls an episode). `DerivedStream` computes the same PCG64 state: SeedSequence hashes its
# entropy words [seed, crc32(purpose), i] into a pool of four uint32 words (O'Neill's
# seed_seq_fe), and i enters one word only, so the rest is mixed once per stream. Tests check
# the streams against `derive_rng` (tests/test_episodes.py).
_M32, _M64, _M128 = 0xFFFFFFFF, (1 << 64) - 1, (1 << 128) - 1
_PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341  # PCG64's 128-bit multiplier
_LOCAL = threading.local()  # one reusable generator per stream slot and thread
_BLOCK = 256  # states computed at once for indices read in order


def _hash_consts(init: int, mult: int, n: int) -> list[tuple[int, int]]:
    """(xor, multiplier) pairs of SeedSequence's first n hashes (they depend on no data)."""
    out, h = [], init
    for _ in range(n):
        out.append((h, h := (h * mult) & _M32))
    return out


_MIX_HASHES = _hash_consts(0x43B0D7E5, 0x931E8875, 16)  # mix_entropy: 4 + 12 hashes
_OUT_HASHES = _hash_consts(0x8B51F9DD, 0x58F38DED, 8)  # generate_state(4, uint64): 8 words


def _hashmix(value: int, c: tuple[int, int]) -> int:
    value = ((value ^ c[0]) * c[1]) & _M32
    return value ^ (value >> 16)


def _mix(x: int, y: int) -> int:
    r = (0xCA01F9DD * x - 0x4973F715 * y) & _M32
    return r ^ (r >> 16)


class DerivedStream:
    """``stream.rng(i)`` draws what ``derive_rng(seed, purpose, i)`` draws, in half the time.

    The generator is reused (one per `slot` and thread): a stream's draws must be finished
    before the next ``rng(i)`` of the same slot."""

    def __init__(self, seed: int, purpose: str, slot: str):
        self.seed, self.purpose, self.slot = seed, purpose, slot
        self._block: tuple[int, list] = (0, [])  # (first index, the states from it on)
        self._last = -2  # the last index whose state was computed alone
        if seed > _M32:  # several entropy words: leave it to SeedSequence
            return
        h = _MIX_HASHES
        m0, m1 = _hashmix(seed, h[0]), _hashmix(zlib.crc32(purpose.encode()), h[1])
        m3 = _hashmix(0, h[3])  # the pool's fourth word: no entropy left, a hashed zero
        # sources 0 and 1 mixed into the other words; word 2 (the index) gets two constants
        m1 = _mix(m1, _hashmix(m0, h[4]))
        self._c2 = (_hashmix(m0, h[5]),)
        m3 = _mix(m3, _hashmix(m0, h[6]))
        m0 = _mix(m0, _hashmix(m1, h[7]))
        self._c2 += (_hashmix(m1, h[8]),)
        m3 = _mix(m3, _hashmix(m1, h[9]))
        self._pool = (m0, m1, m3)
        # then word 2 (which holds i) and word 3 mixed into the others: (source, destination,
        # hash constants)
        self._steps = [(2, d, *h[k]) for d, k in ((0, 10), (1, 11), (3, 12))]
        self._steps += [(3, d, *h[k]) for d, k in ((0, 13), (1, 14), (2, 15))]

    def _state(self, i: int) -> tuple[int, int]:
        """PCG64's (state, inc) as seeded by SeedSequence([seed, crc32(purpose), i])."""
        # hashmix(v) = ((v ^ x) * a) ^ shift, mix(d, s) = (L d - R s) ^ shift, all mod 2**32
        x, a = _MIX_HASHES[2]
        v = ((i ^ x) * a) & _M32
        m = [self._pool[0], self._pool[1], v ^ (v >> 16), self._pool[2]]
        for c in self._c2:
            r = (0xCA01F9DD * m[2] - 0x4973F715 * c) & _M32
            m[2] = r ^ (r >> 16)
        for src, dst, x, a in self._steps:
            v = ((m[src] ^ x) * a) & _M32
            r = (0xCA01F9DD * m[dst] - 0x4973F715 * (v ^ (v >> 16))) & _M32
            m[dst] = r ^ (r >> 16)
        w = []
        for k, (x, a) in enumerate(_OUT_HASHES):
            v = ((m[k & 3] ^ x) * a) & _M32
            w.append(v ^ (v >> 16))
        seed = (w[0] | w[1] << 32) << 64 | w[2] | w[3] << 32
        inc = ((((w[4] | w[5] << 32) << 64 | w[6] | w[7] << 32) << 1) | 1) & _M128
        # pcg_setseq_128_srandom_r: state 0, step, add the seed, step
        return ((inc + seed) * _PCG_MULT + inc) & _M128, inc

    def _states(self, start: int, stop: int) -> list[tuple[int, int]]:
        """`_state` of every i in [start, stop), its 32-bit hashing done on arrays at once."""
        out = []
        w = [a.tolist() for a in self._seed_words(start, stop)]
        for w0, w1, w2, w3, w4, w5, w6, w7 in zip(*w, strict=True):
            seed = (w0 | w1 << 32) << 64 | w2 | w3 << 32
            inc = ((((w4 | w5 << 32) << 64 | w6 | w7 << 32) << 1) | 1) & _M128
            out.append((((inc + seed) * _PCG_MULT + inc) & _M128, inc))
        return out

    def _seed_words(self, start: int, stop: int) -> np.ndarray:
        """(8, stop - start) uint64: the eight 32-bit words SeedSequence generates for every i
        in [start, stop) (`_state`'s hashing on arrays: the same integer operations, wrapping
        mod 2**64 and then masked as `_state` masks)."""
        i = np.arange(start, stop, dtype=np.uint64)
        m32 = np.uint64(_M32)

        def hashed(v, x, a):
            v = ((v ^ np.uint64(x)) * np.uint64(a)) & m32
            return v ^ (v >> np.uint64(16))

        def mixed(d, s):
            r = (np.uint64(0xCA01F9DD) * d - np.uint64(0x4973F715) * s) & m32
            return r ^ (r >> np.uint64(16))

        m = [np.full_like(i, self._pool[0]), np.full_like(i, self._pool[1])]
        m += [hashed(i, *_MIX_HASHES[2]), np.full_like(i, self._pool[2])]
        for c in self._c2:
            m[2] = mixed(m[2], np.uint64(c))
        for src, dst, x, a in self._steps:
            m[dst] = mixed(m[dst], hashed(m[src], x, a))
        return np.stack([hashed(m[k & 3], x, a) for k, (x, a) in enumerate(_OUT_HASHES)])

    def _state_of(self, i: int) -> tuple[int, int]:
        """`_state(i)`, from a block of `_BLOCK` states computed at once when i follows the
        last index asked for (episodes are mostly read in order), else alone."""
        start, states = self._block
        if start <= i < start + len(states):
            return states[i - start]
        follows = i in (self._last + 1, start + len(states))
        self._last = i
        if not follows:
            return self._state(i)
        self._block = (i, self._states(i, min(i + _BLOCK, _M32 + 1)))
        return self._block[1][0]

    def states(self, start: int, stop: int) -> np.ndarray:
        """(stop - start, `curi.pcg.STATE_WORDS`) uint64: the fresh PCG64 state of
        ``rng(i)`` for every i in [start, stop), for loops that draw from many streams at once
        (`curi.pcg`)."""
        from curi.pcg import seeded, states_of

        if self.seed > _M32 or stop - 1 > _M32:
            pairs = []
            for i in range(start, stop):
                st = derive_rng(self.seed, self.purpose, i).bit_generator.state["state"]
                pairs.append((st["state"], st["inc"]))
            return states_of(pairs)
        return seeded(self._seed_words(start, stop))

    def state(self, i: int) -> np.ndarray:
        """(`curi.pcg.STATE_WORDS`,) uint64: the fresh PCG64 state of ``rng(i)``, to draw from
        with `curi.pcg` (`states` for one index, from the blocks `rng` reads)."""
        if self.seed > _M32 or i > _M32:
            st = derive_rng(self.seed, self.purpose, i).bit_generator.state["state"]
            state, inc = st["state"], st["inc"]
        else:
            state, inc = self._state_of(i)
        return np.array((state >> 64, state & _M64, inc >> 64, inc & _M64, 0, 0), np.uint64)

    def rng(self, i: int) -> np.random.Generator:
        """A generator that draws what ``derive_rng(seed, purpose, i)`` draws."""
        if self.seed > _M32 or i > _M32:
            return derive_rng(self.seed, self.purpose, i)
        gens = _LOCAL.__dict__.setdefault("gens", {})
        gen = gens.get(self.slot)
        if gen is None:
            gen = gens[self.slot] = np.random.Generator(np.random.PCG64(0))
        state, inc = self._state_of(i)
        gen.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": state, "inc": inc},
            "has_uint32": 0,
            "uinteger": 0,
        }
        return gen

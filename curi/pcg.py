"""numpy's PCG64 generator, compiled by numba for the loops that draw from thousands of
streams at once (the gap report's episodes and random oracle): a stream's state is four
uint64 words and the 32-bit buffer numpy keeps, and each draw below consumes the bits
numpy's `np.random.Generator` consumes for the same call and returns what it returns
(tests/test_pcg.py checks every one against numpy). Only bounds up to 2**32 - 1 are
supported; larger ones are refused (numpy draws them by another path).

State layout (`STATE_WORDS` uint64): 128-bit LCG state (high, low), increment (high, low),
whether a 32-bit half is buffered, the buffered half."""

from __future__ import annotations

import numpy as np

from curi.kernel import kernel

__all__ = ["STATE_WORDS", "choice", "integers", "permutation", "random", "seeded", "states_of"]

STATE_WORDS = 6
_MAX_HIGH = 2**32 - 1  # the largest bound drawn as numpy draws it here (its 32-bit paths)
_M32 = np.uint64(0xFFFFFFFF)
_MULT_HI = np.uint64(2549297995355413924)  # PCG64's 128-bit multiplier
_MULT_LO = np.uint64(4865540595714422341)
_U0, _U1 = np.uint64(0), np.uint64(1)
_S32, _S58, _S63 = np.uint64(32), np.uint64(58), np.uint64(63)


@kernel
def _mulhi(a, b):
    """The high 64 bits of the 128-bit product of two uint64."""
    a_lo, a_hi, b_lo, b_hi = a & _M32, a >> _S32, b & _M32, b >> _S32
    t = a_lo * b_lo
    k = t >> _S32
    t = a_hi * b_lo + k
    w1, w2 = t & _M32, t >> _S32
    t = a_lo * b_hi + w1
    return a_hi * b_hi + w2 + (t >> _S32)


@kernel
def _step(s):
    """One LCG step: state = state * MULT + inc (mod 2**128)."""
    hi, lo = s[0], s[1]
    new_hi = _mulhi(lo, _MULT_LO) + hi * _MULT_LO + lo * _MULT_HI
    new_lo = lo * _MULT_LO
    lo2 = new_lo + s[3]
    s[0] = new_hi + s[2] + (_U1 if lo2 < new_lo else _U0)
    s[1] = lo2


@kernel
def next64(s):
    """The next 64-bit output (XSL-RR of the stepped state)."""
    _step(s)
    v = s[0] ^ s[1]
    rot = s[0] >> _S58
    return (v >> rot) | (v << ((np.uint64(64) - rot) & _S63))


@kernel
def next32(s):
    """The next 32-bit output: the low half of a 64-bit one, its high half kept for the next."""
    if s[4]:
        s[4] = _U0
        return s[5]
    v = next64(s)
    s[4], s[5] = _U1, v >> _S32
    return v & _M32


@kernel
def _bounded(s, rng):
    """A uniform integer in [0, rng] (rng < 2**32 - 1): Lemire's multiply-and-reject on
    32-bit draws."""
    if rng == 0:
        return _U0
    excl = rng + _U1
    m = next32(s) * excl
    left = m & _M32
    if left < excl:
        threshold = (_M32 - rng) % excl
        while left < threshold:
            m = next32(s) * excl
            left = m & _M32
    return m >> _S32


@kernel
def _interval(s, top):
    """A uniform integer in [0, top] by masked rejection (numpy's ``random_interval``)."""
    if top == 0:
        return _U0
    mask = top
    for shift in (1, 2, 4, 8, 16, 32):
        mask |= mask >> np.uint64(shift)
    while True:
        v = next32(s) & mask
        if v <= top:
            return v


@kernel
def random(s, out):
    """``Generator.random(len(out))`` into `out`."""
    for i in range(len(out)):
        out[i] = np.float64(next64(s) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@kernel
def integers(s, high, out):
    """``Generator.integers(0, high, len(out))`` (int64) into `out`.

    Raises:
        ValueError: `high` outside [1, 2**32 - 1], where numpy draws otherwise (64-bit)."""
    if high < 1 or high > _MAX_HIGH:
        raise ValueError("curi.pcg.integers supports 1 <= high <= 2**32 - 1")
    rng = np.uint64(high - 1)
    for i in range(len(out)):
        out[i] = np.int64(_bounded(s, rng))


@kernel
def _shuffle(s, x, first, lemire):
    """Fisher-Yates from the last item down to `first`, each swap's partner by masked
    rejection (``Generator.shuffle`` and ``permutation``: first 1) or, `lemire`, by
    `_bounded` (``choice``'s shuffles)."""
    for i in range(len(x) - 1, first - 1, -1):
        top = np.uint64(i)
        j = np.int64(_bounded(s, top) if lemire else _interval(s, top))
        x[i], x[j] = x[j], x[i]


@kernel
def permutation(s, n):
    """``Generator.permutation(n)``.

    Raises:
        ValueError: `n` outside [0, 2**32 - 1] (numpy draws larger ones otherwise)."""
    if n < 0 or n > _MAX_HIGH:
        raise ValueError("curi.pcg.permutation supports 0 <= n <= 2**32 - 1")
    x = np.arange(n)
    _shuffle(s, x, 1, False)
    return x


@kernel
def choice(s, pop, size):
    """``Generator.choice(pop, size, replace=False)``: the tail of a partial shuffle of
    ``arange(pop)`` for large draws from large populations, else Floyd's algorithm and a
    shuffle.

    Raises:
        ValueError: `pop` above 2**32 - 1 or `size` outside [0, pop]."""
    if pop > _MAX_HIGH or size < 0 or size > pop:
        raise ValueError("curi.pcg.choice supports 0 <= size <= pop <= 2**32 - 1")
    if pop > 10000 and size > pop // 50:
        x = np.arange(pop)
        _shuffle(s, x, max(pop - size, 1), True)
        return x[pop - size :].copy()
    out = np.empty(size, np.int64)
    seen = np.zeros((pop + 63) // 64, np.uint64)  # the values taken, as bits
    for j in range(pop - size, pop):
        v = np.int64(_bounded(s, np.uint64(j)))
        if seen[v >> 6] >> np.uint64(v & 63) & _U1:
            v = j
        seen[v >> 6] |= _U1 << np.uint64(v & 63)
        out[j - pop + size] = v
    _shuffle(s, out, 1, True)
    return out


@kernel
def seeded(words):  # pragma: no cover (compiled)
    """(n, `STATE_WORDS`) states of PCG64 seeded as numpy seeds it from SeedSequence's eight
    32-bit words of each of n streams (``words`` (8, n) uint64): state = (inc + seed) * MULT
    + inc, inc odd."""
    out = np.zeros((words.shape[1], STATE_WORDS), np.uint64)
    for e in range(words.shape[1]):
        seed_hi, seed_lo = words[0, e] | words[1, e] << _S32, words[2, e] | words[3, e] << _S32
        inc_hi, inc_lo = words[4, e] | words[5, e] << _S32, words[6, e] | words[7, e] << _S32
        inc_hi, inc_lo = inc_hi << _U1 | inc_lo >> _S63, inc_lo << _U1 | _U1
        lo = inc_lo + seed_lo
        s = out[e]
        s[0] = inc_hi + seed_hi + (_U1 if lo < inc_lo else _U0)
        s[1], s[2], s[3] = lo, inc_hi, inc_lo
        _step(s)
    return out


def states_of(pairs) -> np.ndarray:
    """(n, `STATE_WORDS`) uint64 states from PCG64 (state, inc) integer pairs, nothing
    buffered (a fresh `np.random.PCG64` with that state)."""
    out = np.zeros((len(pairs), STATE_WORDS), np.uint64)
    m64 = (1 << 64) - 1
    for k, (state, inc) in enumerate(pairs):
        out[k, :4] = (state >> 64, state & m64, inc >> 64, inc & m64)
    return out

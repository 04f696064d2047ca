"""`curi.pcg` draws what numpy's `np.random.Generator` (PCG64) draws, to the bits and to the
state it leaves: every draw the gap report makes, at the edges of each algorithm (Lemire's
rejection, masked rejection, choice's tail shuffle and Floyd's algorithm on both sides of
their cut-off)."""

import numpy as np
import pytest

from curi import pcg
from curi.rng import DerivedStream, derive_rng


def _pair(seed):
    """(numpy generator, the same state for `curi.pcg`)."""
    gen = np.random.Generator(np.random.PCG64(seed))
    st = gen.bit_generator.state["state"]
    return gen, pcg.states_of([(st["state"], st["inc"])])[0]


def _same_state(gen, s):
    """Whether the numpy generator and the pcg state are at the same place, buffer too."""
    st = gen.bit_generator.state
    words = pcg.states_of([(st["state"]["state"], st["state"]["inc"])])[0]
    return (
        (words[:4] == s[:4]).all()
        and st["has_uint32"] == s[4]
        and (not st["has_uint32"] or st["uinteger"] == s[5])
    )


@pytest.mark.parametrize("seed", range(8))
def test_draws_equal_numpys(seed):
    gen, s = _pair(seed)
    out = np.empty(7)
    pcg.random(s, out)
    assert out.tobytes() == gen.random(7).tobytes()
    for high in (1, 2, 3, 10, 640, 200_000, 2**31, 2**32 - 1):
        out = np.empty(33, np.int64)  # an odd count: a 32-bit half left buffered
        pcg.integers(s, high, out)
        np.testing.assert_array_equal(out, gen.integers(0, high, 33))
        assert _same_state(gen, s), high
    for n in (1, 2, 25, 1000):
        np.testing.assert_array_equal(pcg.permutation(s, n), gen.permutation(n))
        assert _same_state(gen, s), n
    cases = [(26991, 1), (26991, 5), (26991, 539), (26991, 540), (26991, 3000), (26991, 26991)]
    cases += [(10000, 500), (10001, 200), (10001, 201), (9000, 1000), (50, 50), (5, 0)]
    for pop, size in cases:
        got = pcg.choice(s, pop, size)
        np.testing.assert_array_equal(got, gen.choice(pop, size, replace=False))
        assert _same_state(gen, s), (pop, size)


def test_stream_states_are_its_generators():
    """`DerivedStream.states` holds the state of ``rng(i)`` (and of `derive_rng` past the
    32-bit indices the stream hashes itself)."""
    stream = DerivedStream(3, "test", "test")
    for start, stop in ((0, 5), (2**32 - 2, 2**32 + 2)):
        states = stream.states(start, stop)
        for k, i in enumerate(range(start, stop)):
            out = np.empty(3)
            pcg.random(states[k], out)
            assert out.tobytes() == derive_rng(3, "test", i).random(3).tobytes()


def test_bit_loops_set_bits_rows_equals_numpys():
    """`bit_loops.set_bits_rows` lists the set bits of packed rows as `curi.bits.set_bits_rows`
    does: empty rows, full words, the highest bit."""
    from curi import bit_loops, bits

    rng = np.random.default_rng(1)
    words = rng.integers(0, 2**63, (6, 5), dtype=np.int64).astype(np.uint64) << np.uint64(1)
    words[0], words[1, 2], words[2, -1] = 0, np.uint64(2**64 - 1), np.uint64(1 << 63)
    got, want = bit_loops.set_bits_rows(words), bits.set_bits_rows(words)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: pcg.integers(s, 0, np.empty(3, np.int64)),
        lambda s: pcg.integers(s, 2**32, np.empty(3, np.int64)),
        lambda s: pcg.integers(s, 2**40, np.empty(3, np.int64)),
        lambda s: pcg.permutation(s, 2**32),
        lambda s: pcg.choice(s, 2**33, 5),
        lambda s: pcg.choice(s, 10, 11),
    ],
)
def test_bounds_past_what_is_drawn_as_numpy_draws_are_refused(call):
    _, s = _pair(0)
    with pytest.raises(ValueError, match="curi.pcg"):
        call(s)

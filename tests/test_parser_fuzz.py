"""Fuzzing of `curi.parse` with malformed, unusual, deep and huge inputs (docs/reliability.md).

The contract under test: `parse` either returns a `Concept` or raises `ConceptError`, never any
other exception; its messages stay short whatever the input's size; bodies nested deeper than
`MAX_NESTING` are refused, and every concept it accepts can be compared, hashed, printed,
executed (bit-sliced, equal to the scalar reference) and measured without a `RecursionError`.
"""

import random
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import crowded_records, number_concepts, reference_eval

from curi import ConceptError, parse, sample_concepts
from curi.bits import unpack_rows
from curi.concepts import MAX_NESTING, VOCABULARY, Concept
from curi.divergence import atoms, compounds
from curi.executor import BitScenes, execute
from curi.scenes import records_to_props

MESSAGE_LIMIT = 2000  # characters: 80 quoted characters (escaped) plus the vocabulary at most
EXTRA = ("non-x-S", "0.7", "0.35", "0", "9", "10", "-1", "lambda", "S.", "x", "S", "foo", "")
JUNK = st.text(max_size=12)  # any unicode, whitespace and control characters included
TOKENS = st.one_of(st.sampled_from(VOCABULARY + EXTRA), JUNK)
VALID = [t for t, _ in sample_concepts(400, seed=11)] + number_concepts(200, seed=12)
RECORDS = crowded_records(24, seed=13)
SCENES = BitScenes.from_arrays(*records_to_props(RECORDS))
FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def check(text):
    """Parse `text`; return the Concept or the ConceptError, failing on anything else."""
    try:
        c = parse(text)
    except ConceptError as e:
        assert len(str(e)) <= MESSAGE_LIMIT, f"message of {len(str(e))} characters"
        return e
    assert isinstance(c, Concept)
    return c


def check_usable(c: Concept) -> None:
    """An accepted concept round-trips and executes exactly as the reference says."""
    assert parse(c.postfix()) == c
    assert hash(c) == hash(parse(c.postfix()))
    assert c.pretty()
    got = unpack_rows(execute([c], SCENES), len(RECORDS))[0]
    assert got.tolist() == [reference_eval(c, r) for r in RECORDS], c.postfix()


@settings(FUZZ, max_examples=1000)
@given(st.lists(TOKENS, max_size=20), st.sampled_from(["", " lambda S.", " lambda S. exists="]))
def test_random_token_sequences(tokens, tail):
    got = check(" ".join(tokens) + tail)
    if isinstance(got, Concept):
        check_usable(got)


def _mutate(tokens: list[str], op: str, i: int, j: int, new: str) -> list[str]:
    t = list(tokens)
    i, j = i % (len(t) + 1), j % (len(t) + 1)
    if op == "truncate_end":
        return t[:i]
    if op == "truncate_start":
        return t[i:]
    if op == "delete" and i < len(t):
        del t[i]
    elif op == "insert":
        t.insert(i, new)
    elif op == "replace" and i < len(t):
        t[i] = new
    elif op == "swap" and i < len(t) and j < len(t):
        t[i], t[j] = t[j], t[i]
    elif op == "duplicate":
        t = t[:i] + t[i:j] * 2 + t[j:]
    return t


MUTATION = st.tuples(
    st.sampled_from(
        ["truncate_end", "truncate_start", "delete", "insert", "replace", "swap", "duplicate"]
    ),
    st.integers(0, 60),
    st.integers(0, 60),
    TOKENS,
)


@settings(FUZZ, max_examples=1000)
@given(st.sampled_from(VALID), st.lists(MUTATION, min_size=1, max_size=3))
def test_mutations_of_valid_concepts(text, mutations):
    tokens = text.split()
    for m in mutations:
        tokens = _mutate(tokens, *m)
    got = check(" ".join(tokens))
    if isinstance(got, Concept):
        check_usable(got)


@settings(FUZZ, max_examples=300)
@given(st.text(max_size=200))
def test_arbitrary_text(text):
    check(text)


def test_every_truncation_and_deletion_of_valid_concepts():
    """Exhaustive single-step damage of 100 valid concepts (thousands of strings)."""
    n = accepted = 0
    for text in VALID[:: len(VALID) // 100]:
        toks = text.split()
        variants = [toks[:i] for i in range(len(toks))] + [toks[i:] for i in range(1, len(toks))]
        variants += [toks[:i] + toks[i + 1 :] for i in range(len(toks))]
        for v in variants:
            n += 1
            accepted += isinstance(check(" ".join(v)), Concept)
    assert n > 2000 and accepted < n


@pytest.mark.parametrize("bad", [None, 3, b"x color? red = lambda S. exists=", ["x"], 2.5])
def test_non_strings_raise_concept_error(bad):
    with pytest.raises(ConceptError, match="must be a string"):
        parse(bad)


def _nested(levels: int, kind: str) -> str:
    """A valid concept whose body is exactly `levels` deep."""
    leaf = "x color? red ="  # 3 levels: =, color?, x
    if kind == "not":
        return leaf + " not" * (levels - 3) + " lambda S. exists="
    if kind == "and":
        return leaf + " x color? red = and" * (levels - 3) + " lambda S. exists="
    # "or" nested on the right: every operand first, then all the operators
    return leaf + " x color? red =" * (levels - 3) + " or" * (levels - 3) + " lambda S. exists="


@pytest.mark.parametrize("kind", ["not", "and", "or"])
def test_nesting_limit_is_exact(kind):
    assert parse(_nested(MAX_NESTING, kind))
    with pytest.raises(ConceptError, match=f"deeper than the limit of {MAX_NESTING} levels"):
        parse(_nested(MAX_NESTING + 1, kind))


@pytest.mark.parametrize("kind", ["not", "and", "or"])
def test_deepest_accepted_concept_survives_every_recursive_walk(kind):
    c = parse(_nested(MAX_NESTING, kind))
    check_usable(c)  # equality, hashing, pretty, executor, reference interpreter
    assert atoms(c)["x"] > 0 and len(compounds(c)) > 0  # curi/divergence.py


@settings(FUZZ, max_examples=200)
@given(st.integers(1, 400), st.sampled_from(["not", "and", "or"]))
def test_deep_nesting_refused_cleanly(levels, kind):
    got = check(_nested(max(levels, 3), kind))
    assert isinstance(got, Concept) == (max(levels, 3) <= MAX_NESTING)


@pytest.mark.parametrize(
    "text",
    [
        "q" * 5_000_000,  # one huge unknown token
        "x color? red = " * 50_000 + "lambda S. exists=",  # 50,000 values left on the stack
        "x color? red =" + " not" * 1_000_000 + " lambda S. exists=",  # a million levels deep
        "(" * 1_000_000 + " lambda S.",
        "red " * 1_000_000,  # no 'lambda S.'
        " ".join(random.Random(0).choice(VOCABULARY) for _ in range(500_000)),
    ],
    ids=["token", "stack", "deep", "parens", "no-lambda", "random"],
)
def test_huge_inputs_give_short_messages_quickly(text):
    """A guard against super-linear parsing (a hang), not a speed target: the inputs take well
    under a second each on a quiet 2-core host, and the bound leaves room for a busy one."""
    t = time.perf_counter()
    with pytest.raises(ConceptError) as e:
        parse(text)
    assert time.perf_counter() - t < 60.0
    msg = str(e.value)
    assert len(msg) < 600, msg[:300]


def test_messages_quote_the_head_and_length_of_long_inputs():
    text = "x color? red = " * 1000 + "lambda S. exists="
    with pytest.raises(ConceptError, match=r"leaves 1000 values") as e:
        parse(text)
    assert repr(text[:80]) in str(e.value) and f"({len(text):,} characters)" in str(e.value)
    assert len(str(e.value)) < 250


def test_valid_concepts_still_parse_and_execute():
    """The fuzz corpus itself: every valid concept parses and executes as the reference."""
    concepts = [parse(t) for t in VALID]
    got = unpack_rows(execute(concepts, SCENES), len(RECORDS))
    want = np.array([[reference_eval(c, r) for r in RECORDS] for c in concepts])
    np.testing.assert_array_equal(got, want)

"""The concept language: parsing (canonical and original-release), types, serialisation."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curi import ConceptError, parse, sample_concepts
from curi.concepts import VOCABULARY


@pytest.fixture(scope="module")
def sampled():
    return [s for s, _ in sample_concepts(3000, seed=3)]


def test_roundtrip_on_sampled_concepts(sampled):
    for s in sampled:
        c = parse(s)
        assert c.postfix() == s
        assert parse(c.postfix()) == c
        assert len(c) == len(s.split())
        assert c.pretty()


def test_length_counts_lambda_and_quantifier():
    assert len(parse("S locationX? 2 all lambda S.")) == 6
    assert len(parse("x color? blue = lambda S. exists=")) == 7


def test_original_release_format():
    old = "x color? blue = non-x-S shape? cube for-all= and lambda S. exists="
    new = "x color? blue = S-x shape? cube all and lambda S. exists="
    assert parse(old) == parse(new)
    assert parse(old).postfix() == new
    assert parse("x size? 0.7 = lambda S. for-all=") == parse("x size? large = lambda S. for-all=")
    assert parse("S color? red exists= lambda S.").postfix() == "S color? red any lambda S."


def test_pretty_form():
    c = parse("x color? blue = S-x shape? cube all and lambda S. exists=")
    assert c.pretty() == "exists x in S: color(x) = blue and all(shape(S-x), cube)"
    assert parse("S color? red count= 1 > lambda S.").pretty() == "count(color(S), red) > 1"


def test_collapse_only_without_x():
    assert parse("S color? red any lambda S. exists=").collapsed().quantifier is None
    c = parse("x color? red = lambda S. exists=")
    assert c.collapsed() is c


@pytest.mark.parametrize(
    "text, match",
    [
        ("x color? bleu = lambda S. exists=", r"unknown token 'bleu' at position 2"),
        ("red 3 = lambda S.", r"cannot compare color with int \(token '=' at position 2\)"),
        ("x color? x shape? = lambda S. exists=", r"cannot compare color with shape"),
        ("x color? red > lambda S. exists=", r"'>' is not defined for color"),
        ("x color? = lambda S. exists=", r"needs 2 operand"),
        ("x color? red = lambda S.", r"no quantifier"),
        ("x color? red = exists=", r"too short|lambda S\."),
        ("x color? red = blue lambda S. exists=", r"leaves 2 values"),
        ("S color? lambda S.", r"expected bool"),
        ("x locationX? S color? red count= = lambda S. exists=", r"location with number"),
        ("x red all lambda S. exists=", r"set's property"),
    ],
)
def test_bad_input_names_token_and_position(text, match):
    with pytest.raises(ConceptError, match=match):
        parse(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(VOCABULARY + ("non-x-S", "0.7", "foo", "9")), max_size=14))
def test_random_strings_only_raise_concept_error(tokens):
    try:
        c = parse(" ".join(tokens))
    except ConceptError:
        return
    assert parse(c.postfix()) == c

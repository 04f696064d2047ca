"""Tests of `curi.schema.check_shape`: every form of spec, accepted and refused, and the one line
its error is."""

from __future__ import annotations

import math

import pytest

from curi.errors import ConfigError, PredictionsError
from curi.schema import check_shape

SPEC = {
    "name": str,
    "count": int,
    "score": (float, None),
    "flag?": bool,
    "runs": [{"dir": str}],
    "by_seed": {int: float},
    "by_name": {str: [str]},
}
GOOD = {
    "name": "a",
    "count": 3,
    "score": None,
    "runs": [{"dir": "x", "extra": 1}],
    "by_seed": {"0": 0.5, "-1": 1},
    "by_name": {"a": ["b"]},
    "other": object(),
}


def test_a_value_of_the_shape_is_returned_unchanged():
    assert check_shape(GOOD, SPEC, "f") is GOOD
    assert check_shape({**GOOD, "score": math.nan, "flag": True}, SPEC, "f")["flag"] is True


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": 1}, "name must be a string, got 1"),
        ({"count": 1.0}, "count must be an integer, got 1.0"),
        ({"count": True}, "count must be an integer, got True"),
        ({"score": "0.5"}, "score must be a number or null, got '0.5'"),
        ({"score": False}, "score must be a number or null, got False"),
        ({"flag": 1}, "flag must be true or false, got 1"),
        ({"runs": {"dir": "x"}}, "runs must be a list, got {'dir': 'x'}"),
        ({"runs": [{"dir": "x"}, {}]}, "runs[1].dir is missing"),
        ({"by_seed": {"s0": 0.5}}, "by_seed must have integer keys, got 's0'"),
        ({"by_seed": {"0": "x"}}, "by_seed.0 must be a number, got 'x'"),
        ({"by_name": {"a": [1]}}, "by_name.a[0] must be a string, got 1"),
        ({"name": ["x" * 500]}, "name must be a string, got ['xxx"),
    ],
)
def test_the_first_field_that_does_not_fit_is_named(change, message):
    with pytest.raises(ConfigError) as e:
        check_shape({**GOOD, **change}, SPEC, "f 'p'", fix="remove it")
    text = str(e.value)
    assert text.startswith("f 'p': ") and message in text and text.endswith("; remove it")
    assert "\n" not in text and len(text) < 200


def test_missing_keys_and_other_types_at_the_top():
    with pytest.raises(ConfigError, match=r"^f: count is missing$"):
        check_shape({k: v for k, v in GOOD.items() if k != "count"}, SPEC, "f")
    with pytest.raises(ConfigError, match=r"^f: the file must be an object, got \[1\]$"):
        check_shape([1], SPEC, "f")
    with pytest.raises(PredictionsError, match="the file must be a list"):
        check_shape({}, [int], "f", error=PredictionsError)

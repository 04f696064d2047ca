"""Typed, bounded config values: the one check every command and library entry point applies to
the numbers and names it is given, so that an absurd value (a negative count, a zero batch, a
non-integer seed, 10**12 episodes) ends in one `ConfigError` naming the key, the value and the
allowed range, instead of a hang, a full disk, a traceback or silently wrong output
(docs/reliability.md, "Config values")."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

from curi.errors import ConfigError

__all__ = ["integer", "number", "choice", "seed", "MAX_SEED", "MAX_EPISODES"]

MAX_SEED = 2**63 - 1  # seeds are stored as int64 in manifests and checkpoints
MAX_EPISODES = 10**8  # an episode sampler's size and an export's n (paper: at most 500,000)


def _range(low, high, *, open_low: bool = False) -> str:
    left = "(" if open_low else "["
    return f"{left}{low}, {'inf' if high is None else high}]"


def integer(value, name: str, *, low: int, high: int | None = None) -> int:
    """`value` as an int in [low, high] (high None: no upper bound).

    Refuses bools, strings and non-integral floats (a seed of 1.5 is not silently truncated to
    1); an integral float such as ``2.0`` (YAML ``2.0``) is accepted as 2.

    Raises:
        ConfigError: naming `name`, the value and the allowed range.
    """
    want = f"{name} must be an integer in {_range(low, high)}, got {value!r}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(want)
    if not isinstance(value, numbers.Integral):
        if not math.isfinite(value) or value != int(value):
            raise ConfigError(want)
    v = int(value)
    if v < low or (high is not None and v > high):
        raise ConfigError(want)
    return v


def number(
    value,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
) -> float:
    """`value` as a finite float in [low, high] (or (low, high] when `open_low`).

    Raises:
        ConfigError: a bool, a non-number, NaN or infinity, or a value out of range.
    """
    lo = "-inf" if low is None else low
    want = f"{name} must be a number in {_range(lo, high, open_low=open_low)}, got {value!r}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(want)
    v = float(value)
    if not math.isfinite(v):
        raise ConfigError(want)
    if low is not None and (v < low or (open_low and v == low)):
        raise ConfigError(want)
    if high is not None and v > high:
        raise ConfigError(want)
    return v


def choice(value, name: str, options: Iterable):
    """`value` when it is one of `options`.

    Raises:
        ConfigError: naming `name`, the value and the options.
    """
    options = tuple(options)
    if isinstance(value, bool) or value not in options:
        raise ConfigError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def seed(value, name: str = "seed") -> int:
    """A seed: an integer in [0, 2**63 - 1]."""
    return integer(value, name, low=0, high=MAX_SEED)

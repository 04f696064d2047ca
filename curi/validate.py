"""Typed, bounded config values: the one check every command and library entry point applies to
the numbers and names it is given, so that an absurd value (a negative count, a zero batch, a
non-integer seed, 10**12 episodes) ends in one `ConfigError` naming the key, the value and the
allowed range, instead of a hang, a full disk, a traceback or silently wrong output
(docs/reliability.md, "Config values").

Each command declares the cheap check of its composed config here (`checked`); `curi.cli`
runs it before Hydra makes the run folder and before the command imports torch or opens a
bank, so everything that can be known from the config and the file system is refused first."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from curi.errors import ConfigError, OptionError, did_you_mean
from curi.presets import list_presets, load_preset

__all__ = [
    "integer",
    "number",
    "choice",
    "not_one_of",
    "seed",
    "splits",
    "is_split_file",
    "checked",
    "MAX_SEED",
    "MAX_EPISODES",
]

F = TypeVar("F", bound=Callable[..., Any])

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


def choice(value, name: str, options: Iterable, *, error: type[OptionError] = OptionError):
    """`value` when it is one of `options`: the one check of every closed set of option values
    (each declared once, as a tuple beside the code that reads it), from Python and from the
    command line alike (`curi.options` checks a config against the same tuples).

    Args:
        error: `OptionError` or a subclass (`curi.errors.SplitOptionError` in a split rule).

    Raises:
        OptionError: (a `ConfigError` and a `ValueError`) naming `name`, the value, the
            options and the closest of them (`not_one_of`).
    """
    options = tuple(options)
    if isinstance(value, bool) or not _among(value, options):
        raise error(not_one_of(name, value, options))
    return value


def _among(value, options: tuple) -> bool:
    try:
        return value in options
    except TypeError:  # an unhashable value against a dict's keys
        return False


def not_one_of(name: str, value, options: Iterable, more: str = "") -> str:
    """The message of a value outside a closed set: ``prior must be one of log_linear, pcfg,
    got 'pcfgg' (did you mean 'pcfg'?)``; `more` names what else is accepted (`` or null``)."""
    names = [str(o) for o in options]
    hint = did_you_mean(value, names) if isinstance(value, str) else ""
    return f"{name} must be one of {', '.join(names)}{more}, got {value!r}{hint}"


_DEVICE = re.compile(r"auto|cpu|cuda(:[0-9]+)?")


def device(value, name: str = "device") -> str:
    """A device name of the form torch will be asked for (``auto``, ``cpu``, ``cuda``,
    ``cuda:N``), checked without torch; whether CUDA is there is torch's to say, later.

    Raises:
        ConfigError: another name, naming the valid forms.
    """
    if not isinstance(value, str) or not _DEVICE.fullmatch(value):
        raise ConfigError(f"{name} must be auto, cpu, cuda or cuda:N, got {value!r}")
    return value


def seed(value, name: str = "seed") -> int:
    """A seed: an integer in [0, 2**63 - 1]."""
    return integer(value, name, low=0, high=MAX_SEED)


def splits(value, *, concepts: list[str] | None = None) -> None:
    """Refuse a split (or a list of them) that names neither a preset of ``conf/split`` nor a
    split file (``FILE.json``) that is there and reads as one, and an inline rule (a mapping)
    whose options its rule refuses (`curi.splits.SplitSpec`; a ``file`` rule's file read as
    a split file): all that needs no bank, before a command's work. Given the `concepts` of
    the bank the splits are for (`curi.bank.bank_concepts`), a split file saved for another
    bank, or naming a concept outside it, is refused too.

    Raises:
        ConfigError: an unknown preset, naming the presets.
        SplitError: a split file that is missing, not a regular file or not a split file
            (or not of the bank of `concepts`); a bad inline rule (`SplitOptionError`, also a
            `ConfigError`).
    """
    from curi.splits.saved import check_split_file  # curi.splits imports this module
    from curi.splits.spec import SplitSpec

    for item in value if isinstance(value, list | tuple) else [value]:
        if isinstance(item, Mapping):
            spec = SplitSpec.from_mapping(item)
            if spec.rule == "file":
                check_split_file(spec.options.path, concepts)
        elif not isinstance(item, str):
            continue
        elif is_split_file(item):
            check_split_file(item, concepts)
        else:
            load_preset("split", item)


def is_split_file(item: object) -> bool:
    """Whether the split `item` is a saved split file: ``split=FILE.json`` (a name that is no
    preset) or the inline ``file`` rule reading one."""
    if isinstance(item, Mapping):
        return item.get("rule") == "file"
    return isinstance(item, str) and item.endswith(".json") and item not in list_presets("split")


def checked(check: Callable[[Any], None]) -> Callable[[F], F]:
    """Declare `check` the cheap check of the command it decorates: it takes the command's
    composed config, reads only the config and the file system (no bank, no torch), raises a
    `curi.errors.CuriError` for what the command would refuse later, and may write back a
    value it normalises. `curi.cli` runs it on every job's config before Hydra makes a run
    folder, and again on the config Hydra hands the command."""

    def wrap(command: F) -> F:
        command.check = check
        return command

    return wrap

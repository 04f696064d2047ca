"""The exception hierarchy: every error a user can cause is a `CuriError` with a message that
says what to fix."""

import dataclasses
import difflib
from collections.abc import Iterable, Mapping

__all__ = [
    "CuriError",
    "ConceptError",
    "BankError",
    "BankMismatchError",
    "SplitError",
    "ConfigError",
    "PredictionsError",
    "TextFormatError",
    "did_you_mean",
    "known_options",
]


class CuriError(Exception):
    """Base class of every error a user can cause (bad input, config or data)."""


class ConceptError(CuriError, ValueError):
    """A concept string that does not parse or type-check; names the token and its position."""


class BankError(CuriError):
    """A concept bank that is missing, corrupt or does not match what was asked for."""


class BankMismatchError(BankError):
    """The folder ``args[0]`` holds a bank built from another config than the one asked for;
    ``args[1]`` lists the config keys that differ. The message advises what `curi bank` can
    do; a caller that knows where the bank asked for lives (a checkpoint's) says that instead.
    """

    def __str__(self) -> str:
        where, diff = self.args
        return (
            f"a different bank already exists at {where} (differs in {diff}); delete it, "
            "rebuild with force=true, or choose another data_dir or bank name"
        )


class SplitError(CuriError):
    """A split that is unknown, malformed or violates its own checks."""


class ConfigError(CuriError):
    """A configuration value that is missing or out of range."""


class PredictionsError(CuriError, ValueError):
    """A rule-query tasks or predictions file that cannot be scored (names the file and line;
    `curi.oracles.rule_scores`)."""


class TextFormatError(CuriError, ValueError):
    """Text that is not in the format `curi.renderers.text.TextRenderer` writes (names the
    line)."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the one of `known` closest to `name`, or "" when none
    is close: the one suggestion of every message about an unknown name (a command, an
    option, a preset)."""
    near = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def known_options(cls, cfg: Mapping, what: str, error: type[CuriError] = ConfigError) -> dict:
    """`cfg` as a dict, once every key is known to be a field of the dataclass `cls`: the one
    check of every config section (bank, split, train, run) against typos.

    Raises:
        error: naming the unknown keys and the valid ones.
    """
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(cfg) - names
    if unknown:
        raise error(f"unknown {what} option(s) {sorted(unknown)}; valid: {sorted(names)}")
    return dict(cfg)


class OptionError(ConfigError, ValueError):
    """An unknown name, or an unknown or bad option, of a registered part (a renderer, encoder,
    pooler, split rule, kind of rendered file): the message names the valid names or options.
    Also a ValueError, the type the parts' own value checks raise (`curi.registry.Registry`)."""


class SplitOptionError(SplitError, OptionError):
    """An unknown split preset or rule, or an unknown or bad option of a rule: a `SplitError`
    where a split is made, and an `OptionError` like every other registry's."""


class EpisodeFileError(CuriError, ValueError):
    """An exported episode file that is missing, empty or corrupt, or does not match its card."""


class RemovalError(CuriError):
    """A file or folder that curi was about to delete and is not its own to delete: a symlink,
    or a path outside the folder the command works in (`curi.atomic.remove`)."""


__all__ += ["EpisodeFileError", "OptionError", "RemovalError", "SplitOptionError"]

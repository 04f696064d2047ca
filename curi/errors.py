"""The exception hierarchy: every error a user can cause is a `CuriError` with a message that
says what to fix."""

import dataclasses
from collections.abc import Mapping

__all__ = [
    "CuriError",
    "ConceptError",
    "BankError",
    "SplitError",
    "ConfigError",
    "PredictionsError",
    "TextFormatError",
    "known_options",
]


class CuriError(Exception):
    """Base class of every error a user can cause (bad input, config or data)."""


class ConceptError(CuriError, ValueError):
    """A concept string that does not parse or type-check; names the token and its position."""


class BankError(CuriError):
    """A concept bank that is missing, corrupt or does not match what was asked for."""


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

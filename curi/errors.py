"""The exception hierarchy: every error a user can cause is a `CuriError` with a message that
says what to fix."""

__all__ = ["CuriError", "ConceptError", "BankError", "SplitError", "ConfigError"]


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

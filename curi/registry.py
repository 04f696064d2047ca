"""One small registry helper: renderers, encoders, poolers and split rules are each found by
name through a `Registry`, so every kind is registered, listed, looked up and built the same
way, and fails the same way: an unknown name or a bad option is an `OptionError` (a
`ConfigError`) naming the valid names or options."""

from __future__ import annotations

import inspect
import numbers
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from curi.errors import CuriError, OptionError, did_you_mean

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind (classes or functions).

    Names are matched case-insensitively with ``-`` and ``_`` interchangeable, and `aliases`
    map other accepted names (e.g. the original release's) to registered ones.

    Args:
        kind: what the entries are, for messages (``"renderer"``, ``"split rule"``).
        error: the exception raised for an unknown name or a bad option: `OptionError` or a
            subclass of it (`curi.errors.SplitOptionError` for split rules).
        aliases: extra name -> registered name.
    """

    def __init__(
        self,
        kind: str,
        *,
        error: type[OptionError] = OptionError,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        if not issubclass(error, OptionError):
            raise TypeError(f"the error of a registry must be an OptionError, got {error!r}")
        self.kind = kind
        self.error = error
        self._entries: dict[str, T] = {}
        self._aliases = {self._key(k): self._key(v) for k, v in (aliases or {}).items()}

    @staticmethod
    def _key(name: str) -> str:
        return str(name).replace("-", "_").lower()

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that registers its class or function under `name`."""

        def wrap(entry: T) -> T:
            key = self._key(name)
            if key in self._entries and self._entries[key] is not entry:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[key] = entry
            return entry

        return wrap

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._resolve(name) in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def _resolve(self, name: str) -> str:
        key = self._key(name)
        return self._aliases.get(key, key)

    def get(self, name: str) -> T:
        """The entry registered as `name`.

        Raises:
            `error`: an unknown name (the message lists the known ones).
        """
        key = self._resolve(name)
        if key not in self._entries:
            hint = did_you_mean(self._key(name), self.names())
            raise self.error(f"unknown {self.kind} {name!r}{hint}; choose one of {self.names()}")
        return self._entries[key]

    def options(self, name: str) -> list[str]:
        """The keyword options the entry registered as `name` takes, sorted."""
        return sorted(_parameters(self.get(name)))

    def check_options(self, name: str, options: Mapping[str, Any]) -> None:
        """Check `options` against the signature of the entry registered as `name`: every key
        one of its keyword parameters, every required one given, every value of its annotated
        type (a list or tuple for a sequence, an int for a float; unannotated: anything).

        Raises:
            `error`: naming the bad option and the valid ones.
        """
        entry = self.get(name)
        params = _parameters(entry)
        bad, valid = f"bad option for {self.kind} {name!r}", f"valid: {sorted(params)}"
        unknown = sorted(set(options) - set(params))
        if unknown and not _takes_any_keyword(entry):
            raise self.error(f"{bad}: unknown option(s) {unknown}; {valid}")
        missing = sorted(k for k, p in params.items() if p.default is p.empty and k not in options)
        if missing:
            raise self.error(f"{bad}: missing option(s) {missing}; {valid}")
        hints = _hints(entry, params)
        for key, value in options.items():
            if key in hints and not _fits(value, hints[key]):
                raise self.error(f"{bad}: {key}={value!r} is not {_type_name(hints[key])}")

    def build(self, name: str, **options) -> Any:
        """Call the entry registered as `name` with keyword `options` (build an instance).

        The options are checked first (`check_options`); a value the entry itself refuses
        with a ValueError (out of range, inconsistent) is reported as a bad option too (one
        that raises a `CuriError` such as `ConfigError` is left to say it itself). A
        TypeError from inside the entry stays what it is: a bug, not a user's mistake.

        Raises:
            `error`: an unknown name, an option the entry does not take, a missing one, or a
                value of the wrong type or range.
        """
        self.check_options(name, options)
        try:
            return self.get(name)(**options)  # type: ignore[operator]
        except CuriError:  # already says what to fix
            raise
        except ValueError as e:
            raise self.error(f"bad option for {self.kind} {name!r}: {e}") from None


_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _parameters(entry: Callable) -> dict[str, inspect.Parameter]:
    """The parameters of `entry` that a keyword option can set."""
    params = inspect.signature(entry).parameters.values()
    return {p.name: p for p in params if p.kind in _KEYWORD}


def _takes_any_keyword(entry: Callable) -> bool:
    """Whether `entry`'s signature ends in ``**kwargs`` (then any option name is let through)."""
    params = inspect.signature(entry).parameters.values()
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _hints(entry: Callable, params: Mapping[str, inspect.Parameter]) -> dict[str, Any]:
    """The resolved annotations of `params`; one that does not resolve (a name imported only
    for type checkers) is left out, and its option is not type-checked."""
    module = sys.modules.get(getattr(entry, "__module__", ""), None)
    scope = {**vars(typing), **(vars(module) if module else {})}
    hints = {}
    for key, p in params.items():
        hint = p.annotation
        if isinstance(hint, str):
            try:
                hint = eval(hint, scope)  # the entry's own annotation, in its module
            except Exception:  # unresolvable: not checked
                continue
        if hint is not p.empty:
            hints[key] = hint
    return hints


def _fits(value: Any, hint: Any) -> bool:
    """Whether `value` is of the annotated type `hint` (simple types, unions, sequences;
    other annotations accept anything)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is tuple or (isinstance(origin, type) and issubclass(origin, Sequence)):
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(_fits, value, args))
        return not args or all(_fits(v, args[0]) for v in value)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _type_name(hint: Any) -> str:
    """`hint` as a reader writes it (``int``, ``tuple[int, int]``, ``str | None``)."""
    text = hint.__name__ if isinstance(hint, type) else str(hint)
    return text.replace("typing.", "").replace("collections.abc.", "")

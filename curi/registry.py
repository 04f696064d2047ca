"""One small registry helper: renderers, encoders, poolers and split rules are each found by
name through a `Registry`, so every kind is registered, listed and looked up the same way."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from curi.errors import ConfigError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind (classes or functions).

    Names are matched case-insensitively with ``-`` and ``_`` interchangeable, and `aliases`
    map other accepted names (e.g. the original release's) to registered ones.

    Args:
        kind: what the entries are, for messages (``"renderer"``, ``"split rule"``).
        error: the exception raised for an unknown name or a bad option.
        aliases: extra name -> registered name.
    """

    def __init__(
        self,
        kind: str,
        *,
        error: type[Exception] = ConfigError,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
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
            raise self.error(f"unknown {self.kind} {name!r}; choose one of {self.names()}")
        return self._entries[key]

    def build(self, name: str, **options) -> object:
        """Call the entry registered as `name` with keyword `options` (build an instance).

        Raises:
            `error`: an unknown name, or an option the entry does not take.
        """
        entry = self.get(name)
        try:  # check the options alone, so a TypeError from inside the entry stays a bug
            inspect.signature(entry).bind(**options)  # type: ignore[arg-type]
        except TypeError as e:
            raise self.error(f"bad option for {self.kind} {name!r}: {e}") from None
        return entry(**options)  # type: ignore[operator]

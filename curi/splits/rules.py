"""The registry of split rules by name: each rule is a function ``(spec, bank) -> Split`` with
its own options dataclass, so a new rule (an MCD or adversarial generator, a user's own) plugs
in with one decorator and is at once usable by name in a split config."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from curi.errors import SplitOptionError
from curi.registry import Registry

if TYPE_CHECKING:
    from curi.splits.base import Split
    from curi.splits.spec import SplitSpec

__all__ = [
    "COMMON_KEYS",
    "NoOptions",
    "SPLIT_RULES",
    "SplitRule",
    "list_split_rules",
    "register_split_rule",
]

#: Keys every split config may carry, whatever its rule (see `SplitSpec`).
COMMON_KEYS = ("name", "rule", "val", "val_fraction", "seed", "description")


@dataclass(frozen=True)
class NoOptions:
    """The options of a rule that takes none."""


@dataclass(frozen=True)
class SplitRule:
    """A registered rule: its canonical name, its options dataclass and its builder.

    Attributes:
        name: the name a config's ``rule`` key selects.
        build: ``(spec, bank) -> Split``; reads its own options from ``spec.options``.
        options: a frozen dataclass whose fields are the rule's own config keys, with defaults
            for the optional ones; its ``__post_init__`` coerces YAML values (lists to tuples)
            and raises `SplitError` (or ValueError / TypeError) for a bad value.
    """

    name: str
    build: Callable[[SplitSpec, Any], Split]
    options: type = NoOptions

    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.options))

    def make_options(self, values: Mapping[str, Any]) -> object:
        """The rule's options from `values` (its own keys only; missing ones take defaults)."""
        return self.options(**values)


#: Every split rule by name; a config's ``rule`` key selects one (``threshold`` is another
#: name of ``length``, as the rule is often called); an unknown name is a `SplitOptionError`.
SPLIT_RULES: Registry[SplitRule] = Registry(
    "split rule", error=SplitOptionError, aliases={"threshold": "length"}
)


def register_split_rule(
    name: str, *, options: type = NoOptions
) -> Callable[[Callable[[SplitSpec, Any], Split]], Callable[[SplitSpec, Any], Split]]:
    """Decorator that registers a split rule ``(spec, bank) -> Split`` under `name`.

    Args:
        name: the value of ``rule`` that selects it in a split config.
        options: a frozen dataclass of the rule's own keys (see `SplitRule`); its field names
            must differ from the keys every split takes (`COMMON_KEYS`).

    Example::

        @dataclass(frozen=True)
        class EvenOptions:
            offset: int = 0

        @register_split_rule("even", options=EvenOptions)
        def even(spec, bank):
            test = (np.arange(len(bank)) + spec.options.offset) % 2 == 0
            return finish(spec.name, bank, ~test, test, val=spec.val, seed=spec.seed)

        make_split(bank, {"name": "evens", "rule": "even", "offset": 1})
    """
    if not dataclasses.is_dataclass(options):
        raise TypeError(f"options of split rule {name!r} must be a dataclass, got {options!r}")
    clash = {f.name for f in dataclasses.fields(options)} & {*COMMON_KEYS, "options"}
    if clash:
        raise ValueError(f"split rule {name!r}: options {sorted(clash)} clash with common keys")

    def wrap(build: Callable[[SplitSpec, Any], Split]) -> Callable[[SplitSpec, Any], Split]:
        SPLIT_RULES.register(name)(SplitRule(name, build, options))
        return build

    return wrap


def list_split_rules() -> list[str]:
    """Names of the registered split rules, sorted."""
    return SPLIT_RULES.names()

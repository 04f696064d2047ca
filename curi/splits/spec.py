"""`SplitSpec`: a split rule as written in a config (`conf/split/<name>.yaml` or a mapping):
the keys every split takes, plus the options of its rule, checked against the rule's own
options dataclass (paper section 3)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from curi import validate
from curi.errors import ConfigError, SplitError, SplitOptionError
from curi.splits.base import VAL_POLICIES, check_name
from curi.splits.rules import COMMON_KEYS, SPLIT_RULES, SplitRule

__all__ = ["SplitSpec"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, init=False)
class SplitSpec:
    """A split rule with its options, validated on construction.

    Built from a mapping (`from_mapping`) or directly, with the rule's options as keywords:
    ``SplitSpec(name="bc", rule="binding", held_out=("purple",), val="disjoint")``. The rule's
    options are also readable as attributes (``spec.held_out``).

    Attributes:
        name: the split's name.
        rule: a registered rule (`curi.splits.list_split_rules`); the built-in ones:
            ``all``: train = val = test = every concept (instance IID);
            ``random_groups``: whole synonym groups to train / val / test with `fractions`;
            ``binding``: test = concepts with a `held_out` token and no `held_in` token, train =
            concepts with no held-out token, the rest dropped;
            ``pairs``: test = concepts containing both tokens of some pair of `pairs` (and, when
            `condition` is given, at least one of its tokens), the rest train;
            ``length`` (also ``threshold``): train = len(h) < `threshold`, test = the rest;
            ``file``: a split saved by `Split.save`, read from `path`.
        val: ``same_as_test`` (paper: val concepts are the test concepts, other episodes) or
            ``disjoint`` (a seeded `val_fraction` of the held-out synonym groups becomes val).
        val_fraction: share of held-out groups for a disjoint val.
        seed: seed of the random choices.
        description: free text, for people.
        options: the rule's options dataclass (e.g. `curi.splits.tokens.PairsOptions`).
    """

    name: str
    rule: str
    val: str = "same_as_test"
    val_fraction: float = 0.25
    seed: int = 0
    description: str = field(default="", compare=False)
    options: Any = None

    def __init__(
        self,
        name: str,
        rule: str,
        *,
        val: str = "same_as_test",
        val_fraction: float = 0.25,
        seed: int = 0,
        description: str = "",
        options: Any = None,
        **rule_options: Any,
    ) -> None:
        name = check_name(name)
        entry = _rule(name, rule)
        if options is None:
            options = _make_options(name, entry, rule_options)
        elif rule_options or not isinstance(options, entry.options):
            raise SplitOptionError(
                f"split {name!r}: give the options of rule {entry.name!r} either as keywords or "
                f"as one {entry.options.__name__}"
            )
        validate.choice(val, f"split {name!r}: val", VAL_POLICIES, error=SplitOptionError)
        try:  # a seed of -1 or 1.5 is refused here, not truncated or failing later
            val_fraction = validate.number(val_fraction, "val_fraction")
            seed = validate.seed(seed)
        except ConfigError as e:
            raise SplitError(f"split {name!r}: {e}") from None
        if val == "disjoint" and not 0 <= val_fraction <= 1:
            raise SplitError(f"split {name!r}: val_fraction must lie in [0, 1], got {val_fraction}")
        for key, value in [
            ("name", name),
            ("rule", entry.name),
            ("val", val),
            ("val_fraction", val_fraction),
            ("seed", seed),
            ("description", str(description or "")),
            ("options", options),
        ]:
            object.__setattr__(self, key, value)

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> SplitSpec:
        """Build and validate from a mapping (a YAML file or a Hydra node).

        Raises:
            SplitOptionError: (a `SplitError` and a `ConfigError`) unknown keys, an unknown
                rule, missing or bad rule options.
            SplitError: a bad val policy, val fraction or seed.
        """
        d = dict(cfg)
        if "name" not in d or "rule" not in d:
            raise SplitOptionError(
                f"a split needs a name and a rule (one of {SPLIT_RULES.names()}); got {d}"
            )
        if "options" in d:  # only Python passes an options object; a config lists the keys
            raise SplitOptionError(
                f"split {d['name']!r}: unknown split option(s) ['options']; write the rule's "
                "options as keys of the split itself"
            )
        return cls(**d)

    def __getattr__(self, key: str) -> Any:
        # Only called when normal lookup fails: expose the rule's options as attributes.
        if key.startswith("_") or key == "options":
            raise AttributeError(key)
        options = object.__getattribute__(self, "options")
        if key in {f.name for f in dataclasses.fields(options)}:
            return getattr(options, key)
        raise AttributeError(f"split rule {self.rule!r} has no option {key!r}")


def _rule(name: str, rule: str) -> SplitRule:
    if not isinstance(rule, str) or rule not in SPLIT_RULES:
        raise SplitOptionError(
            f"split {name!r}: unknown rule {rule!r}; use one of {SPLIT_RULES.names()}"
        )
    return SPLIT_RULES.get(rule)


def _make_options(name: str, entry: SplitRule, values: dict[str, Any]) -> object:
    """The rule's options from `values`: a key no rule knows is an error (a typo); a key of
    another rule only is ignored with a warning, as the single flat spec of earlier versions
    accepted it."""
    own = set(entry.option_names())
    others = {k for r in SPLIT_RULES for k in SPLIT_RULES.get(r).option_names()} - own
    unknown = set(values) - own - others
    if unknown:
        valid = sorted({*COMMON_KEYS, *own})
        raise SplitOptionError(
            f"split {name!r}: unknown split option(s) {sorted(unknown)} for rule "
            f"{entry.name!r}; valid: {valid}"
        )
    ignored = sorted(set(values) & others)
    if ignored:
        log.warning("split %r: rule %r ignores option(s) %s", name, entry.name, ignored)
    try:
        return entry.make_options({k: v for k, v in values.items() if k in own})
    except SplitError as e:
        raise SplitOptionError(f"split {name!r}: {e}") from None
    except (TypeError, ValueError) as e:
        raise SplitOptionError(f"split {name!r}: bad option of rule {entry.name!r}: {e}") from None

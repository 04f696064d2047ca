"""Rules over whole concepts rather than their tokens (paper section 3): ``all`` (Instance IID:
every concept on every side, new episodes) and ``random_groups`` (Concept IID: whole synonym
groups go at random to train / val / test)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from curi import validate
from curi.errors import ConfigError, SplitError
from curi.rng import derive_rng
from curi.splits.base import Split, check_split, groups_to_subsets
from curi.splits.rules import register_split_rule
from curi.splits.spec import SplitSpec

__all__ = ["RandomGroupsOptions"]


@dataclass(frozen=True)
class RandomGroupsOptions:
    """Options of ``random_groups``.

    Attributes:
        fractions: train / val / test shares of the synonym groups (paper: 0.8 / 0.05 / 0.15).
    """

    fractions: tuple[float, float, float] = (0.8, 0.05, 0.15)

    def __post_init__(self) -> None:
        try:  # NaN passed both checks below and failed later in numpy with a traceback
            fractions = tuple(
                validate.number(f, f"fractions[{i}]", low=0) for i, f in enumerate(self.fractions)
            )
        except ConfigError as e:
            raise SplitError(f"rule random_groups: {e}") from None
        if len(fractions) != 3 or abs(sum(fractions) - 1) > 1e-6:
            raise SplitError(
                f"rule random_groups: fractions must be 3 non-negative numbers summing to 1, "
                f"got {list(fractions)}"
            )
        object.__setattr__(self, "fractions", fractions)


@register_split_rule("all")
def all_concepts(spec: SplitSpec, bank) -> Split:
    """Train = val = test = every concept (only the episodes differ)."""
    idx = np.arange(len(bank))
    return Split(spec.name, idx, idx, idx, idx[:0])


@register_split_rule("random_groups", options=RandomGroupsOptions)
def random_groups(spec: SplitSpec, bank) -> Split:
    """Each synonym group goes to train, val or test with the seeded `fractions`; the split's
    own val policy is not used, as the fractions already give val its share."""
    rng = derive_rng(spec.seed, f"split:{spec.name}")
    sub = groups_to_subsets(np.asarray(bank.groups), spec.options.fractions, rng)
    idx = np.arange(len(bank))
    split = Split(spec.name, idx[sub == 0], idx[sub == 1], idx[sub == 2], idx[:0])
    check_split(split, bank, grouped=True)
    return split

"""The ``length`` rule (paper section 3, Complexity): train on short concepts, test on long
ones, by the number of tokens of the canonical postfix string."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from curi.errors import SplitError
from curi.splits.base import Split, finish_spec
from curi.splits.rules import register_split_rule
from curi.splits.spec import SplitSpec

__all__ = ["LengthOptions"]


@dataclass(frozen=True)
class LengthOptions:
    """Options of ``length``.

    Attributes:
        threshold: train = concepts with len(h) < threshold, test = the rest (paper: 10).
    """

    threshold: float = 10

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int | float):
            raise SplitError(f"rule length needs a number as threshold, got {self.threshold!r}")


@register_split_rule("length", options=LengthOptions)
def length(spec: SplitSpec, bank) -> Split:
    """Train: len(h) < threshold; test: len(h) >= threshold."""
    short = np.asarray(bank.lengths) < spec.options.threshold
    return finish_spec(spec, bank, short, ~short)

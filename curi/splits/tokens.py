"""Token rules (paper section 3): ``binding`` holds out tokens (Binding color / shape) and
``pairs`` holds out co-occurring token pairs (Intrinsic, Extrinsic, Counting, Boolean).
Matching is by token co-occurrence in the canonical postfix string, as in the original release."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from curi.concepts import VOCABULARY
from curi.errors import SplitError
from curi.splits.base import Split, finish_spec
from curi.splits.rules import register_split_rule
from curi.splits.spec import SplitSpec

__all__ = ["BindingOptions", "PairsOptions"]


def _strings(values, rule: str, key: str) -> tuple[str, ...]:
    """A YAML list of tokens (numbers may be written as ints) as a tuple of strings, each a
    token of the canonical postfix form: an unknown one (a typo) would match no concept and
    silently empty a side of the split.

    Raises:
        SplitError: naming the rule, the key, the unknown tokens and the valid ones.
    """
    tokens = tuple(str(t) for t in values or ())
    unknown = [t for t in tokens if t not in VOCABULARY]
    if unknown:
        raise SplitError(
            f"rule {rule}: unknown token(s) {unknown} in {key}; valid tokens (of the postfix "
            f"form): {', '.join(VOCABULARY)}"
        )
    return tokens


@dataclass(frozen=True)
class BindingOptions:
    """Options of ``binding``.

    Attributes:
        held_out: tokens a test concept uses (at least one); train never sees them.
        held_in: tokens of the same category a test concept must not use.
    """

    held_out: tuple[str, ...] = ()
    held_in: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "held_out", _strings(self.held_out, "binding", "held_out"))
        object.__setattr__(self, "held_in", _strings(self.held_in, "binding", "held_in"))
        if not self.held_out:
            raise SplitError("rule binding needs held_out tokens")


@dataclass(frozen=True)
class PairsOptions:
    """Options of ``pairs``.

    Attributes:
        pairs: token pairs; a concept with both tokens of some pair is a test concept.
        condition: tokens of which a test concept must also contain at least one (e.g.
            ``count=`` for Counting); empty: no condition.
    """

    pairs: tuple[tuple[str, str], ...] = ()
    condition: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        pairs = tuple(_strings(p, "pairs", "pairs") for p in self.pairs or ())
        if not pairs or any(len(p) != 2 for p in pairs):
            raise SplitError("rule pairs needs a list of pairs of tokens, e.g. [[green, metal]]")
        object.__setattr__(self, "pairs", pairs)
        object.__setattr__(self, "condition", _strings(self.condition, "pairs", "condition"))


def _tokens(bank) -> list[frozenset[str]]:
    return [frozenset(s.split()) for s in bank.concepts]


@register_split_rule("binding", options=BindingOptions)
def binding(spec: SplitSpec, bank) -> Split:
    """Test: a held-out token and no held-in one; train: no held-out token; the rest dropped."""
    out, inn = set(spec.options.held_out), set(spec.options.held_in)
    toks = _tokens(bank)
    has_out = np.array([bool(t & out) for t in toks], dtype=bool)
    has_in = np.array([bool(t & inn) for t in toks], dtype=bool)
    return finish_spec(spec, bank, ~has_out, has_out & ~has_in)


@register_split_rule("pairs", options=PairsOptions)
def pairs(spec: SplitSpec, bank) -> Split:
    """Test: both tokens of some held-out pair (and a condition token, if any); the rest train."""
    cond, held = set(spec.options.condition), spec.options.pairs
    test = np.array(
        [
            (not cond or bool(t & cond)) and any(a in t and b in t for a, b in held)
            for t in _tokens(bank)
        ],
        dtype=bool,
    )
    return finish_spec(spec, bank, ~test, test)

"""Splits of a bank's concepts into train / val / test (paper section 3): the nine paper splits
as presets, user rules from configuration (held-out tokens, pairs, a length threshold, grouped
random, a saved split file) or any Python predicate. Rules are found by name in one registry,
and a new rule registers itself with `register_split_rule`."""

# The rule modules register their rules on import.
from curi.splits import adversarial, groups, length, mcd, saved, tokens  # noqa: F401
from curi.splits.base import Split, finish
from curi.splits.make import PAPER_SPLITS, list_splits, make_split
from curi.splits.rules import SPLIT_RULES, SplitRule, list_split_rules, register_split_rule
from curi.splits.saved import load_split, save_split
from curi.splits.spec import SplitSpec

__all__ = [
    "PAPER_SPLITS",
    "SPLIT_RULES",
    "Split",
    "SplitRule",
    "SplitSpec",
    "finish",
    "list_split_rules",
    "list_splits",
    "load_split",
    "make_split",
    "register_split_rule",
    "save_split",
]

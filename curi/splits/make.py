"""`make_split`: one entry point that splits a bank's concepts from a preset name, a config
mapping, a `SplitSpec`, a saved split file or a Python predicate (paper section 3)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from curi.concepts import Concept, parse
from curi.errors import ConfigError, SplitError, SplitOptionError
from curi.presets import list_presets, load_preset
from curi.splits.base import SUBSETS, Split, finish
from curi.splits.rules import SPLIT_RULES
from curi.splits.saved import load_split
from curi.splits.spec import SplitSpec

__all__ = ["PAPER_SPLITS", "asked_empty", "check_not_empty", "list_splits", "make_split"]

#: The nine splits of the paper (section 3), each a preset in `conf/split`.
PAPER_SPLITS = (
    "instance_iid",
    "concept_iid",
    "binding_color",
    "binding_shape",
    "intrinsic",
    "extrinsic",
    "counting",
    "boolean",
    "complexity",
)


def list_splits() -> list[str]:
    """Names of the split presets (the files of `conf/split`, shipped in the package)."""
    return list_presets("split")


def make_split(
    bank,
    name_or_cfg: str | os.PathLike | Mapping | SplitSpec | Callable[[Concept], bool],
    *,
    seed: int = 0,
) -> Split:
    """Split `bank`'s concepts.

    Args:
        bank: a `ConceptBank`.
        name_or_cfg: a split preset name from `conf/split` (e.g. ``"binding_color"``); a
            mapping or `SplitSpec` of a rule (`curi.splits.list_split_rules`); a split file
            written by `Split.save` (a `Path`, or a string ending in ``.json`` naming an
            existing file); or a predicate ``Concept -> bool`` that marks test concepts (the
            rest is train; val = test).
        seed: seed for a predicate split's disjoint val; config splits carry their own seed.

    Returns:
        The `Split`.

    Raises:
        SplitError: an unknown preset or rule or a bad option of a rule (a
            `curi.errors.SplitOptionError`, also a `ConfigError`), a missing or mismatched
            split file, or a split that fails its checks, among them an empty train, val or
            test set that the config did not ask for (`check_not_empty`).
    """
    split, spec = _make(bank, name_or_cfg, seed)
    check_not_empty(split, bank, spec)
    return split


def _make(bank, name_or_cfg, seed: int) -> tuple[Split, SplitSpec | None]:
    """The split and the spec it was made from (None: a predicate)."""
    if isinstance(name_or_cfg, os.PathLike):
        return _from_file(bank, name_or_cfg)
    if callable(name_or_cfg) and not isinstance(name_or_cfg, SplitSpec):
        test = np.array([bool(name_or_cfg(parse(s))) for s in bank.concepts], dtype=bool)
        name = getattr(name_or_cfg, "__name__", "predicate")
        return finish(name, bank, ~test, test, val="same_as_test", seed=seed), None
    if isinstance(name_or_cfg, str):
        if name_or_cfg.endswith(".json") and name_or_cfg not in list_splits():
            if os.path.exists(Path(name_or_cfg).expanduser()):  # the file rule refuses a FIFO
                return _from_file(bank, name_or_cfg)
        spec = _load_named(name_or_cfg)
    elif isinstance(name_or_cfg, SplitSpec):
        spec = name_or_cfg
    elif isinstance(name_or_cfg, Mapping):
        spec = SplitSpec.from_mapping(name_or_cfg)
    else:
        raise SplitError(
            f"make_split takes a split name, a mapping, a SplitSpec, a split file or a "
            f"predicate; got {type(name_or_cfg).__name__}"
        )
    return SPLIT_RULES.get(spec.rule).build(spec, bank), spec


def _from_file(bank, path: str | os.PathLike) -> tuple[Split, SplitSpec]:
    split = load_split(bank, path)
    return split, SplitSpec(name=split.name, rule="file", path=str(path))


def asked_empty(spec: SplitSpec | None) -> set[str]:
    """The subsets that `spec` explicitly asks to be empty: a share of 0 of random_groups'
    ``fractions``, or a ``disjoint`` val with ``val_fraction`` 0. A split file may hold an
    empty val (asked for so when it was made); a predicate asks for none."""
    if spec is None:
        return set()
    if spec.rule == "file":
        return {"val"}
    asked = set()
    if spec.rule == "random_groups":
        asked |= {part for part, f in zip(SUBSETS, spec.fractions, strict=True) if f == 0}
    elif spec.val == "disjoint" and spec.val_fraction == 0:
        asked.add("val")
    return asked


def check_not_empty(split: Split, bank, spec: SplitSpec | None) -> None:
    """Refuse a split with an empty train, val or test set that its config did not ask for
    (`asked_empty`): a typo or an out-of-range option would otherwise yield a split that
    trains or evaluates on nothing, with exit 0.

    Raises:
        SplitError: naming the split, the empty subset, the sizes and what to change.
    """
    allowed = asked_empty(spec)
    empty = [p for p in SUBSETS if len(split.subset(p)) == 0 and p not in allowed]
    if empty:
        sizes = ", ".join(f"{p} {len(split.subset(p))}" for p in SUBSETS)
        raise SplitError(
            f"split {split.name!r} has an empty {' and '.join(empty)} set on this bank "
            f"({sizes} concepts of {len(bank)}); {_empty_hint(spec, bank, empty[0])}"
        )


def _empty_hint(spec: SplitSpec | None, bank, part: str) -> str:
    """What to change so that subset `part` of `spec`'s split is not empty."""
    if spec is None:
        return f"the predicate marks {'every' if part == 'train' else 'no'} concept as test"
    if spec.rule == "file":
        return "the split file holds no concept there; save a split that has some"
    if spec.rule == "random_groups":
        i = SUBSETS.index(part)
        groups = len(np.unique(np.asarray(bank.groups)))
        return (
            f"raise fractions[{i}] (this bank has {groups} synonym groups; a share of 0 "
            f"asks for an empty {part})"
        )
    if spec.val == "disjoint" and part in ("val", "test"):
        return ("raise" if part == "val" else "lower") + " val_fraction, or use val: same_as_test"
    if spec.rule == "length":
        lo, hi = int(np.min(bank.lengths)), int(np.max(bank.lengths))
        return (
            f"choose a threshold in {lo + 1}..{hi} (train: length < threshold; this "
            f"bank's concepts have {lo}..{hi} tokens)"
        )
    keys = {"binding": "held_out and held_in", "pairs": "pairs and condition"}
    return f"change the rule's {keys.get(spec.rule, 'options')} (rule {spec.rule})"


def _load_named(name: str) -> SplitSpec:
    """The preset `name`; a name is never read as a path (`load_preset` refuses ``../x``)."""
    try:
        cfg = load_preset("split", name)
    except ConfigError as e:
        hint = "; no split file of that name either" if name.endswith(".json") else ""
        raise SplitOptionError(f"{e}{hint}") from None
    return SplitSpec.from_mapping(cfg)

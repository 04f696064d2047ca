"""`make_split`: one entry point that splits a bank's concepts from a preset name, a config
mapping, a `SplitSpec`, a saved split file or a Python predicate (paper section 4)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from curi.concepts import Concept, parse
from curi.errors import ConfigError, SplitError
from curi.presets import list_presets, load_preset
from curi.splits.base import Split, finish
from curi.splits.rules import SPLIT_RULES
from curi.splits.saved import load_split
from curi.splits.spec import SplitSpec

__all__ = ["PAPER_SPLITS", "list_splits", "make_split"]

#: The nine splits of the paper (section 4), each a preset in `conf/split`.
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
        SplitError: unknown name or rule, malformed rule, a missing or mismatched split file,
            or a split that fails its checks.
    """
    if isinstance(name_or_cfg, os.PathLike):
        return load_split(bank, name_or_cfg)
    if callable(name_or_cfg) and not isinstance(name_or_cfg, SplitSpec):
        test = np.array([bool(name_or_cfg(parse(s))) for s in bank.concepts], dtype=bool)
        name = getattr(name_or_cfg, "__name__", "predicate")
        return finish(name, bank, ~test, test, val="same_as_test", seed=seed)
    if isinstance(name_or_cfg, str):
        if name_or_cfg.endswith(".json") and name_or_cfg not in list_splits():
            if os.path.exists(Path(name_or_cfg).expanduser()):  # the file rule refuses a FIFO
                return load_split(bank, name_or_cfg)
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
    return SPLIT_RULES.get(spec.rule).build(spec, bank)


def _load_named(name: str) -> SplitSpec:
    """The preset `name`; a name is never read as a path (`load_preset` refuses ``../x``)."""
    try:
        cfg = load_preset("split", name)
    except ConfigError as e:
        hint = "; no split file of that name either" if name.endswith(".json") else ""
        raise SplitError(f"{e}{hint}") from None
    return SplitSpec.from_mapping(cfg)

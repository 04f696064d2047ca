"""Splits of a bank's concepts into train / val / test (spec 4): the nine CURI rules, user rules
from configuration (held-out tokens, pairs, a length threshold, grouped random) or any Python
predicate, with the validation policy and the split's own checks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from curi.concepts import Concept, parse
from curi.errors import ConfigError, SplitError, known_options
from curi.presets import list_presets, load_preset
from curi.rng import derive_rng

__all__ = ["Split", "SplitSpec", "make_split", "list_splits", "SPLIT_RULES", "PAPER_SPLITS"]

log = logging.getLogger(__name__)
SPLIT_RULES = ("all", "random_groups", "binding", "pairs", "length")
VAL_POLICIES = ("same_as_test", "disjoint")
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


@dataclass(frozen=True)
class SplitSpec:
    """A split rule, as written in `conf/split/<name>.yaml`.

    Attributes:
        name: the split's name.
        rule: one of `SPLIT_RULES`:
            ``all``: train = val = test = every concept (instance IID);
            ``random_groups``: whole synonym groups to train / val / test with `fractions`;
            ``binding``: test = concepts with a `held_out` token and no `held_in` token, train =
            concepts with no held-out token, the rest dropped;
            ``pairs``: test = concepts containing both tokens of some pair of `pairs` (and, when
            `condition` is given, at least one of its tokens), the rest train;
            ``length``: train = len(h) < `threshold`, test = the rest.
        held_out, held_in: tokens for ``binding``.
        pairs: token pairs for ``pairs`` (numbers may be written as ints).
        condition: tokens of which a ``pairs`` test concept must contain at least one.
        threshold: length threshold for ``length``.
        fractions: train / val / test shares for ``random_groups``.
        val: ``same_as_test`` (paper: val concepts are the test concepts, other episodes) or
            ``disjoint`` (a seeded `val_fraction` of the held-out synonym groups becomes val).
        val_fraction: share of held-out groups for a disjoint val.
        seed: seed of the random choices.
    """

    name: str
    rule: str
    held_out: tuple[str, ...] = ()
    held_in: tuple[str, ...] = ()
    pairs: tuple[tuple[str, str], ...] = ()
    condition: tuple[str, ...] = ()
    threshold: int = 10
    fractions: tuple[float, float, float] = (0.8, 0.05, 0.15)
    val: str = "same_as_test"
    val_fraction: float = 0.25
    seed: int = 0
    description: str = field(default="", compare=False)

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> SplitSpec:
        """Build and validate from a mapping (a YAML file or a Hydra node).

        Raises:
            SplitError: unknown keys, unknown rule or val policy, missing rule fields.
        """
        d = known_options(cls, cfg, "split", SplitError)
        for k in ("held_out", "held_in", "condition"):
            d[k] = tuple(str(t) for t in d.get(k) or ())
        d["pairs"] = tuple((str(a), str(b)) for a, b in d.get("pairs") or ())
        if "fractions" in d:
            d["fractions"] = tuple(float(f) for f in d["fractions"])
        if "name" not in d or "rule" not in d:
            raise SplitError(f"a split needs a name and a rule (one of {SPLIT_RULES}); got {d}")
        spec = cls(**d)
        spec.check()
        return spec

    def check(self) -> None:
        if self.rule not in SPLIT_RULES:
            raise SplitError(f"split {self.name!r}: unknown rule {self.rule!r}; use {SPLIT_RULES}")
        if self.val not in VAL_POLICIES:
            raise SplitError(f"split {self.name!r}: val must be one of {VAL_POLICIES}")
        if self.rule == "binding" and not self.held_out:
            raise SplitError(f"split {self.name!r}: rule binding needs held_out tokens")
        if self.rule == "pairs" and not self.pairs:
            raise SplitError(f"split {self.name!r}: rule pairs needs a list of pairs")
        if self.rule == "random_groups" and (
            len(self.fractions) != 3 or abs(sum(self.fractions) - 1) > 1e-6
        ):
            raise SplitError(f"split {self.name!r}: fractions must be 3 numbers summing to 1")


@dataclass(frozen=True)
class Split:
    """Concept indices of each subset (sorted int64 arrays) and the concepts dropped."""

    name: str
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    dropped: np.ndarray

    def subset(self, name: str) -> np.ndarray:
        """The indices of subset `name` (train, val or test)."""
        if name not in ("train", "val", "test"):
            raise SplitError(f"unknown subset {name!r}; use train, val or test")
        return getattr(self, name)

    def sizes(self) -> dict[str, int]:
        return {k: len(getattr(self, k)) for k in ("train", "val", "test", "dropped")}


def list_splits() -> list[str]:
    """Names of the split presets (the files of `conf/split`, shipped in the package)."""
    return list_presets("split")


def _load_named(name: str) -> SplitSpec:
    try:
        cfg = load_preset("split", name)
    except ConfigError as e:
        raise SplitError(str(e)) from None
    return SplitSpec.from_mapping(cfg)


def _tokens(bank) -> list[frozenset[str]]:
    return [frozenset(s.split()) for s in bank.concepts]


def _rule_masks(spec: SplitSpec, bank) -> tuple[np.ndarray, np.ndarray]:
    """Boolean (train, test) masks over the bank's concepts for a token or length rule."""
    if spec.rule == "length":
        lengths = np.asarray(bank.lengths)
        return lengths < spec.threshold, lengths >= spec.threshold
    toks = _tokens(bank)
    if spec.rule == "binding":
        out, inn = set(spec.held_out), set(spec.held_in)
        has_out = np.array([bool(t & out) for t in toks])
        has_in = np.array([bool(t & inn) for t in toks])
        return ~has_out, has_out & ~has_in
    # pairs
    cond = set(spec.condition)
    test = np.array(
        [
            (not cond or bool(t & cond)) and any(a in t and b in t for a, b in spec.pairs)
            for t in toks
        ]
    )
    return ~test, test


def _groups_to_subsets(groups: np.ndarray, fractions, rng) -> np.ndarray:
    """Assign each synonym group to subset 0/1/2 with `fractions`; return the per-concept id."""
    uniq = np.unique(groups)
    choice = rng.choice(3, size=len(uniq), p=np.asarray(fractions) / np.sum(fractions))
    lookup = dict(zip(uniq.tolist(), choice.tolist(), strict=True))
    return np.array([lookup[g] for g in groups.tolist()], dtype=np.int8)


def make_split(
    bank, name_or_cfg: str | Mapping | SplitSpec | Callable[[Concept], bool], *, seed: int = 0
) -> Split:
    """Split `bank`'s concepts.

    Args:
        bank: a `ConceptBank`.
        name_or_cfg: a split name from `conf/split` (e.g. ``"binding_color"``), a mapping or
            `SplitSpec` of a user rule, or a predicate ``Concept -> bool`` that marks test
            concepts (the rest is train; val = test).
        seed: seed for a predicate split's disjoint val; config splits carry their own seed.

    Returns:
        The `Split`.

    Raises:
        SplitError: unknown name, malformed rule, or a split that fails its checks.
    """
    if callable(name_or_cfg) and not isinstance(name_or_cfg, SplitSpec):
        test = np.array([bool(name_or_cfg(parse(s))) for s in bank.concepts])
        name = getattr(name_or_cfg, "__name__", "predicate")
        return _finish(name, bank, ~test, test, val="same_as_test", val_fraction=0.25, seed=seed)
    if isinstance(name_or_cfg, str):
        spec = _load_named(name_or_cfg)
    elif isinstance(name_or_cfg, SplitSpec):
        spec = name_or_cfg
        spec.check()
    else:
        spec = SplitSpec.from_mapping(name_or_cfg)
    if spec.rule == "random_groups":
        rng = derive_rng(spec.seed, f"split:{spec.name}")
        sub = _groups_to_subsets(np.asarray(bank.groups), spec.fractions, rng)
        idx = np.arange(len(bank))
        split = Split(spec.name, idx[sub == 0], idx[sub == 1], idx[sub == 2], idx[:0])
        _check(split, bank, grouped=True)
        return split
    if spec.rule == "all":
        idx = np.arange(len(bank))
        return Split(spec.name, idx, idx, idx, idx[:0])
    train, test = _rule_masks(spec, bank)
    return _finish(
        spec.name, bank, train, test, val=spec.val, val_fraction=spec.val_fraction, seed=spec.seed
    )


def _finish(
    name: str,
    bank,
    train: np.ndarray,
    test: np.ndarray,
    *,
    val: str,
    val_fraction: float,
    seed: int,
) -> Split:
    """Indices from masks, then the validation policy and the checks."""
    idx = np.arange(len(bank))
    tr, te, dropped = idx[train & ~test], idx[test], idx[~train & ~test]
    if val == "disjoint":
        groups = np.asarray(bank.groups)[te]
        rng = derive_rng(seed, f"split-val:{name}")
        sub = _groups_to_subsets(groups, (val_fraction, 1 - val_fraction, 0.0), rng)
        va, te = te[sub == 0], te[sub == 1]
    else:
        va = te
    split = Split(name, tr, va, te, dropped)
    _check(split, bank, grouped=False)
    return split


def _check(split: Split, bank, *, grouped: bool) -> None:
    """The split's invariants; a violation is a bug in a rule, so it raises SplitError."""
    if np.intersect1d(split.train, split.test).size:
        raise SplitError(f"split {split.name!r} has concepts in both train and test")
    if grouped:
        g = np.asarray(bank.groups)
        sides = [set(g[s].tolist()) for s in (split.train, split.val, split.test)]
        if sides[0] & sides[1] or sides[0] & sides[2] or sides[1] & sides[2]:
            raise SplitError(f"split {split.name!r} puts a synonym group on two sides")
    if len(split.test) == 0:
        log.warning("split %r has no test concepts in this bank", split.name)

"""The `Split` type and what every split rule shares: turning train/test masks into index
arrays, the validation policy (the paper's val = test concepts, or a disjoint val) and the
split's own checks (paper section 3)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from curi.errors import SplitError, SplitOptionError
from curi.rng import derive_rng
from curi.validate import choice

__all__ = [
    "MAX_NAME_BYTES",
    "Split",
    "VAL_POLICIES",
    "check_name",
    "check_split",
    "finish",
    "finish_spec",
    "groups_to_subsets",
]

VAL_POLICIES = ("same_as_test", "disjoint")
SUBSETS = ("train", "val", "test")
# A split's name becomes part of file names (lm task files ``curi_<split>_hard.docs.jsonl.gz``,
# saved adversarial splits ``<split>-<k>.json``), and file systems refuse names over 255 bytes.
MAX_NAME_BYTES = 200


def check_name(name: object) -> str:
    """`name` as a split's name: at most `MAX_NAME_BYTES` bytes of UTF-8.

    Raises:
        SplitError: naming the length and the bound.
    """
    name = str(name)
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > MAX_NAME_BYTES:
        raise SplitError(
            f"split name {name[:40]!r}... has {size} bytes; use at most {MAX_NAME_BYTES} (it "
            "becomes part of file names, and file systems refuse names over 255 bytes)"
        )
    return name


@dataclass(frozen=True)
class Split:
    """Concept indices of each subset (sorted int64 arrays) and the concepts dropped.

    ``info`` holds what a generator measured while making the split (e.g. an MCD split's
    divergences and its random baseline); `curi split` prints it. Empty for rule splits."""

    name: str
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    dropped: np.ndarray
    info: dict = field(default_factory=dict, compare=False)

    def subset(self, name: str) -> np.ndarray:
        """The indices of subset `name` (train, val or test)."""
        choice(name, "subset", SUBSETS, error=SplitOptionError)
        return getattr(self, name)

    def sizes(self) -> dict[str, int]:
        return {k: len(getattr(self, k)) for k in (*SUBSETS, "dropped")}


def groups_to_subsets(groups: np.ndarray, fractions, rng: np.random.Generator) -> np.ndarray:
    """Assign each synonym group to subset 0/1/2 with `fractions`; return the per-concept id."""
    uniq = np.unique(groups)
    choice = rng.choice(3, size=len(uniq), p=np.asarray(fractions) / np.sum(fractions))
    lookup = dict(zip(uniq.tolist(), choice.tolist(), strict=True))
    return np.array([lookup[g] for g in groups.tolist()], dtype=np.int8)


def finish(
    name: str,
    bank,
    train: np.ndarray,
    test: np.ndarray,
    *,
    val: str = "same_as_test",
    val_fraction: float = 0.25,
    seed: int = 0,
) -> Split:
    """The split from boolean (train, test) masks over `bank`'s concepts.

    Concepts in `test` are test (a concept in both masks counts as test), those in neither are
    dropped. The validation policy then picks val: ``same_as_test`` (the original release: val
    concepts are the test concepts, other episodes) or ``disjoint`` (a seeded `val_fraction` of
    the test synonym groups moves to val). Finally the split's checks run.
    """
    idx = np.arange(len(bank))
    tr, te, dropped = idx[train & ~test], idx[test], idx[~train & ~test]
    if val == "disjoint":
        groups = np.asarray(bank.groups)[te]
        rng = derive_rng(seed, f"split-val:{name}")
        sub = groups_to_subsets(groups, (val_fraction, 1 - val_fraction, 0.0), rng)
        va, te = te[sub == 0], te[sub == 1]
    else:
        va = te
    split = Split(name, tr, va, te, dropped)
    check_split(split, bank, grouped=False)
    return split


def finish_spec(spec, bank, train: np.ndarray, test: np.ndarray) -> Split:
    """`finish` with the name and validation policy of a `SplitSpec`."""
    return finish(
        spec.name, bank, train, test, val=spec.val, val_fraction=spec.val_fraction, seed=spec.seed
    )


def check_split(split: Split, bank, *, grouped: bool) -> None:
    """The split's invariants (paper section 3): no concept in both train and test and, when
    `grouped`, no synonym group on two sides. A violation is a bug in a rule or a bad split
    file, so it raises. (An empty subset is refused by `make_split`, which knows whether the
    config asked for it.)

    Raises:
        SplitError: naming the split and the broken invariant.
    """
    if np.intersect1d(split.train, split.test).size:
        raise SplitError(f"split {split.name!r} has concepts in both train and test")
    if grouped:
        g = np.asarray(bank.groups)
        sides = [set(g[s].tolist()) for s in (split.train, split.val, split.test)]
        if sides[0] & sides[1] or sides[0] & sides[2] or sides[1] & sides[2]:
            raise SplitError(f"split {split.name!r} puts a synonym group on two sides")

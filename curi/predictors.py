"""Easiness of test concepts (Bogin, Gupta and Berant 2022, section 4.3): 1 when every local
structure of a concept occurs in the training concepts, else the least similarity of an unobserved
structure to its most similar observed one; the paper's ablations and baselines, and the CURI
extensions, as named predictors scored on one train/test pair of a bank.

Choices where the paper is silent (all settings; docs/design.md, "Unobserved local structures"):
- the program graph's root is the quantifier (``exists=``/``for-all=``/``lambda``) under ``<s>``;
- a symbol with no neighbour in training has similarity 0 to every symbol, so a concept with a
  test symbol absent from training (binding splits) has easiness 0; it is flagged
  (``unseen_symbols``), not an error;
- length easiness is ``1 - len / (L + 1)`` with L the longest concept of train and test: only its
  order matters for AUC, and it is strictly decreasing (no ties among lengths);
- random easiness is uniform in [0, 1], seeded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from curi.concepts import parse
from curi.extension_predictors import EXTENSION_PREDICTORS, ExtensionIndex, extension_easiness
from curi.rng import derive_rng
from curi.structures import CONTEXTS, PC_ONLY, SIB_ONLY, StructureIndex
from curi.validate import choice

__all__ = [
    "EXTENSIONS",
    "PREDICTORS",
    "PREDICTOR_NAMES",
    "THRESHOLDS",
    "VARIANTS",
    "EasinessResult",
    "Predictor",
    "easiness",
    "predictor_scores",
    "split_easiness",
]


@dataclass(frozen=True)
class Predictor:
    """A named easiness predictor.

    Attributes:
        kind: structures (see `curi.structures.STRUCTURE_KINDS`), or ``length`` / ``random``.
        n: structure size.
        shapes: tree shapes kept (None: all of size <= n).
        types: context types of the symbol similarity.
        similarity: False for NoSim (an unobserved structure scores 0).
        reduce: ``min`` (the paper's rule) or ``frac`` (share of the concept's structures that
            are observed; an extension: a graded count instead of the worst structure).
        seed_rule: whether the paper defines it (False: a CURI extension).
    """

    kind: str
    n: int = 2
    shapes: frozenset[str] | None = None
    types: tuple[str, ...] = CONTEXTS
    similarity: bool = True
    reduce: str = "min"
    seed_rule: bool = True


_PC_TYPES = ("parent", "child")
_SIB_TYPES = ("left", "right")
#: The `variant` values of `easiness`.
VARIANTS = {
    "all": Predictor("tree"),
    "nosib": Predictor("tree", shapes=PC_ONLY, types=_PC_TYPES),
    "nopc": Predictor("tree", shapes=SIB_ONLY, types=_SIB_TYPES),
    "nosim": Predictor("tree", similarity=False),
    "bigram": Predictor("ngram", types=_SIB_TYPES),
    "cooc": Predictor("cooc", seed_rule=False),
    "cooc_frac": Predictor("cooc", reduce="frac", seed_rule=False),
    "frac": Predictor("tree", n=4, reduce="frac", seed_rule=False),
}

#: The predictors of the AUC table: the paper's rules and baselines, then the CURI extensions
#: (``cooc*``, ``frac4``, ``*+len``: the mean of a predictor's and the length easiness).
PREDICTORS = {
    "2-LS": Predictor("tree"),
    "3-LS": Predictor("tree", n=3),
    "4-LS": Predictor("tree", n=4),
    "2-LS-NoSib": VARIANTS["nosib"],
    "2-LS-NoPC": VARIANTS["nopc"],
    "2-LS-NoSim": VARIANTS["nosim"],
    "bigram": VARIANTS["bigram"],
    "length": Predictor("length"),
    "random": Predictor("random"),
    "cooc": VARIANTS["cooc"],
    "cooc-NoSim": Predictor("cooc", similarity=False, seed_rule=False),
    "cooc-frac": VARIANTS["cooc_frac"],
    "4-LS-frac": VARIANTS["frac"],
}
COMBINED = {"cooc-frac+len": "cooc-frac", "4-LS-frac+len": "4-LS-frac"}
#: CURI extensions from what a learner sees (`curi.extension_predictors`): the test concept's
#: extension against the training concepts'; they need the bank (``predictor_scores(bank=)``).
EXTENSIONS = tuple(EXTENSION_PREDICTORS)
#: every name `predictor_scores` takes (the ``predictors`` option of ``curi difficulty``)
PREDICTOR_NAMES = (*PREDICTORS, *COMBINED, *EXTENSIONS)
#: How the difficulty report splits concepts into easy and hard by an outcome, besides a number
#: (easy: outcome >= it): each split's median, or the median of all splits' concepts at once.
THRESHOLDS = ("median", "pooled_median")


@dataclass
class EasinessResult:
    """Per test concept: easiness, the unobserved structures at the minimum (the ones that make
    it hard, as text), the number of unobserved structures, and whether it has a symbol absent
    from the training concepts."""

    easiness: np.ndarray
    hardest: list[str] = field(default_factory=list)
    num_unobserved: np.ndarray | None = None
    unseen_symbols: np.ndarray | None = None


def _text(s) -> str:
    shape, lab = s
    return f"{shape}({' '.join(lab)})"


def _score(
    index: StructureIndex, pred: Predictor, train: np.ndarray, test: np.ndarray
) -> EasinessResult:
    observed = index.observed(train)
    if pred.similarity:
        per_struct = index.best_similarity(observed, index.contexts(train), types=pred.types)
    else:
        per_struct = observed.astype(float)
    known = index.train_symbols(train)
    out = np.ones(len(test))
    unobs = np.zeros(len(test), np.int64)
    unseen = np.zeros(len(test), bool)
    hardest = []
    for j, c in enumerate(np.asarray(test).tolist()):
        ids = index.concept_structures[c]
        unseen[j] = not index.concept_symbols[c] <= known
        miss = ids[~observed[ids]]
        unobs[j] = len(miss)
        if pred.reduce == "frac":
            out[j] = 1 - len(miss) / max(len(ids), 1)
        elif len(miss):
            vals = per_struct[miss]
            out[j] = float(vals.min())
        if len(miss):
            worst = miss[per_struct[miss] <= per_struct[miss].min()]
            hardest.append("; ".join(_text(index.structures[s]) for s in worst[:3]))
        else:
            hardest.append("")
        if unseen[j] and pred.reduce == "min":
            out[j] = 0.0  # an unseen symbol: similarity undefined, easiness 0 (the paper)
    return EasinessResult(out, hardest, unobs, unseen)


def _length_easiness(lengths: np.ndarray, train: np.ndarray, test: np.ndarray) -> np.ndarray:
    top = max(int(lengths[train].max()) if len(train) else 0, int(lengths[test].max()))
    return 1.0 - lengths[test] / (top + 1)


def easiness(
    train: Sequence[str], test: Sequence[str], *, n: int = 2, variant: str = "all"
) -> list[float]:
    """The paper's easiness of each test concept given the training concepts.

    Args:
        train: training concept strings (unweighted; repeats do not matter).
        test: concept strings to score.
        n: size of the local structures, 2, 3 or 4.
        variant: ``all`` (parent-child and sibling structures, similarity from the four context
            types), ``nosib`` (parent-child only, the root node above the quantifier included;
            parent and child contexts), ``nopc`` (siblings only; left and right contexts),
            ``nosim`` (any unobserved structure gives 0); also ``bigram`` (n-grams of the
            postfix tokens, left/right contexts: the paper's baseline), ``cooc`` / ``cooc_frac``
            (co-occurring symbol pairs) and ``frac`` (share of observed structures), extensions.

    Returns:
        One easiness in [0, 1] per test concept.

    Raises:
        OptionError: an unknown variant (a ValueError). ValueError: a bad n. ConceptError: a
            string does not parse.
    """
    choice(variant, "variant", VARIANTS)
    base = VARIANTS[variant]
    pred = dataclasses.replace(base, n=n)
    train, test = list(train), list(test)
    if not test:
        return []
    index = StructureIndex(train + test, n=pred.n, kind=pred.kind, shapes=pred.shapes)
    tr = np.arange(len(train))
    te = np.arange(len(train), len(train) + len(test))
    return _score(index, pred, tr, te).easiness.tolist()


class _Indexes:
    """`StructureIndex`es of one concept list, built on first use and shared by predictors."""

    def __init__(self, concepts: Sequence[str]) -> None:
        self.concepts = list(concepts)
        self._cache: dict[tuple, StructureIndex] = {}

    def get(self, pred: Predictor) -> StructureIndex:
        key = (pred.kind, pred.n, pred.shapes)
        if key not in self._cache:
            self._cache[key] = StructureIndex(
                self.concepts, n=pred.n, kind=pred.kind, shapes=pred.shapes
            )
        return self._cache[key]


def predictor_scores(
    concepts: Sequence[str],
    splits: Sequence[tuple[str, np.ndarray, np.ndarray]],
    *,
    predictors: Sequence[str] | None = None,
    seed: int = 0,
    indexes: _Indexes | None = None,
    bank=None,
    extensions: ExtensionIndex | None = None,
) -> dict[str, dict[str, EasinessResult]]:
    """Every predictor's easiness of the test concepts of several splits of one concept list.

    Args:
        concepts: all concepts (e.g. a bank's).
        splits: ``(name, train indices, test indices)`` triples.
        predictors: names in `PREDICTORS`, `COMBINED` or `EXTENSIONS` (default: all, the
            `EXTENSIONS` only when `bank` is given).
        seed: the random predictor's seed, and the extension predictors' drawn positives.
        bank: the `ConceptBank` of `concepts`: the `EXTENSIONS` read its truth bits.
        extensions: the bank's `ExtensionIndex` when the caller has it (built once otherwise).

    Returns:
        ``{split name: {predictor name: EasinessResult}}``; ``ext-nn``'s ``hardest`` holds the
        nearest training concept of each test concept.

    Raises:
        OptionError: an unknown predictor name (a ValueError). ValueError: an extension
            predictor without `bank`.
    """
    names = list(predictors or [*PREDICTORS, *COMBINED, *(EXTENSIONS if bank is not None else ())])
    for name in names:
        choice(name, "predictors", PREDICTOR_NAMES)
    ext_names = [n for n in names if n in EXTENSIONS]
    if ext_names and bank is None and extensions is None:
        raise ValueError(f"predictors {ext_names} read the bank's extensions: pass bank=")
    if ext_names and extensions is None:
        extensions = ExtensionIndex.from_bank(bank)
    idx = indexes or _Indexes(concepts)
    lengths = np.array([len(parse(c)) for c in idx.concepts])
    out: dict[str, dict[str, EasinessResult]] = {}
    for split_name, train, test in splits:
        train, test = np.asarray(train, np.int64), np.asarray(test, np.int64)
        row: dict[str, EasinessResult] = {}
        need = {n for n in names if n in PREDICTORS} | {COMBINED[n] for n in names if n in COMBINED}
        for name in [n for n in PREDICTORS if n in need]:
            pred = PREDICTORS[name]
            if pred.kind == "length":
                row[name] = EasinessResult(_length_easiness(lengths, train, test))
            elif pred.kind == "random":
                rng = derive_rng(seed, f"easiness-random:{split_name}")
                row[name] = EasinessResult(rng.random(len(test)))
            else:
                row[name] = _score(idx.get(pred), pred, train, test)
        for name in [n for n in names if n in COMBINED]:
            length = _length_easiness(lengths, train, test)
            row[name] = EasinessResult((row[COMBINED[name]].easiness + length) / 2)
        if ext_names:
            ext = extension_easiness(extensions, train, test, ext_names, seed=seed)
            for name in ext_names:
                near = ext.get("nearest") if name == "ext-nn" else None
                hardest = [] if near is None else [idx.concepts[i] for i in near.tolist()]
                row[name] = EasinessResult(ext[name], hardest)
        out[split_name] = {n: row[n] for n in names}
    return out


def split_easiness(bank, split) -> dict:
    """Mean easiness of a split's test concepts, for `curi split`: the paper's 2-LS rule and its
    NoSib variant, and the number of test concepts with a symbol absent from training (easiness
    0). Empty when the split has no test concepts."""
    if len(split.test) == 0:
        return {}
    res = predictor_scores(
        bank.concepts, [(split.name, split.train, split.test)], predictors=["2-LS", "2-LS-NoSib"]
    )[split.name]
    return {
        "mean_easiness_2ls": round(float(res["2-LS"].easiness.mean()), 4),
        "mean_easiness_2ls_nosib": round(float(res["2-LS-NoSib"].easiness.mean()), 4),
        "test_concepts_with_unseen_symbols": int(res["2-LS"].unseen_symbols.sum()),
    }

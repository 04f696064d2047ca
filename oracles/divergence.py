"""DBCA atom and compound divergences of a split (DIVERGENCE.md sections 1-2; Keysers et al.
2020, section 2): canonical concept trees, their atoms and depth-<=2 compounds, weighted
distributions over a concept set and the Chernoff-coefficient divergences between two sets."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from curi.concepts import Concept, Node, parse
from curi.rng import derive_rng

__all__ = [
    "COMMUTATIVE",
    "WEIGHTINGS",
    "DivergenceIndex",
    "Divergences",
    "atom_distribution",
    "atom_divergence",
    "atoms",
    "canonical_tree",
    "chernoff_coefficient",
    "compound_distribution",
    "compound_divergence",
    "compounds",
]

COMMUTATIVE = ("and", "or", "=")
WEIGHTINGS = ("length", "uniform")
ATOM_ALPHA = 0.5  # D_A = 1 - C_0.5 (symmetric)
COMPOUND_ALPHA = 0.1  # D_C = 1 - C_0.1 (train first: dominated by the test distribution)
LENGTH_DECAY = 0.2  # episode sampling: p(h) proportional to exp(-0.2 len(h)) (spec section 5)

ConceptLike = str | Concept
ArrayLikeInt = Sequence[int] | np.ndarray


class Divergences(NamedTuple):
    """Atom and compound divergence of one train/test pair, both in [0, 1]."""

    atom: float
    compound: float


def _concept(c: ConceptLike) -> Concept:
    if isinstance(c, Concept):
        return c
    if isinstance(c, str):
        return parse(c)
    raise TypeError(f"expected a concept string or a Concept, got {type(c).__name__}")


def _canonical(node: Node) -> tuple[Node, str]:
    """The subtree with commutative children sorted, and its postfix serialisation."""
    if not node.args:
        return node, node.op
    kids = [_canonical(a) for a in node.args]
    if node.op in COMMUTATIVE:
        kids.sort(key=lambda k: k[1])
    text = " ".join([k[1] for k in kids] + [node.op])
    return Node(node.op, tuple(k[0] for k in kids)), text


def canonical_tree(concept: ConceptLike) -> Node:
    """The concept's tree in canonical order, rooted at its quantifier.

    The root is the quantifier (``exists=`` / ``for-all=``) or ``lambda`` for a collapsed
    concept, with the body as its only child; the children of ``and``, ``or`` and ``=`` are
    sorted by their serialised (postfix) subtrees, so ``a b and`` and ``b a and`` give one tree.

    Args:
        concept: a concept string (canonical or original-release format) or a `Concept`.

    Returns:
        The root `Node`.

    Raises:
        ConceptError: the string does not parse.
    """
    c = _concept(concept)
    return Node(c.quantifier or "lambda", (_canonical(c.body)[0],))


def _truncated(node: Node, depth: int) -> str:
    """S-expression of the subtree cut `depth` levels below `node`, e.g. ``(= (color? x) red)``.

    Labels only; the children of a commutative node are re-sorted by their truncated text, so
    a compound's identity depends on the compound alone, not on the subtrees that were cut.
    """
    if depth == 0 or not node.args:
        return node.op
    parts = [_truncated(a, depth - 1) for a in node.args]
    if node.op in COMMUTATIVE:
        parts.sort()
    return f"({node.op} {' '.join(parts)})"


def atoms(concept: ConceptLike) -> Counter[str]:
    """Atoms of a concept: the labels of its canonical tree's nodes, with multiplicity.

    Args:
        concept: a concept string or a `Concept`.

    Returns:
        Counter of node labels (quantifier or ``lambda`` included).
    """
    return Counter(n.op for n in canonical_tree(concept).walk())


def compounds(concept: ConceptLike) -> Counter[str]:
    """Compounds of a concept: for every internal node of its canonical tree, the node with its
    children and, when some child is internal, the node with its children and grandchildren.

    A compound is the s-expression of that subtree (labels only, shape kept), e.g. for
    ``x color? red = lambda S. exists=``: ``(exists= =)``, ``(exists= (= color? red))``,
    ``(= color? red)``, ``(= (color? x) red)`` and ``(color? x)``. A node whose children are
    all leaves has a single compound (its depth-2 subtree would be the same subtree again).

    Args:
        concept: a concept string or a `Concept`.

    Returns:
        Counter of compound strings.
    """
    out: Counter[str] = Counter()
    for node in canonical_tree(concept).walk():
        if not node.args:
            continue
        out[_truncated(node, 1)] += 1
        if any(a.args for a in node.args):
            out[_truncated(node, 2)] += 1
    return out


def _check_weighting(weighting: str) -> None:
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")


def _distribution(
    concepts: Iterable[ConceptLike], extract: Callable[[Concept], Counter[str]], weighting: str
) -> dict[str, float]:
    """Normalised counts of `extract(concept)`, each concept weighted as episodes sample it."""
    _check_weighting(weighting)
    total: Counter[str] = Counter()
    n = 0
    for item in concepts:
        c = _concept(item)
        w = math.exp(-LENGTH_DECAY * len(c)) if weighting == "length" else 1.0
        for key, count in extract(c).items():
            total[key] += w * count
        n += 1
    if n == 0:
        raise ValueError("cannot build a distribution over an empty concept set")
    z = sum(total.values())
    return {k: v / z for k, v in total.items()}


def atom_distribution(
    concepts: Iterable[ConceptLike], *, weighting: str = "length"
) -> dict[str, float]:
    """F_A(T): the normalised atom counts of a concept set.

    Args:
        concepts: concept strings or `Concept`s (repeats count again).
        weighting: ``"length"`` weights each concept by its episode-sampling probability
            within the set, proportional to ``exp(-0.2 len(h))``; ``"uniform"`` weights all
            concepts equally.

    Returns:
        Atom -> probability (sums to 1).

    Raises:
        ValueError: empty set or unknown weighting. ConceptError: a string does not parse.
    """
    return _distribution(concepts, atoms, weighting)


def compound_distribution(
    concepts: Iterable[ConceptLike], *, weighting: str = "length"
) -> dict[str, float]:
    """F_C(T): the normalised compound counts of a concept set (see `atom_distribution`).

    Args:
        concepts: concept strings or `Concept`s.
        weighting: ``"length"`` or ``"uniform"``.

    Returns:
        Compound -> probability (sums to 1).

    Raises:
        ValueError: empty set or unknown weighting. ConceptError: a string does not parse.
    """
    return _distribution(concepts, compounds, weighting)


def chernoff_coefficient(p: Mapping[str, float], q: Mapping[str, float], *, alpha: float) -> float:
    """Chernoff coefficient ``C_alpha(P || Q) = sum_k p_k^alpha q_k^(1 - alpha)``.

    Args:
        p: first distribution (key -> probability); missing keys have probability 0.
        q: second distribution.
        alpha: in (0, 1); only keys present in both contribute.

    Returns:
        The coefficient, in [0, 1] for probability distributions (1 iff P == Q).

    Raises:
        ValueError: `alpha` outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha}")
    small, large = (p, q) if len(p) <= len(q) else (q, p)
    return math.fsum(
        p[k] ** alpha * q[k] ** (1.0 - alpha) for k in small if k in large and p[k] > 0 and q[k] > 0
    )


def _divergence(c: float) -> float:
    return min(1.0, max(0.0, 1.0 - c))  # clip rounding (C = 1 + 1e-16 for P == Q)


def atom_divergence(
    train: Iterable[ConceptLike], test: Iterable[ConceptLike], *, weighting: str = "length"
) -> float:
    """D_A(train || test) = 1 - C_0.5(F_A(train) || F_A(test)).

    Args:
        train: training concepts (strings or `Concept`s).
        test: test concepts.
        weighting: ``"length"`` (episode-sampling probability) or ``"uniform"``.

    Returns:
        The atom divergence in [0, 1]; symmetric.

    Raises:
        ValueError: an empty set or unknown weighting. ConceptError: a string does not parse.
    """
    p = atom_distribution(train, weighting=weighting)
    q = atom_distribution(test, weighting=weighting)
    return _divergence(chernoff_coefficient(p, q, alpha=ATOM_ALPHA))


def compound_divergence(
    train: Iterable[ConceptLike], test: Iterable[ConceptLike], *, weighting: str = "length"
) -> float:
    """D_C(train || test) = 1 - C_0.1(F_C(train) || F_C(test)), train first.

    Asymmetric: the weight 0.9 on the test distribution makes a test compound never seen in
    training count almost fully, while extra training compounds cost little.

    Args:
        train: training concepts (strings or `Concept`s).
        test: test concepts.
        weighting: ``"length"`` or ``"uniform"``.

    Returns:
        The compound divergence in [0, 1].

    Raises:
        ValueError: an empty set or unknown weighting. ConceptError: a string does not parse.
    """
    p = compound_distribution(train, weighting=weighting)
    q = compound_distribution(test, weighting=weighting)
    return _divergence(chernoff_coefficient(p, q, alpha=COMPOUND_ALPHA))


class _Sparse:
    """Per-concept counts of one kind (atoms or compounds) as flat sparse entries."""

    def __init__(self, counters: Sequence[Counter[str]]) -> None:
        vocab: dict[str, int] = {}
        rows: list[int] = []
        ids: list[int] = []
        counts: list[int] = []
        for i, counter in enumerate(counters):
            for key, n in counter.items():
                ids.append(vocab.setdefault(key, len(vocab)))
                rows.append(i)
                counts.append(n)
        self.vocab = list(vocab)  # id -> key
        self.rows = np.asarray(rows, dtype=np.int64)  # (nnz,) concept of each entry
        self.ids = np.asarray(ids, dtype=np.int64)  # (nnz,) key id of each entry
        self.counts = np.asarray(counts, dtype=np.float64)  # (nnz,)

    def distribution(self, concept_weight: np.ndarray) -> np.ndarray:
        """(V,) normalised counts, concept i weighted by ``concept_weight[i]``."""
        f = np.bincount(
            self.ids, weights=concept_weight[self.rows] * self.counts, minlength=len(self.vocab)
        )
        return f / f.sum()


def _chernoff_dense(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    both = (p > 0) & (q > 0)
    return float(np.sum(p[both] ** alpha * q[both] ** (1.0 - alpha)))


class DivergenceIndex:
    """Atoms and compounds of every concept of a bank, extracted once, so the divergences of
    many splits (index arrays into the same concepts) cost a few sparse sums each.

    Args:
        concepts: the bank's concepts (strings or `Concept`s), e.g. ``bank.concepts``.

    Raises:
        ValueError: no concepts. ConceptError: a string does not parse.
    """

    def __init__(self, concepts: Sequence[ConceptLike]) -> None:
        if len(concepts) == 0:
            raise ValueError("a DivergenceIndex needs at least one concept")
        cache: dict[ConceptLike, tuple[Counter[str], Counter[str], int]] = {}
        atom_counts, compound_counts, lengths = [], [], []
        for item in concepts:
            if item not in cache:
                c = _concept(item)
                cache[item] = (atoms(c), compounds(c), len(c))
            a, k, n = cache[item]
            atom_counts.append(a)
            compound_counts.append(k)
            lengths.append(n)
        self.lengths = np.asarray(lengths, dtype=np.int64)  # (N,) len(h) in canonical tokens
        self._atoms = _Sparse(atom_counts)
        self._compounds = _Sparse(compound_counts)

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def num_atoms(self) -> int:
        """Distinct atoms over all concepts."""
        return len(self._atoms.vocab)

    @property
    def num_compounds(self) -> int:
        """Distinct compounds over all concepts."""
        return len(self._compounds.vocab)

    def _weights(self, indices: ArrayLikeInt, weighting: str, what: str) -> np.ndarray:
        """(N,) weight of each concept in the set `indices` (repeats add up)."""
        _check_weighting(weighting)
        idx = np.asarray(indices)
        if idx.ndim != 1 or idx.size == 0:
            raise ValueError(f"{what} must be a non-empty 1-D array of concept indices")
        if not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"{what} must hold integer concept indices, got {idx.dtype}")
        if idx.min() < 0 or idx.max() >= len(self):
            raise ValueError(
                f"{what} holds indices outside [0, {len(self)}): min {idx.min()}, max {idx.max()}"
            )
        if weighting == "length":
            w = np.exp(-LENGTH_DECAY * self.lengths[idx])
        else:
            w = np.ones(idx.size)
        return np.bincount(idx, weights=w, minlength=len(self))

    def distributions(
        self, indices: ArrayLikeInt, *, weighting: str = "length"
    ) -> tuple[dict[str, float], dict[str, float]]:
        """F_A and F_C of the concepts `indices` as dictionaries (for inspection and tests).

        Args:
            indices: concept indices into this index (repeats count again).
            weighting: ``"length"`` or ``"uniform"``.

        Returns:
            (atom -> probability, compound -> probability), zero entries left out.

        Raises:
            ValueError: empty or out-of-range indices, or unknown weighting.
        """
        w = self._weights(indices, weighting, "indices")
        out = []
        for sparse in (self._atoms, self._compounds):
            f = sparse.distribution(w)
            out.append({sparse.vocab[i]: float(f[i]) for i in np.flatnonzero(f)})
        return out[0], out[1]

    def divergences(
        self, train: ArrayLikeInt, test: ArrayLikeInt, *, weighting: str = "length"
    ) -> Divergences:
        """D_A and D_C of a split given as concept indices.

        Args:
            train: indices of the training concepts.
            test: indices of the test concepts.
            weighting: ``"length"`` or ``"uniform"``.

        Returns:
            `Divergences` (atom, compound), as `atom_divergence` / `compound_divergence`.

        Raises:
            ValueError: empty or out-of-range indices, or unknown weighting.
        """
        wp = self._weights(train, weighting, "train")
        wq = self._weights(test, weighting, "test")
        ca = _chernoff_dense(self._atoms.distribution(wp), self._atoms.distribution(wq), ATOM_ALPHA)
        cc = _chernoff_dense(
            self._compounds.distribution(wp), self._compounds.distribution(wq), COMPOUND_ALPHA
        )
        return Divergences(_divergence(ca), _divergence(cc))

    def random_baseline(
        self,
        train: ArrayLikeInt,
        test: ArrayLikeInt,
        *,
        seed: int,
        pool: ArrayLikeInt | None = None,
        weighting: str = "length",
    ) -> Divergences:
        """D_A and D_C of a random split with the sizes of (`train`, `test`).

        Sparse compounds give even a random split a non-zero D_C; this is the baseline to
        read a split's divergences against. The random split draws ``len(train)`` and
        ``len(test)`` distinct entries of `pool` with a generator derived from
        ``(seed, "divergence_baseline")``.

        Args:
            train: indices of the split's training concepts (only its size is used).
            test: indices of the split's test concepts (only its size is used).
            seed: the seed.
            pool: indices to draw from; default: `train` and `test` together (the split's
                concepts, reassigned at random).
            weighting: ``"length"`` or ``"uniform"``.

        Returns:
            `Divergences` of the random split.

        Raises:
            ValueError: the pool is smaller than the two sizes together, or bad indices.
        """
        n_train, n_test = np.asarray(train).size, np.asarray(test).size
        if pool is None:
            pool = np.concatenate([np.asarray(train).ravel(), np.asarray(test).ravel()])
        pool = np.asarray(pool)
        if n_train + n_test > pool.size:
            raise ValueError(
                f"pool of {pool.size} concepts cannot hold {n_train} train + {n_test} test"
            )
        perm = derive_rng(seed, "divergence_baseline").permutation(pool)
        return self.divergences(
            perm[:n_train], perm[n_train : n_train + n_test], weighting=weighting
        )

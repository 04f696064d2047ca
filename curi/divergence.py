"""DBCA atom and compound divergences of a split (Keysers et al. 2020, section 2), measured on
CURI concepts: canonical concept trees, their atoms and depth-<=2 compounds, distributions over
a concept set weighted as episodes sample it, and the Chernoff-coefficient divergences.

One implementation: `DivergenceIndex` extracts atoms and compounds once and computes every
distribution and divergence; the plain functions on concept lists build an index over the
concepts they are given and read from it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from curi.concepts import Concept, Node, parse
from curi.prior import length_log_prior
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

ConceptLike = str | Concept
ArrayLikeInt = Sequence[int] | np.ndarray


class Divergences(NamedTuple):
    """Atom and compound divergence of one train/test pair, both in [0, 1]."""

    atom: float
    compound: float


# --- concept trees, atoms, compounds --------------------------------------------------------
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

    Raises:
        ConceptError: the string does not parse. TypeError: neither a string nor a `Concept`.
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

    Raises:
        ConceptError: the string does not parse. TypeError: neither a string nor a `Concept`.
    """
    out: Counter[str] = Counter()
    for node in canonical_tree(concept).walk():
        if not node.args:
            continue
        out[_truncated(node, 1)] += 1
        if any(a.args for a in node.args):
            out[_truncated(node, 2)] += 1
    return out


# --- distributions and the Chernoff coefficient ---------------------------------------------
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

    def as_dict(self, f: np.ndarray) -> dict[str, float]:
        """The non-zero entries of a (V,) distribution, by key."""
        return {self.vocab[i]: float(f[i]) for i in np.flatnonzero(f)}


def _chernoff(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    """``sum_k p_k^alpha q_k^(1 - alpha)`` of two aligned arrays, over keys where both are > 0."""
    both = (p > 0) & (q > 0)
    return float(np.sum(p[both] ** alpha * q[both] ** (1.0 - alpha)))


def chernoff_coefficient(p: Mapping[str, float], q: Mapping[str, float], *, alpha: float) -> float:
    """Chernoff coefficient ``C_alpha(P || Q) = sum_k p_k^alpha q_k^(1 - alpha)`` of two
    distributions given as dictionaries (the divergences use the same sum on arrays).

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
    keys = [k for k in small if k in large]
    p_shared = np.array([p[k] for k in keys], dtype=np.float64)
    q_shared = np.array([q[k] for k in keys], dtype=np.float64)
    return _chernoff(p_shared, q_shared, alpha)


def _divergence(c: float) -> float:
    return min(1.0, max(0.0, 1.0 - c))  # clip rounding (C = 1 + 1e-16 for P == Q)


def _check_weighting(weighting: str) -> None:
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")


# --- the index: every distribution and divergence is computed here --------------------------
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
        """(N,) weight of each concept in the set `indices` (repeats add up): its episode
        sampling weight ``exp(-0.2 len(h))`` (paper Appendix B.3) or 1."""
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
            w = np.exp(length_log_prior(self.lengths[idx]))
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
        return tuple(s.as_dict(s.distribution(w)) for s in (self._atoms, self._compounds))

    def divergences(
        self, train: ArrayLikeInt, test: ArrayLikeInt, *, weighting: str = "length"
    ) -> Divergences:
        """D_A and D_C of a split given as concept indices.

        ``D_A = 1 - C_0.5(F_A(train) || F_A(test))`` and ``D_C = 1 - C_0.1(F_C(train) ||
        F_C(test))``, train first (Keysers et al. 2020, section 2).

        Args:
            train: indices of the training concepts.
            test: indices of the test concepts.
            weighting: ``"length"`` or ``"uniform"``.

        Returns:
            `Divergences` (atom, compound).

        Raises:
            ValueError: empty or out-of-range indices, or unknown weighting.
        """
        wp = self._weights(train, weighting, "train")
        wq = self._weights(test, weighting, "test")
        ca = _chernoff(self._atoms.distribution(wp), self._atoms.distribution(wq), ATOM_ALPHA)
        cc = _chernoff(
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


# --- the same measures on concept lists (thin uses of the index) ----------------------------
def _indexed(
    weighting: str, *sets: Iterable[ConceptLike]
) -> tuple[DivergenceIndex, list[np.ndarray]]:
    """An index over the concatenated sets and each set's indices into it."""
    _check_weighting(weighting)
    lists = [list(s) for s in sets]
    if any(len(s) == 0 for s in lists):
        raise ValueError("cannot build a distribution over an empty concept set")
    index = DivergenceIndex([c for s in lists for c in s])
    ends = np.cumsum([len(s) for s in lists])
    return index, [np.arange(end - len(s), end) for s, end in zip(lists, ends, strict=True)]


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
    index, (idx,) = _indexed(weighting, concepts)
    return index.distributions(idx, weighting=weighting)[0]


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
    index, (idx,) = _indexed(weighting, concepts)
    return index.distributions(idx, weighting=weighting)[1]


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
    index, (tr, te) = _indexed(weighting, train, test)
    return index.divergences(tr, te, weighting=weighting).atom


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
    index, (tr, te) = _indexed(weighting, train, test)
    return index.divergences(tr, te, weighting=weighting).compound

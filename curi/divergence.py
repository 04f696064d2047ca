"""DBCA atom and compound divergences of a split (Keysers et al. 2020, section 2), measured on
CURI concepts: canonical concept trees, their atoms and compounds, distributions over a concept
set weighted as episodes sample it, and the Chernoff-coefficient divergences.

Compounds come in two kinds (`COMPOUND_KINDS`): ``dbca`` (the default; Keysers et al.'s
subgraphs and weights, `curi.compounds`) and ``depth2`` (the former definition, `compounds`:
depth-<=2 subtrees, each occurrence counted once), kept so that earlier numbers can be
reproduced (docs/divergence.md, "Compounds").

One implementation: `DivergenceIndex` extracts atoms and compounds once and computes every
distribution and divergence; the plain functions on concept lists build an index over the
concepts they are given and read from it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from curi.compounds import COMMUTATIVE, COMPOUND_KINDS, TOP_N, _groups, dbca_entries
from curi.concepts import Concept, Node, parse
from curi.prior import length_log_prior
from curi.rng import derive_rng
from curi.validate import choice

__all__ = [
    "COMMUTATIVE",
    "COMPOUND_KINDS",
    "WEIGHTINGS",
    "DivergenceIndex",
    "Divergences",
    "atom_distribution",
    "atom_divergence",
    "atoms",
    "bank_index",
    "canonical_tree",
    "chernoff_coefficient",
    "compound_distribution",
    "compound_divergence",
    "compounds",
    "split_divergences",
]

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

    def __init__(self, counters: Sequence[Counter[str]] = ()) -> None:
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

    @classmethod
    def from_entries(
        cls, rows: np.ndarray, keys: np.ndarray, values: np.ndarray, names: Sequence[str]
    ) -> _Sparse:
        """The same as from Counters, from entries ordered by concept: keys are renumbered in
        order of first appearance, as the Counter constructor numbers them."""
        out = cls()
        keys = np.asarray(keys, dtype=np.int64)
        order, starts = _groups(keys)
        used = keys[np.sort(order[starts])]  # the keys in order of first appearance
        rank = np.zeros(int(keys.max()) + 1 if keys.size else 0, dtype=np.int64)
        rank[used] = np.arange(len(used))
        out.vocab = [names[k] for k in used.tolist()]
        out.ids = rank[keys]
        out.rows = np.asarray(rows, dtype=np.int64)
        out.counts = np.asarray(values, dtype=np.float64)
        return out

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
    choice(weighting, "weighting", WEIGHTINGS)


def _expand(
    rows: np.ndarray, keys: np.ndarray, values: np.ndarray, first: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entries of distinct concepts (`rows` sorted) repeated for each position of `first`
    (position -> distinct concept), in position order."""
    first_arr = np.asarray(first, dtype=np.int64)
    if np.array_equal(first_arr, np.arange(len(first_arr))):
        return rows, keys, values
    indptr = np.searchsorted(rows, np.arange(first_arr.max() + 2))
    starts, lens = indptr[first_arr], np.diff(indptr)[first_arr]
    take = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())
    return np.repeat(np.arange(len(first_arr)), lens), keys[take], values[take]


# --- the index: every distribution and divergence is computed here --------------------------
class DivergenceIndex:
    """Atoms and compounds of every concept of a bank, extracted once, so the divergences of
    many splits (index arrays into the same concepts) cost a few sparse sums each.

    Args:
        concepts: the bank's concepts (strings or `Concept`s), e.g. ``bank.concepts``.
        compound_kind: ``"dbca"`` (Keysers et al.'s weighted subgraphs, counted over
            `concepts`) or
            ``"depth2"`` (the former depth-<=2 subtrees, unweighted).
        top_n: ``dbca`` only: the compounds kept, by total weight.

    Raises:
        ValueError: no concepts or unknown kind. ConceptError: a string does not parse.
    """

    def __init__(
        self,
        concepts: Sequence[ConceptLike],
        *,
        compound_kind: str = "dbca",
        top_n: int | None = TOP_N,
    ) -> None:
        if len(concepts) == 0:
            raise ValueError("a DivergenceIndex needs at least one concept")
        choice(compound_kind, "compound_kind", COMPOUND_KINDS)
        self.compound_kind = compound_kind
        cache: dict[ConceptLike, int] = {}
        first: list[int] = []  # position of each concept's first equal item
        parsed: list[Concept] = []
        for item in concepts:
            if item not in cache:
                cache[item] = len(parsed)
                parsed.append(_concept(item))
            first.append(cache[item])
        roots = [canonical_tree(c) for c in parsed]
        self.lengths = np.asarray([len(parsed[i]) for i in first], dtype=np.int64)
        atom_counts = [Counter(n.op for n in r.walk()) for r in roots]
        self._atoms = _Sparse([atom_counts[i] for i in first])
        if compound_kind == "depth2":
            compound_counts = [compounds(c) for c in parsed]
            self._compounds = _Sparse([compound_counts[i] for i in first])
        else:
            rows, keys, values, names = dbca_entries(roots, top_n=top_n)
            self._compounds = _Sparse.from_entries(*_expand(rows, keys, values, first), names)

    def entries(self, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The per-concept counts of ``"atoms"`` or ``"compounds"`` as flat sparse entries:
        (concept of each entry, key id, count or weight, number of keys)."""
        s = {"atoms": self._atoms, "compounds": self._compounds}[kind]
        return s.rows, s.ids, s.counts, len(s.vocab)

    def concept_weights(self, weighting: str = "length") -> np.ndarray:
        """(N,) each concept's weight in a distribution: ``exp(-0.2 len(h))`` or 1."""
        _check_weighting(weighting)
        if weighting == "length":
            return np.exp(length_log_prior(self.lengths))
        return np.ones(len(self.lengths))

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
    weighting: str, *sets: Iterable[ConceptLike], compound_kind: str = "dbca"
) -> tuple[DivergenceIndex, list[np.ndarray]]:
    """An index over the concatenated sets and each set's indices into it."""
    _check_weighting(weighting)
    lists = [list(s) for s in sets]
    if any(len(s) == 0 for s in lists):
        raise ValueError("cannot build a distribution over an empty concept set")
    index = DivergenceIndex([c for s in lists for c in s], compound_kind=compound_kind)
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
    concepts: Iterable[ConceptLike], *, weighting: str = "length", compound_kind: str = "dbca"
) -> dict[str, float]:
    """F_C(T): the normalised compound counts of a concept set (see `atom_distribution`).

    Args:
        concepts: concept strings or `Concept`s.
        weighting: ``"length"`` or ``"uniform"``.
        compound_kind: ``"dbca"`` (weights counted over `concepts`) or ``"depth2"``.

    Returns:
        Compound -> probability (sums to 1).

    Raises:
        ValueError: empty set or unknown weighting. ConceptError: a string does not parse.
    """
    index, (idx,) = _indexed(weighting, concepts, compound_kind=compound_kind)
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
    train: Iterable[ConceptLike],
    test: Iterable[ConceptLike],
    *,
    weighting: str = "length",
    compound_kind: str = "dbca",
) -> float:
    """D_C(train || test) = 1 - C_0.1(F_C(train) || F_C(test)), train first.

    Asymmetric: the weight 0.9 on the test distribution makes a test compound never seen in
    training count almost fully, while extra training compounds cost little.

    Args:
        train: training concepts (strings or `Concept`s).
        test: test concepts.
        weighting: ``"length"`` or ``"uniform"``.
        compound_kind: ``"dbca"`` (weights counted over train and test together) or
            ``"depth2"``.

    Returns:
        The compound divergence in [0, 1].

    Raises:
        ValueError: an empty set or unknown weighting. ConceptError: a string does not parse.
    """
    index, (tr, te) = _indexed(weighting, train, test, compound_kind=compound_kind)
    return index.divergences(tr, te, weighting=weighting).compound


# --- a bank's index, shared by the commands -------------------------------------------------
_BANK_INDEX: dict[tuple, DivergenceIndex] = {}


def bank_index(bank, *, compound_kind: str = "dbca") -> DivergenceIndex:
    """The `DivergenceIndex` of `bank`'s concepts, built once per process (the DBCA weights
    of the paper bank take about 20 CPU seconds)."""
    import hashlib

    key = (hashlib.sha256("\n".join(bank.concepts).encode()).hexdigest(), compound_kind)
    if key not in _BANK_INDEX:
        _BANK_INDEX[key] = DivergenceIndex(bank.concepts, compound_kind=compound_kind)
    return _BANK_INDEX[key]


def split_divergences(
    bank, split, *, seed: int = 0, compound_kind: str = "dbca", weighting: str = "length"
) -> dict[str, float]:
    """D_A and D_C of a split of `bank`, next to a random split of the same sizes.

    Args:
        bank: the `ConceptBank` the split was made on.
        split: a `curi.splits.Split`.
        seed: seed of the random baseline.
        compound_kind: ``"dbca"`` or ``"depth2"``.
        weighting: ``"length"`` or ``"uniform"``.

    Returns:
        ``d_atom``, ``d_compound``, ``d_atom_random``, ``d_compound_random`` (empty when the
        split has no train or no test concepts).
    """
    if len(split.train) == 0 or len(split.test) == 0:
        return {}
    index = bank_index(bank, compound_kind=compound_kind)
    d = index.divergences(split.train, split.test, weighting=weighting)
    if len(split.train) + len(split.test) <= len(bank):
        pool = np.arange(len(bank))
        base = index.random_baseline(
            split.train, split.test, seed=seed, pool=pool, weighting=weighting
        )
    else:  # overlapping sides (instance IID): a random split of the same sizes is itself
        base = d
    return {
        "d_atom": d.atom,
        "d_compound": d.compound,
        "d_atom_random": base.atom,
        "d_compound_random": base.compound,
    }

"""DBCA compounds of CURI concepts as Keysers et al. 2020 (section 2.1 and Appendix L.4) define
them, with the candidate set they used for CFQ (docs/divergence.md, "Compounds"): every connected
subgraph of a concept's canonical tree with at most 5 nodes and branching factor at most 2, plus
the linear (downward) chains of any length; each weighted in its concept as

    w(G, R) = max over occurrences g of G in R of (1 - max over G' with g a strict subgraph of
              an occurrence g' of G' in R of P(G' | G)),

where ``P(G' | G)`` is the share of G's occurrences over the whole concept set that lie inside
an occurrence of G'. Only the top-N compounds by total weight are kept.

A compound's identity is its labels and its shape: the s-expression of the subgraph in which an
omitted child of a node that keeps some child is written ``_``, e.g. ``(= (color? _) red)`` is
not ``(= color? red)``; the children of ``and``, ``or`` and ``=`` are sorted, so the identity
does not depend on the written order. Single nodes are atoms, not compounds.

`depth2_compounds` (the former definition: a node with its children, and with its children and
grandchildren, unweighted) stays available so that earlier numbers can be reproduced.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from curi.concepts import Node

__all__ = [
    "COMPOUND_KINDS",
    "MAX_NODES",
    "TOP_N",
    "dbca_entries",
    "dbca_weights",
    "occurrences",
]

COMPOUND_KINDS = ("dbca", "depth2")
MAX_NODES = 5  # non-linear subgraphs have at most this many nodes (CFQ; docs/divergence.md)
MAX_BRANCHING = 2
TOP_N = 100_000  # compounds kept by total weight (Keysers et al.: "the ones with highest sum")
COMMUTATIVE = ("and", "or", "=")


class _Tree:
    """A canonical tree flattened in preorder (a subtree is a contiguous index range): labels,
    children, and a key per node naming its whole subtree."""

    def __init__(self, root: Node) -> None:
        self.labels: list[str] = []
        self.children: list[list[int]] = []
        stack: list[tuple[Node, int]] = [(root, -1)]
        while stack:
            node, parent = stack.pop()
            i = len(self.labels)
            self.labels.append(node.op)
            self.children.append([])
            if parent >= 0:
                self.children[parent].append(i)
            stack.extend((a, i) for a in reversed(node.args))
        if len(self.labels) > 62:
            raise ValueError(f"concept tree of {len(self.labels)} nodes: at most 62 supported")
        self.keys = [""] * len(self.labels)
        for v in reversed(range(len(self.labels))):
            kids = "\x1f".join(self.keys[c] for c in self.children[v])
            self.keys[v] = f"{self.labels[v]}\x1e{kids}\x1d" if kids else self.labels[v]

    def rooted(self, v: int, budget: int, cache: dict) -> list[tuple[int, int, str]]:
        """(mask, size, identity) of every connected subgraph rooted at `v` with at most
        `budget` nodes and at most `MAX_BRANCHING` children kept per node, masks relative to
        `v` (bit 0 is `v`). The answer depends on the subtree alone, so `cache` keeps it by
        subtree key for every tree of a bank; each identity is built from its children's."""
        hit = cache.get((self.keys[v], budget))
        if hit is not None:
            return hit
        label, kids = self.labels[v], self.children[v]
        out = [(1, 1, label)]
        if budget > 1 and kids:
            below = [
                [(m << (c - v), s, t) for m, s, t in self.rooted(c, budget - 1, cache)]
                for c in kids
            ]
            sort = label in COMMUTATIVE

            def text(picked: dict[int, str]) -> str:
                parts = [picked.get(k, "_") for k in range(len(kids))]
                return f"({label} {' '.join(sorted(parts) if sort else parts)})"

            for k, subs in enumerate(below):
                out.extend((1 | m, 1 + s, text({k: t})) for m, s, t in subs)
            for i in range(len(kids)):
                for j in range(i + 1, len(kids)):
                    for m1, s1, t1 in below[i]:
                        out.extend(
                            (1 | m1 | m2, 1 + s1 + s2, text({i: t1, j: t2}))
                            for m2, s2, t2 in below[j]
                            if 1 + s1 + s2 <= budget
                        )
        cache[self.keys[v], budget] = out
        return out

    def chains(self, v: int, cache: dict) -> list[tuple[int, int, str]]:
        """(mask relative to `v`, length, identity) of every downward chain from `v`, in
        preorder with the children taken last first; cached by subtree like `rooted`."""
        hit = cache.get((self.keys[v], "chains"))
        if hit is not None:
            return hit
        label, kids = self.labels[v], self.children[v]
        out = [(1, 1, label)]
        sort = label in COMMUTATIVE
        for k in reversed(range(len(kids))):
            shift = kids[k] - v
            for m, n, t in self.chains(kids[k], cache):
                parts = ["_"] * len(kids)
                parts[k] = t
                out.append(
                    (
                        1 | m << shift,
                        n + 1,
                        f"({label} {' '.join(sorted(parts) if sort else parts)})",
                    )
                )
        cache[self.keys[v], "chains"] = out
        return out

    def at(self, v: int, cache: dict, vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """(relative masks, type ids) of the occurrences rooted at `v`: the subgraphs of 2+
        nodes, then the long chains. New identities get the next ids of `vocab`, in order, so
        ids number the identities by first occurrence over the trees walked with `cache`."""
        hit = cache.get(self.keys[v])
        if hit is None:
            found = [(m, t) for m, s, t in self.rooted(v, MAX_NODES, cache) if s > 1]
            found += [(m, t) for m, n, t in self.chains(v, cache) if n > MAX_NODES]
            masks = np.fromiter((m for m, _ in found), np.int64, len(found))
            types = np.fromiter(
                (vocab.setdefault(t, len(vocab)) for _, t in found), np.int64, len(found)
            )
            hit = cache[self.keys[v]] = (masks, types)
        return hit

    def occurrences(self, cache: dict, vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """(masks, type ids) of every occurrence of the tree, nodes in preorder."""
        parts = [self.at(v, cache, vocab) for v in range(len(self.labels))]
        masks = np.concatenate([m << v for v, (m, _) in enumerate(parts)])
        return masks, np.concatenate([t for _, t in parts])


def _run_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Start of each run of equal values in a sorted array."""
    if sorted_keys.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])


def _groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts): a stable sort of `keys` and where each run of equal keys starts in it
    (sorting beats numpy's hashing ``np.unique`` several times over on these arrays)."""
    order = np.argsort(keys, kind="stable")
    return order, _run_starts(keys[order])


def occurrences(root: Node) -> tuple[list[str], np.ndarray]:
    """Every compound occurrence of a canonical tree: its identity and its node set.

    Args:
        root: a canonical concept tree (`curi.divergence.canonical_tree`).

    Returns:
        (identities, masks): one identity string and one int64 bit mask of preorder node
        indices per occurrence (subgraphs of 2+ nodes: <= 5 nodes with branching <= 2, or
        downward chains of any length).
    """
    vocab: dict[str, int] = {}
    masks, types = _Tree(root).occurrences({}, vocab)
    names = list(vocab)
    return [names[t] for t in types.tolist()], masks


def dbca_entries(
    roots: Sequence[Node],
    *,
    top_n: int | None = TOP_N,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """The weighted compounds of each concept as flat arrays (Keysers et al. 2020, section 2.1).

    For every occurrence g of a compound G in a concept R, the strict supergraph occurrences g'
    in R (from the same candidate set) give the types G' containing g; ``P(G' | G)`` counts,
    over all concepts, the share of G's occurrences that lie in some occurrence of G'. The
    occurrence weighs ``1 - max_G' P(G' | G)`` (1 when g has no supergraph) and the compound
    weighs the maximum over its occurrences in R. Only the tree walk is a Python loop (each distinct
    subtree walked once); the counting and the maxima are array operations.

    Args:
        roots: canonical trees of the concept set over which P is counted (a whole bank).
        top_n: keep the compounds with the largest total weight over `roots`; None: all.
        progress: called with the number of concepts done, now and then.

    Returns:
        (rows, keys, weights, names): one entry per (concept, compound) of non-zero weight,
        ordered by concept and, within a concept, by the compound's first occurrence; `keys`
        index `names`, the compounds in order of first occurrence over `roots`.
    """
    vocab: dict[str, int] = {}
    cache: dict = {}  # subtree -> its occurrences, shared by all trees
    types_of: list[np.ndarray] = []  # per tree: the type of each occurrence
    subs: list[np.ndarray] = []  # per tree: (occurrence, type of a strict supergraph) pairs
    sups: list[np.ndarray] = []
    offset = 0
    for n, root in enumerate(roots):
        masks, types = _Tree(root).occurrences(cache, vocab)
        # inside[i, j]: occurrence i is a strict subgraph of occurrence j
        inside = ((masks[:, None] & masks[None, :]) == masks[:, None]) & (
            masks[:, None] != masks[None, :]
        )
        i, j = np.nonzero(inside)
        types_of.append(types)
        subs.append(i + offset)
        sups.append(types[j])
        offset += len(types)
        if progress is not None and n % 1000 == 999:
            progress(n + 1)
    n_types = len(vocab)
    types = np.concatenate(types_of) if types_of else np.zeros(0, np.int64)
    tree = np.repeat(np.arange(len(types_of)), [len(t) for t in types_of])
    # each (occurrence, supergraph type) once, sorted by occurrence
    pair_keys = np.sort(np.concatenate(subs) * n_types + np.concatenate(sups)) if subs else types
    sub, sup = np.divmod(pair_keys[_run_starts(pair_keys)], max(n_types, 1))
    occ_count = np.bincount(types, minlength=n_types)
    # how many occurrences of G lie in some occurrence of G', for each (occurrence, G')
    order, starts = _groups(types[sub] * n_types + sup)
    sizes = np.diff(np.r_[starts, len(order)])
    pair_count = np.empty(len(order))
    pair_count[order] = np.repeat(sizes, sizes)
    best = np.zeros(len(types))  # max over supergraph types of the pair count, per occurrence
    if sub.size:
        starts = _run_starts(sub)
        best[sub[starts]] = np.maximum.reduceat(pair_count, starts)
    occ_weight = 1.0 - best / occ_count[types]
    # the weight of each (tree, type): the max over its occurrences, in first-occurrence order
    order, starts = _groups(tree * n_types + types)
    weight = np.maximum.reduceat(occ_weight[order], starts) if order.size else occ_weight
    first = order[starts]  # a stable sort keeps each group's first occurrence first
    by_first = np.argsort(first, kind="stable")
    rows, keys, weight = tree[first[by_first]], types[first[by_first]], weight[by_first]
    total = np.bincount(keys, weights=weight, minlength=n_types)
    names = list(vocab)
    keep = weight > 0
    if top_n is not None and n_types > top_n:
        kept = np.zeros(n_types, dtype=bool)
        kept[np.argsort(-total, kind="stable")[:top_n]] = True
        keep &= kept[keys]
    return rows[keep], keys[keep], weight[keep], names


def dbca_weights(
    roots: Sequence[Node],
    *,
    top_n: int | None = TOP_N,
    progress: Callable[[int], None] | None = None,
) -> list[Counter[str]]:
    """The weighted compounds of each concept (Keysers et al. 2020, section 2.1), as in
    `dbca_entries`.

    Args:
        roots: canonical trees of the concept set over which P is counted (a whole bank).
        top_n: keep the compounds with the largest total weight over `roots`; None: all.
        progress: called with the number of concepts done, now and then.

    Returns:
        One Counter per concept: compound -> weight in (0, 1] (zero weights left out).
    """
    rows, keys, weight, names = dbca_entries(roots, top_n=top_n, progress=progress)
    out: list[Counter[str]] = [Counter() for _ in roots]
    for r, k, x in zip(rows.tolist(), keys.tolist(), weight.tolist(), strict=True):
        out[r][names[k]] = x
    return out

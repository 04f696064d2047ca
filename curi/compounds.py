"""DBCA compounds of CURI concepts as seed 000 (Keysers et al. 2020, section 2.1 and Appendix
L.4) defines them, with the candidate set reported in seed 003 for CFQ: every connected subgraph
of a concept's canonical tree with at most 5 nodes and branching factor at most 2, plus the
linear (downward) chains of any length; each weighted in its concept as

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
    "dbca_weights",
    "occurrences",
]

COMPOUND_KINDS = ("dbca", "depth2")
MAX_NODES = 5  # non-linear subgraphs have at most this many nodes (CFQ, seed 003)
MAX_BRANCHING = 2
TOP_N = 100_000  # compounds kept by total weight (seed 000 keeps "the ones with highest sum")
COMMUTATIVE = ("and", "or", "=")


class _Tree:
    """A canonical tree flattened in preorder: labels, children and subtree sizes."""

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

    def text(self, v: int, mask: int) -> str:
        """Identity of the subgraph `mask` below node `v` (see the module docstring)."""
        kids = self.children[v]
        if not any(mask >> c & 1 for c in kids):
            return self.labels[v]
        parts = [self.text(c, mask) if mask >> c & 1 else "_" for c in kids]
        if self.labels[v] in COMMUTATIVE:
            parts.sort()
        return f"({self.labels[v]} {' '.join(parts)})"

    def rooted(self, v: int, budget: int) -> list[tuple[int, int]]:
        """(mask, size) of every connected subgraph rooted at `v` with at most `budget` nodes
        and at most `MAX_BRANCHING` children kept per node."""
        out = [(1 << v, 1)]
        if budget <= 1:
            return out
        kids = self.children[v]
        below = {c: self.rooted(c, budget - 1) for c in kids}
        for c in kids:
            out.extend((1 << v | m, 1 + s) for m, s in below[c])
        for i, c1 in enumerate(kids):
            for c2 in kids[i + 1 :]:
                for m1, s1 in below[c1]:
                    for m2, s2 in below[c2]:
                        if 1 + s1 + s2 <= budget:
                            out.append((1 << v | m1 | m2, 1 + s1 + s2))
        return out

    def long_chains(self, v: int) -> list[int]:
        """Masks of the downward chains from `v` with more than `MAX_NODES` nodes."""
        out: list[int] = []
        stack = [(v, 1 << v, 1)]
        while stack:
            u, m, n = stack.pop()
            if n > MAX_NODES:
                out.append(m)
            stack.extend((c, m | 1 << c, n + 1) for c in self.children[u])
        return out


def occurrences(root: Node) -> tuple[list[str], np.ndarray]:
    """Every compound occurrence of a canonical tree: its identity and its node set.

    Args:
        root: a canonical concept tree (`curi.divergence.canonical_tree`).

    Returns:
        (identities, masks): one identity string and one int64 bit mask of preorder node
        indices per occurrence (subgraphs of 2+ nodes: <= 5 nodes with branching <= 2, or
        downward chains of any length).
    """
    tree = _Tree(root)
    texts: list[str] = []
    masks: list[int] = []
    for v in range(len(tree.labels)):
        rooted = [m for m, s in tree.rooted(v, MAX_NODES) if s > 1] + tree.long_chains(v)
        for m in rooted:
            texts.append(tree.text(v, m))
            masks.append(m)
    return texts, np.asarray(masks, dtype=np.int64)


def dbca_weights(
    roots: Sequence[Node],
    *,
    top_n: int | None = TOP_N,
    progress: Callable[[int], None] | None = None,
) -> list[Counter[str]]:
    """The weighted compounds of each concept (seed 000, section 2.1).

    For every occurrence g of a compound G in a concept R, the strict supergraph occurrences g'
    in R (from the same candidate set) give the types G' containing g; ``P(G' | G)`` counts,
    over all concepts, the share of G's occurrences that lie in some occurrence of G'. The
    occurrence weighs ``1 - max_G' P(G' | G)`` (1 when g has no supergraph) and the compound
    weighs the maximum over its occurrences in R.

    Args:
        roots: canonical trees of the concept set over which P is counted (a whole bank).
        top_n: keep the compounds with the largest total weight over `roots`; None: all.
        progress: called with the number of concepts done, now and then.

    Returns:
        One Counter per concept: compound -> weight in (0, 1] (zero weights left out).
    """
    vocab: dict[str, int] = {}
    per_tree: list[tuple[np.ndarray, list[np.ndarray]]] = []
    occ_count: Counter[int] = Counter()
    pair_count: Counter[tuple[int, int]] = Counter()
    for n, root in enumerate(roots):
        texts, masks = occurrences(root)
        types = np.fromiter((vocab.setdefault(t, len(vocab)) for t in texts), np.int64, len(texts))
        # inside[i, j]: occurrence i is a strict subgraph of occurrence j
        inside = ((masks[:, None] & masks[None, :]) == masks[:, None]) & (
            masks[:, None] != masks[None, :]
        )
        supers = []
        for i in range(len(types)):
            sup = np.unique(types[inside[i]])
            supers.append(sup)
            occ_count[int(types[i])] += 1
            for t in sup.tolist():
                pair_count[int(types[i]), t] += 1
        per_tree.append((types, supers))
        if progress is not None and n % 1000 == 999:
            progress(n + 1)
    names = list(vocab)
    out: list[Counter[str]] = []
    total = np.zeros(len(names))
    for types, supers in per_tree:
        w: dict[int, float] = {}
        for t, sup in zip(types.tolist(), supers, strict=True):
            p = max((pair_count[t, s] for s in sup.tolist()), default=0) / occ_count[t]
            w[t] = max(w.get(t, 0.0), 1.0 - p)
        counter = Counter({names[t]: x for t, x in w.items() if x > 0})
        for t, x in w.items():
            total[t] += x
        out.append(counter)
    if top_n is not None and len(names) > top_n:
        keep = {names[t] for t in np.argsort(-total, kind="stable")[:top_n].tolist()}
        out = [Counter({k: x for k, x in c.items() if k in keep}) for c in out]
    return out

"""Local structures of concepts and their similarity (Bogin, Gupta and Berant 2022, "Unobserved
local structures make compositional generalization hard", sections 4.1-4.2 and appendix D):
the program graph of a concept, its n-LS for n = 2, 3, 4, the symbol similarity learned from a
set of training concepts and the similarity of two structures.

A `StructureIndex` extracts every concept's structures and context triples once, as integer ids,
so that the observed structures and symbol contexts of any training subset are unions of small
arrays; `curi.predictors` turns them into per-concept easiness."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from curi.concepts import Concept, Node, parse
from curi.divergence import canonical_tree
from curi.validate import choice

__all__ = [
    "CONTEXTS",
    "ROOT",
    "SHAPES",
    "STRUCTURE_KINDS",
    "Structure",
    "StructureIndex",
    "local_structures",
    "program_graph",
    "symbol_contexts",
    "symbol_similarity",
]

ROOT = "<s>"  # the node the paper adds above the program's root (here: above the quantifier)
CONTEXTS = ("parent", "child", "left", "right")
# Shapes (the paper's Fig. 2 and Fig. 6): p = parent-child edge, s = consecutive-sibling edge.
#   pc: parent, child                 sib: left, right sibling
#   pcc: grandparent, parent, child   sss: three consecutive siblings
#   pss: a parent, two consecutive children
#   pccc: chain of three parent-child edges      ssss: four consecutive siblings
#   gpss: grandparent, child, two consecutive grandchildren     psss: parent, three children
SHAPES = {
    2: ("pc", "sib"),
    3: ("pc", "sib", "pcc", "sss", "pss"),
    4: ("pc", "sib", "pcc", "sss", "pss", "pccc", "ssss", "gpss", "psss"),
}
PC_ONLY = frozenset({"pc", "pcc", "pccc"})  # the NoSib structures
SIB_ONLY = frozenset({"sib", "sss", "ssss"})  # the NoPC structures
#: What a structure is made of: ``tree`` (the paper's n-LS on the program graph), ``ngram``
#: (consecutive tokens of the postfix string; the paper's n-gram baseline) or ``cooc`` (an
#: unordered pair of distinct symbols anywhere in one concept: the unit CURI's pair splits
#: hold out; an extension, not in the paper).
STRUCTURE_KINDS = ("tree", "ngram", "cooc")

Structure = tuple[str, tuple[str, ...]]  # (shape, node labels in the shape's order)


@dataclass(frozen=True)
class ProgramGraph:
    """A concept's program graph: node labels, each node's parent (-1 for the root ``<s>``) and
    its ordered children; sibling edges join consecutive children."""

    labels: tuple[str, ...]
    parent: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]


def program_graph(concept: str | Concept) -> ProgramGraph:
    """The paper's program graph of a concept: the canonical tree (`curi.divergence.canonical_tree`:
    commutative children sorted, the quantifier or ``lambda`` at the top) under a root ``<s>``.

    Raises:
        ConceptError: the string does not parse.
    """
    labels, parent, children = [ROOT], [-1], [[]]
    stack: list[tuple[Node, int]] = [(canonical_tree(concept), 0)]
    while stack:
        node, par = stack.pop()
        i = len(labels)
        labels.append(node.op)
        parent.append(par)
        children.append([])
        children[par].append(i)
        stack.extend((a, i) for a in reversed(node.args))
    return ProgramGraph(tuple(labels), tuple(parent), tuple(tuple(c) for c in children))


def _tree_structures(g: ProgramGraph, shapes: frozenset[str]) -> list[Structure]:
    lab, kids = g.labels, g.children
    out: list[Structure] = []

    def add(shape: str, *nodes: int) -> None:
        if shape in shapes:
            out.append((shape, tuple(lab[v] for v in nodes)))

    for v, ch in enumerate(kids):
        for c in ch:
            add("pc", v, c)
            for gc in kids[c]:
                add("pcc", v, c, gc)
                for ggc in kids[gc]:
                    add("pccc", v, c, gc, ggc)
            for a, b in zip(kids[c], kids[c][1:], strict=False):
                add("gpss", v, c, a, b)
        for k in range(len(ch) - 1):
            add("sib", ch[k], ch[k + 1])
            add("pss", v, ch[k], ch[k + 1])
            if k + 2 < len(ch):
                add("sss", *ch[k : k + 3])
                add("psss", v, *ch[k : k + 3])
            if k + 3 < len(ch):
                add("ssss", *ch[k : k + 4])
    return out


def _tokens(concept: str | Concept) -> list[str]:
    c = concept if isinstance(concept, Concept) else parse(concept)
    return [ROOT, *c.tokens()]


def local_structures(
    concept: str | Concept, *, n: int = 2, kind: str = "tree", shapes: Sequence[str] | None = None
) -> list[Structure]:
    """The local structures of one concept, with repetition, in a fixed order.

    Args:
        concept: a concept string or `Concept`.
        n: structure size, 2, 3 or 4 (the paper's n-LS: all shapes of up to n nodes; for
            ``ngram`` the n-grams; ignored for ``cooc``).
        kind: one of `STRUCTURE_KINDS`.
        shapes: restrict ``tree`` structures to these shapes (e.g. `PC_ONLY` for NoSib).

    Returns:
        ``(shape, labels)`` tuples, e.g. ``("pc", ("exists=", "and"))``.

    Raises:
        OptionError: unknown kind or n (a ValueError). ConceptError: the string does not parse.
    """
    choice(n, "n", SHAPES)
    if kind == "tree":
        allowed = frozenset(SHAPES[n]) if shapes is None else frozenset(shapes) & set(SHAPES[n])
        return _tree_structures(program_graph(concept), allowed)
    if kind == "ngram":
        t = _tokens(concept)
        return [(f"{n}gram", tuple(t[i : i + n])) for i in range(len(t) - n + 1)]
    if kind == "cooc":
        syms = sorted(set(program_graph(concept).labels) - {ROOT})
        return [("co", (a, b)) for i, a in enumerate(syms) for b in syms[i + 1 :]]
    choice(kind, "kind", STRUCTURE_KINDS)
    raise AssertionError(f"kind {kind!r} is declared but not handled")


def _context_triples(concept: str | Concept, kind: str) -> list[tuple[str, str, str]]:
    """(context type, symbol, neighbour) of every node: tree contexts for ``tree`` / ``cooc``,
    left / right token neighbours for ``ngram`` (the paper's n-gram baseline)."""
    out = []
    if kind == "ngram":
        t = _tokens(concept)
        for a, b in zip(t, t[1:], strict=False):
            out += [("right", a, b), ("left", b, a)]
        return out
    g = program_graph(concept)
    for v, ch in enumerate(g.children):
        for c in ch:
            out += [("child", g.labels[v], g.labels[c]), ("parent", g.labels[c], g.labels[v])]
        for a, b in zip(ch, ch[1:], strict=False):
            out += [("right", g.labels[a], g.labels[b]), ("left", g.labels[b], g.labels[a])]
    return out


def symbol_contexts(
    concepts: Sequence[str | Concept], *, kind: str = "tree"
) -> dict[str, dict[str, set[str]]]:
    """For each context type, each symbol's set of neighbours over `concepts` (Bogin et al.
    2022, section 4.2)."""
    ctx: dict[str, dict[str, set[str]]] = {k: {} for k in CONTEXTS}
    for c in concepts:
        for k, a, b in _context_triples(c, kind):
            ctx[k].setdefault(a, set()).add(b)
    return ctx


def symbol_similarity(
    a: str, b: str, contexts: dict[str, dict[str, set[str]]], *, types: Sequence[str] = CONTEXTS
) -> float:
    """The paper's distributional similarity: the mean, over the context types in `types` where
    either symbol has a neighbour, of the Jaccard overlap of their neighbour sets; 1 for a == b.

    A symbol without any neighbour in `contexts` (e.g. a colour held out of training) has
    similarity 0 to every other symbol: where no type has a neighbour the mean is undefined and
    we return 0, as the paper's rule needs ("easiness 0" for an unseen symbol)."""
    if a == b:
        return 1.0
    vals = []
    for k in types:
        sa, sb = contexts[k].get(a, set()), contexts[k].get(b, set())
        union = len(sa | sb)
        if union:
            vals.append(len(sa & sb) / union)
    return float(np.mean(vals)) if vals else 0.0


class StructureIndex:
    """Every concept's structures and context triples as integer ids, extracted once.

    Args:
        concepts: concept strings (e.g. ``bank.concepts``).
        n: structure size (see `local_structures`).
        kind: one of `STRUCTURE_KINDS`.
        shapes: for ``tree``, the shapes kept (default: all of size <= n).

    Attributes:
        structures: list of `Structure`, indexed by structure id.
        symbols: list of symbols, indexed by symbol id.
        concept_structures: per concept, an int array of its distinct structure ids.
        concept_contexts: per concept, an int array of its distinct context-triple ids.
    """

    def __init__(
        self,
        concepts: Sequence[str | Concept],
        *,
        n: int = 2,
        kind: str = "tree",
        shapes: Sequence[str] | None = None,
    ) -> None:
        self.n, self.kind = n, kind
        s_ids: dict[Structure, int] = {}
        t_ids: dict[tuple[str, str, str], int] = {}
        self.concept_structures, self.concept_contexts = [], []
        self.concept_symbols: list[frozenset[str]] = []
        for c in concepts:
            st = local_structures(c, n=n, kind=kind, shapes=shapes)
            ids = {s_ids.setdefault(s, len(s_ids)) for s in st}
            self.concept_structures.append(np.array(sorted(ids), np.int64))
            tr = _context_triples(c, kind)
            self.concept_contexts.append(
                np.array(sorted({t_ids.setdefault(t, len(t_ids)) for t in tr}), np.int64)
            )
            self.concept_symbols.append(frozenset(program_graph(c).labels) - {ROOT})
        self.structures: list[Structure] = list(s_ids)
        self.triples: list[tuple[str, str, str]] = list(t_ids)

    def __len__(self) -> int:
        return len(self.concept_structures)

    def _union(self, arrays: list[np.ndarray], idx: np.ndarray, size: int) -> np.ndarray:
        mask = np.zeros(size, bool)
        if len(idx):
            mask[np.concatenate([arrays[i] for i in idx])] = True
        return mask

    def observed(self, train: np.ndarray) -> np.ndarray:
        """(num_structures,) bool: the structures occurring in the concepts `train`."""
        return self._union(self.concept_structures, np.asarray(train), len(self.structures))

    def contexts(self, train: np.ndarray) -> dict[str, dict[str, set[str]]]:
        """`symbol_contexts` of the concepts `train`, from the stored triples."""
        seen = self._union(self.concept_contexts, np.asarray(train), len(self.triples))
        ctx: dict[str, dict[str, set[str]]] = {k: {} for k in CONTEXTS}
        for t in np.flatnonzero(seen).tolist():
            k, a, b = self.triples[t]
            ctx[k].setdefault(a, set()).add(b)
        return ctx

    def train_symbols(self, train: np.ndarray) -> frozenset[str]:
        """Symbols occurring in the concepts `train`."""
        return frozenset().union(*(self.concept_symbols[i] for i in np.asarray(train).tolist()))

    def best_similarity(
        self, observed: np.ndarray, contexts, *, types: Sequence[str] = CONTEXTS
    ) -> np.ndarray:
        """(num_structures,) the paper's structure easiness: 1 for an observed structure, else
        the best similarity to an observed one (same shape, exactly one label differing:
        the symbol similarity of the two differing labels; 0 when there is none).

        For ``cooc`` pairs (unordered) either member may be the differing one."""
        # (shape, position, labels with that position blanked) -> observed labels there
        slots: dict[tuple, set[str]] = {}
        for s in np.flatnonzero(observed).tolist():
            for shape, lab in self._forms(self.structures[s]):
                for i in range(len(lab)):
                    slots.setdefault((shape, i, lab[:i] + lab[i + 1 :]), set()).add(lab[i])
        cache: dict[tuple[str, str], float] = {}

        def sim(a: str, b: str) -> float:
            key = (a, b) if a <= b else (b, a)
            if key not in cache:
                cache[key] = symbol_similarity(a, b, contexts, types=types)
            return cache[key]

        out = np.ones(len(self.structures))
        for s in np.flatnonzero(~observed).tolist():
            best = 0.0
            for shape, lab in self._forms(self.structures[s]):
                for i in range(len(lab)):
                    for b in slots.get((shape, i, lab[:i] + lab[i + 1 :]), ()):
                        best = max(best, sim(lab[i], b))
            out[s] = best
        return out

    @staticmethod
    def _forms(s: Structure) -> list[Structure]:
        shape, lab = s
        return [s, (shape, lab[::-1])] if shape == "co" else [s]

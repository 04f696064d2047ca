"""Tests of curi.compounds: the DBCA candidate subgraphs (<= 5 nodes with branching <= 2, plus
chains of any length) and the weights of Keysers et al. 2020 (Appendix L.4) on hand-made trees."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from curi.compounds import dbca_entries, dbca_weights, occurrences
from curi.concepts import Node
from curi.divergence import canonical_tree


def tree(spec) -> Node:
    """A tree from nested tuples: ("a", ("b", "c")) is a(b(c)); a string is a leaf."""
    if isinstance(spec, str):
        return Node(spec)
    return Node(spec[0], tuple(tree(s) for s in spec[1:]))


def test_occurrences_of_a_small_concept():
    texts, masks = occurrences(canonical_tree("x color? red = lambda S. exists="))
    assert Counter(texts) == Counter(
        [
            "(exists= =)",
            "(exists= (= _ red))",
            "(exists= (= _ color?))",
            "(exists= (= (color? x) _))",
            "(exists= (= color? red))",
            "(exists= (= (color? x) red))",
            "(= _ red)",
            "(= _ color?)",
            "(= (color? x) _)",
            "(= color? red)",
            "(= (color? x) red)",
            "(color? x)",
        ]
    )
    assert len(set(masks.tolist())) == len(masks)  # each occurrence is a distinct node set


def test_size_branching_and_long_chains():
    chain = tree(("a", ("b", ("c", ("d", ("e", ("f", ("g", "h"))))))))  # 8 nodes in a line
    texts, masks = occurrences(chain)
    sizes = [bin(m).count("1") for m in masks.tolist()]
    assert max(sizes) == 8  # linear chains of any length
    assert sizes.count(8) == 1 and sizes.count(2) == 7
    star = tree(("r", "a", "b", "c"))  # branching 3 is never taken whole
    texts, _ = occurrences(star)
    assert "(r a b c)" not in texts and "(r a b _)" in texts
    wide = tree(("r", ("a", "x", "y"), ("b", "z", "w")))  # 7 nodes, not linear
    _, masks = occurrences(wide)
    assert max(bin(m).count("1") for m in masks.tolist()) == 5


def test_order_of_commutative_children_does_not_matter():
    a = canonical_tree("x color? red = x shape? cube = and lambda S. exists=")
    b = canonical_tree("cube x shape? = red x color? = and lambda S. exists=")
    assert Counter(occurrences(a)[0]) == Counter(occurrences(b)[0])


def test_weight_is_one_minus_the_most_likely_supergraph():
    # G = (b c) sits inside (a (b c)) in 6 of its 10 occurrences and inside (d (b c)) in 4.
    roots = [tree(("a", ("b", "c")))] * 6 + [tree(("d", ("b", "c")))] * 4
    w = dbca_weights(roots, top_n=None)
    assert w[0]["(b c)"] == pytest.approx(0.4)  # Keysers et al.: 60% in one supergraph -> 0.4
    assert w[-1]["(b c)"] == pytest.approx(0.6)
    assert w[0]["(a (b c))"] == 1.0  # no supergraph
    assert "(a b)" not in w[0]  # always inside (a (b c)): weight 0, left out


def test_weight_takes_the_most_interesting_occurrence():
    # in r(a(b c), e(b c)) the occurrence under e has the lower P, so w = 1 - P(e-context)
    roots = [tree(("a", ("b", "c")))] * 7 + [tree(("e", ("b", "c")))] * 2
    roots.append(tree(("r", ("a", ("b", "c")), ("e", ("b", "c")))))
    w = dbca_weights(roots, top_n=None)
    # (b c): 11 occurrences; inside (a (b c)) 8 times, inside (e (b c)) 3 times
    assert w[-1]["(b c)"] == pytest.approx(1 - 3 / 11)
    assert w[0]["(b c)"] == pytest.approx(1 - 8 / 11)


def test_top_n_keeps_the_heaviest():
    roots = [tree(("a", ("b", "c")))] * 6 + [tree(("d", ("b", "c")))] * 4
    full = dbca_weights(roots, top_n=None)
    total = Counter()
    for c in full:
        total.update(c)
    kept = dbca_weights(roots, top_n=2)
    names = set().union(*kept)
    assert len(names) == 2
    assert names == {k for k, _ in total.most_common(2)}


def reference_weights(roots, top_n):
    """Keysers et al.'s weights computed one occurrence at a time (the first, loop implementation),
    as an independent check of the array version."""
    vocab, per_tree = {}, []
    occ_count, pair_count = Counter(), Counter()
    for root in roots:
        texts, masks = occurrences(root)
        types = [vocab.setdefault(t, len(vocab)) for t in texts]
        supers = []
        for i, mi in enumerate(masks.tolist()):
            sup = sorted(
                {types[j] for j, mj in enumerate(masks.tolist()) if mi & mj == mi and mi != mj}
            )
            supers.append(sup)
            occ_count[types[i]] += 1
            for t in sup:
                pair_count[types[i], t] += 1
        per_tree.append((types, supers))
    names, out, total = list(vocab), [], np.zeros(len(vocab))
    for types, supers in per_tree:
        w = {}
        for t, sup in zip(types, supers, strict=True):
            p = max((pair_count[t, s] for s in sup), default=0) / occ_count[t]
            w[t] = max(w.get(t, 0.0), 1.0 - p)
        for t, x in w.items():
            total[t] += x
        out.append(Counter({names[t]: x for t, x in w.items() if x > 0}))
    if top_n is not None and len(names) > top_n:
        keep = {names[t] for t in np.argsort(-total, kind="stable")[:top_n].tolist()}
        out = [Counter({k: x for k, x in c.items() if k in keep}) for c in out]
    return out


@pytest.mark.parametrize("top_n", [None, 300])
def test_array_weights_equal_the_loop_on_a_bank(tiny_bank, top_n):
    roots = [canonical_tree(c) for c in tiny_bank.concepts[:400]]
    want = reference_weights(roots, top_n)
    got = dbca_weights(roots, top_n=top_n)
    assert [list(c.items()) for c in got] == [list(c.items()) for c in want]  # same floats, order
    rows, keys, weight, names = dbca_entries(roots, top_n=top_n)
    assert np.all(np.diff(rows) >= 0) and np.all(weight > 0)
    assert sum(len(c) for c in want) == len(rows)
    if top_n is not None:
        assert len(set().union(*want)) == top_n < len(names)  # top_n did cut

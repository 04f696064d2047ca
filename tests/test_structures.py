"""Local structures, symbol and structure similarity, and the easiness rule (curi.structures,
curi.predictors), checked on hand-made concepts and against brute force."""

from __future__ import annotations

import numpy as np
import pytest

import curi
from curi.predictors import PREDICTORS, VARIANTS, easiness, predictor_scores
from curi.structures import (
    CONTEXTS,
    ROOT,
    StructureIndex,
    local_structures,
    program_graph,
    symbol_contexts,
    symbol_similarity,
)

RED = "x color? red = lambda S. exists="  # exists x: color(x) = red
CUBE = "x shape? cube = lambda S. exists="
RED_CUBE = "x color? red = x shape? cube = and lambda S. exists="


def test_program_graph_root_and_canonical_order():
    g = program_graph(RED)
    assert g.labels[0] == ROOT and g.parent[0] == -1
    assert g.labels[1] == "exists=" and g.parent[1] == 0
    eq = g.labels.index("=")
    # `=` is commutative: children sorted by their postfix text ("red" < "x color?")
    assert [g.labels[c] for c in g.children[eq]] == ["red", "color?"]


def test_two_three_four_ls_of_a_hand_made_tree():
    two = local_structures(RED, n=2)
    assert sorted(two) == sorted(
        [
            ("pc", (ROOT, "exists=")),
            ("pc", ("exists=", "=")),
            ("pc", ("=", "red")),
            ("pc", ("=", "color?")),
            ("pc", ("color?", "x")),
            ("sib", ("red", "color?")),
        ]
    )
    three = set(local_structures(RED, n=3)) - set(two)
    assert three == {
        ("pcc", (ROOT, "exists=", "=")),
        ("pcc", ("exists=", "=", "red")),
        ("pcc", ("exists=", "=", "color?")),
        ("pcc", ("=", "color?", "x")),
        ("pss", ("=", "red", "color?")),
    }
    four = set(local_structures(RED, n=4)) - set(local_structures(RED, n=3))
    assert four == {
        ("pccc", (ROOT, "exists=", "=", "red")),
        ("pccc", (ROOT, "exists=", "=", "color?")),
        ("pccc", ("exists=", "=", "color?", "x")),
        ("gpss", ("exists=", "=", "red", "color?")),
    }


def test_nosib_and_nopc_shapes_and_commutative_order():
    assert local_structures(RED_CUBE, n=2, shapes=["pc"]) == [
        s for s in local_structures(RED_CUBE, n=2) if s[0] == "pc"
    ]
    swapped = "x shape? cube = x color? red = and lambda S. exists="
    assert sorted(local_structures(swapped, n=4)) == sorted(local_structures(RED_CUBE, n=4))
    with pytest.raises(ValueError, match="n must be"):
        local_structures(RED, n=5)


def test_seed_worked_example_similarity_075():
    # Seed Fig. 3: `exists` and `most` have the same parents {or, and}; of their two distinct
    # children they share one (find); no sibling contexts. Similarity (1 + 1/2) / 2 = 0.75.
    ctx = {k: {} for k in CONTEXTS}
    ctx["parent"] = {"exists": {"or", "and"}, "most": {"or", "and"}}
    ctx["child"] = {"exists": {"find"}, "most": {"find", "filter"}}
    assert symbol_similarity("exists", "most", ctx) == pytest.approx(0.75)
    assert symbol_similarity("exists", "exists", ctx) == 1.0
    assert symbol_similarity("exists", "never_seen", ctx) == 0.0


def test_symbol_contexts_from_concepts():
    ctx = symbol_contexts([RED, CUBE])
    assert ctx["parent"]["red"] == {"="} and ctx["right"]["red"] == {"color?"}
    # red and cube: same parent, no children, different right sibling -> (1 + 0) / 2
    assert symbol_similarity("red", "cube", ctx) == pytest.approx(0.5)


def _brute_best(index, observed, ctx):
    out = []
    obs = [index.structures[i] for i in np.flatnonzero(observed)]
    for i, (shape, lab) in enumerate(index.structures):
        if observed[i]:
            out.append(1.0)
            continue
        best = 0.0
        for shape2, lab2 in obs:
            forms = [lab2, lab2[::-1]] if shape == "co" else [lab2]
            for f in forms if shape2 == shape else []:
                diff = [k for k in range(len(lab)) if lab[k] != f[k]]
                if shape2 == shape and len(diff) == 1:
                    best = max(best, symbol_similarity(lab[diff[0]], f[diff[0]], ctx))
        out.append(best)
    return np.array(out)


@pytest.mark.parametrize("kind,n", [("tree", 2), ("tree", 3), ("ngram", 2), ("cooc", 2)])
def test_best_similarity_matches_brute_force(tiny_bank, kind, n):
    concepts = list(tiny_bank.concepts[:300])
    index = StructureIndex(concepts, n=n, kind=kind)
    train = np.arange(0, 300, 2)
    observed = index.observed(train)
    ctx = index.contexts(train)
    fast = index.best_similarity(observed, ctx)
    assert np.allclose(fast, _brute_best(index, observed, ctx))
    assert ctx == symbol_contexts([concepts[i] for i in train], kind=kind)


def test_easiness_rule_on_hand_made_concepts():
    assert easiness([RED, CUBE], [RED, CUBE]) == [1.0, 1.0]
    train = [
        RED,
        CUBE,
        "x color? blue = x shape? cube = or lambda S. exists=",
        "x color? blue = not lambda S. exists=",
    ]
    # unobserved: pc(or not), sib(not =); observed and similar: pc(or =), sib(= =)
    test = ["x color? red = not x shape? cube = or lambda S. exists="]
    assert 0 < easiness(train, test)[0] < 1
    assert easiness(train, test, variant="nosim") == [0.0]
    assert easiness(train, test, variant="nopc") == easiness(train, test, n=2, variant="nopc")
    # a test symbol absent from training (binding splits): easiness 0, not an error
    assert easiness([RED, CUBE], ["x color? purple = lambda S. exists="]) == [0.0]
    assert easiness([RED], []) == []
    with pytest.raises(ValueError, match="variant"):
        easiness([RED], [CUBE], variant="nope")


def test_easiness_is_the_min_over_unobserved_structures():
    train = [
        RED,
        CUBE,
        "x color? blue = x shape? cube = or lambda S. exists=",
        "x color? blue = not lambda S. exists=",
    ]
    test = "x color? red = not x shape? cube = or lambda S. exists="
    index = StructureIndex([*train, test], n=2)
    tr = np.arange(4)
    observed = index.observed(tr)
    best = index.best_similarity(observed, index.contexts(tr))
    ids = index.concept_structures[4]
    assert (~observed[ids]).sum() == 2
    assert easiness(train, [test]) == [pytest.approx(best[ids].min())]


def test_public_api_and_determinism(tiny_bank):
    assert curi.easiness is easiness
    concepts = list(tiny_bank.concepts)
    tr, te = concepts[::2], concepts[1::2]
    for variant in VARIANTS:
        a = easiness(tr, te, variant=variant)
        assert a == easiness(tr, te, variant=variant)
        assert all(0.0 <= x <= 1.0 for x in a)
    splits = [("s", np.arange(0, len(concepts), 2), np.arange(1, len(concepts), 2))]
    one = predictor_scores(concepts, splits, seed=3)["s"]
    two = predictor_scores(concepts, splits, seed=3)["s"]
    assert set(PREDICTORS) <= set(one)
    for k in one:
        assert np.array_equal(one[k].easiness, two[k].easiness)

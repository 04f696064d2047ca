"""Tests of curi.divergence: canonical trees, atoms and compounds by hand, DBCA divergences
on hand-computed examples, and the fast index against the plain reference functions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from curi import ConceptError, parse, sample_concepts
from curi.divergence import (
    DivergenceIndex,
    atom_distribution,
    atom_divergence,
    atoms,
    canonical_tree,
    chernoff_coefficient,
    compound_distribution,
    compound_divergence,
    compounds,
)
from curi.rng import derive_rng

RED = "x color? red = lambda S. exists="  # 7 tokens
CUBE = "x shape? cube = lambda S. exists="  # 7 tokens
SET_CUBE = "S shape? cube all lambda S."  # collapsed, 6 tokens


@pytest.fixture(scope="module")
def sampled() -> list[str]:
    return list(dict.fromkeys(c for c, _ in sample_concepts(3000, 7)))[:400]


def test_canonical_order_of_commutative_operators():
    a = "x color? red = x shape? cube = and lambda S. exists="
    b = "cube x shape? = red x color? = and lambda S. exists="  # both levels swapped
    assert canonical_tree(a) == canonical_tree(b)
    assert atoms(a) == atoms(b) and compounds(a) == compounds(b)
    assert canonical_tree("x color? red = x size? small = or lambda S. for-all=") == canonical_tree(
        "x size? small = x color? red = or lambda S. for-all="
    )
    # '>' keeps its operand order; the quantifier is part of the tree
    assert canonical_tree("x size? small > lambda S. exists=") != canonical_tree(
        "small x size? > lambda S. exists="
    )
    assert canonical_tree(RED) != canonical_tree(RED.replace("exists=", "for-all="))


def test_tree_root_is_quantifier_or_lambda():
    tree = canonical_tree(RED)
    assert tree.op == "exists=" and len(tree.args) == 1 and tree.args[0].op == "="
    assert tree.postfix() == "red x color? = exists=".split()  # 'red' sorts before 'x color?'
    collapsed = canonical_tree(SET_CUBE)
    assert collapsed.op == "lambda" and collapsed.args[0].op == "all"
    assert canonical_tree(parse(RED)) == tree  # Concept objects are accepted too


def test_atoms_and_compounds_by_hand():
    assert atoms(RED) == {"exists=": 1, "=": 1, "color?": 1, "x": 1, "red": 1}
    assert compounds(RED) == {
        "(exists= =)": 1,
        "(exists= (= color? red))": 1,
        "(= color? red)": 1,
        "(= (color? x) red)": 1,
        "(color? x)": 1,
    }
    assert compounds(SET_CUBE) == {  # 'all' is not commutative: operands keep their order
        "(lambda all)": 1,
        "(lambda (all shape? cube))": 1,
        "(all shape? cube)": 1,
        "(all (shape? S) cube)": 1,
        "(shape? S)": 1,
    }
    two = "x color? x color? = lambda S. exists="  # repeated structure counts twice
    assert compounds(two)["(color? x)"] == 2 and atoms(two)["x"] == 2


def test_identical_sets_have_zero_divergence(sampled):
    assert atom_divergence(sampled, sampled) == pytest.approx(0.0, abs=1e-12)
    assert compound_divergence(sampled, sampled) == pytest.approx(0.0, abs=1e-12)
    index = DivergenceIndex(sampled)
    d = index.divergences(np.arange(len(sampled)), np.arange(len(sampled)))
    assert d.atom == pytest.approx(0.0, abs=1e-12) and d.compound == pytest.approx(0.0, abs=1e-12)


def test_disjoint_atoms_give_divergence_one():
    assert not set(atoms(RED)) & set(atoms(SET_CUBE))
    assert atom_divergence([RED], [SET_CUBE]) == 1.0
    assert compound_divergence([RED], [SET_CUBE]) == 1.0


def test_small_example_by_hand_and_asymmetry():
    # uniform weights; RED and CUBE share only the compound (exists= =) and the atoms
    # exists=, =, x. train [RED, CUBE]: (exists= =) 2/10, eight others 1/10; test [RED]: 5 x 1/5
    train, test = [RED, CUBE], [RED]
    d_c = 1 - (0.2 + 4 * 0.1**0.1 * 0.2**0.9)
    d_c_reversed = 1 - (0.2 + 4 * 0.2**0.1 * 0.1**0.9)
    d2 = {"weighting": "uniform", "compound_kind": "depth2"}  # the former compounds, by hand
    assert compound_divergence(train, test, **d2) == pytest.approx(d_c)
    assert compound_divergence(test, train, **d2) == pytest.approx(d_c_reversed)
    assert d_c == pytest.approx(0.0536, abs=1e-4) and d_c_reversed == pytest.approx(
        0.3713, abs=1e-4
    )
    # atoms: train exists=, =, x at 2/10, color?, red, shape?, cube at 1/10; test 5 x 1/5
    d_a = 1 - (3 * 0.2 + 2 * math.sqrt(0.1 * 0.2))
    assert atom_divergence(train, test, weighting="uniform") == pytest.approx(d_a)
    assert atom_divergence(test, train, weighting="uniform") == pytest.approx(d_a)  # symmetric


def test_length_weighting_follows_episode_sampling():
    concepts = [RED, SET_CUBE]  # lengths 7 and 6, disjoint atoms (5 each)
    uniform = atom_distribution(concepts, weighting="uniform")
    assert uniform == pytest.approx(dict.fromkeys(uniform, 0.1))
    w_red, w_cube = math.exp(-0.2 * 7), math.exp(-0.2 * 6)
    length = atom_distribution(concepts)  # "length" is the default
    assert length["red"] == pytest.approx(w_red / (5 * (w_red + w_cube)))
    assert length["cube"] == pytest.approx(w_cube / (5 * (w_red + w_cube)))
    assert length["cube"] > uniform["cube"] > length["red"]
    train, test = [RED, SET_CUBE], [RED]
    assert compound_divergence(train, test) != pytest.approx(
        compound_divergence(train, test, weighting="uniform")
    )
    # equal lengths: the weighting cannot matter
    for kind in ("dbca", "depth2"):
        assert compound_distribution([RED, CUBE], compound_kind=kind) == pytest.approx(
            compound_distribution([RED, CUBE], weighting="uniform", compound_kind=kind)
        )


def test_chernoff_coefficient():
    p, q = {"a": 0.5, "b": 0.5}, {"b": 0.25, "c": 0.75}
    assert chernoff_coefficient(p, q, alpha=0.1) == pytest.approx(0.5**0.1 * 0.25**0.9)
    assert chernoff_coefficient(p, p, alpha=0.3) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="alpha"):
        chernoff_coefficient(p, q, alpha=1.0)


@pytest.mark.parametrize("weighting", ["length", "uniform"])
@pytest.mark.parametrize("kind", ["depth2", "dbca"])
def test_index_matches_reference_functions(sampled, weighting, kind):
    rng = np.random.default_rng(0)
    train = rng.choice(len(sampled), 250, replace=False)
    test = np.setdiff1d(np.arange(len(sampled)), train)[:100]
    train_c, test_c = [sampled[i] for i in train], [sampled[i] for i in test]
    # DBCA weights are counted over the index's concepts: index exactly train + test
    index = DivergenceIndex(train_c + test_c, compound_kind=kind)
    train, test = np.arange(250), np.arange(250, 350)
    opts = {"weighting": weighting, "compound_kind": kind}
    f_a, f_c = index.distributions(train, weighting=weighting)
    assert f_a == pytest.approx(atom_distribution(train_c, weighting=weighting))
    if kind == "depth2":  # a distribution alone counts dbca weights over its own concepts
        assert f_c == pytest.approx(compound_distribution(train_c, **opts))
    d = index.divergences(train, test, weighting=weighting)
    assert d.atom == pytest.approx(atom_divergence(train_c, test_c, weighting=weighting))
    assert d.compound == pytest.approx(compound_divergence(train_c, test_c, **opts))
    assert 0 < d.atom < d.compound < 1


def test_index_counts_repeats_and_accepts_concepts():
    index = DivergenceIndex([parse(RED), CUBE, RED])
    assert len(index) == 3 and index.num_atoms == 7
    f_a, _ = index.distributions([0, 0, 1], weighting="uniform")
    assert f_a == pytest.approx(atom_distribution([RED, RED, CUBE], weighting="uniform"))
    assert index.divergences([0], [2]).compound == pytest.approx(0.0, abs=1e-12)


def test_random_baseline_is_seeded_and_has_the_split_sizes(sampled):
    index = DivergenceIndex(sampled)
    train, test = np.arange(0, 300), np.arange(300, 400)
    a = index.random_baseline(train, test, seed=1)
    assert a == index.random_baseline(train, test, seed=1)
    assert a != index.random_baseline(train, test, seed=2)
    perm = derive_rng(1, "divergence_baseline").permutation(np.concatenate([train, test]))
    assert a == index.divergences(perm[:300], perm[300:400])
    pool = np.arange(len(sampled))
    b = index.random_baseline(train[:50], test[:50], seed=1, pool=pool)
    perm = derive_rng(1, "divergence_baseline").permutation(pool)
    assert b == index.divergences(perm[:50], perm[50:100])
    with pytest.raises(ValueError, match="cannot hold"):
        index.random_baseline(train, test, seed=1, pool=np.arange(10))


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="weighting"):
        atom_divergence([RED], [RED], weighting="pcfg")
    with pytest.raises(ValueError, match="empty"):
        compound_divergence([], [RED])
    with pytest.raises(ConceptError):
        atoms("x color? blurple = lambda S. exists=")
    with pytest.raises(TypeError, match="concept string"):
        atoms(3)
    index = DivergenceIndex([RED, CUBE])
    with pytest.raises(ValueError, match="outside"):
        index.divergences([0], [2])
    with pytest.raises(ValueError, match="non-empty"):
        index.divergences([], [1])
    with pytest.raises(ValueError, match="integer"):
        index.divergences([0.5], [1])
    with pytest.raises(ValueError, match="at least one"):
        DivergenceIndex([])


def test_chernoff_on_two_toy_distributions():
    keys = "abcd"
    p = dict(zip(keys, [0.001, 0.001, 0.998, 0.0], strict=True))
    q = dict(zip(keys, [0.4, 0.4, 0.0, 0.2], strict=True))
    assert chernoff_coefficient(p, q, alpha=0.1) == pytest.approx(0.44, abs=0.005)
    assert chernoff_coefficient(p, q, alpha=0.5) == pytest.approx(0.04, abs=1e-9)


def test_dbca_and_depth2_compounds_differ_and_both_vanish_on_equal_sets(sampled):
    for kind in ("dbca", "depth2"):
        index = DivergenceIndex(sampled, compound_kind=kind)
        idx = np.arange(len(sampled))
        assert index.divergences(idx, idx).compound == pytest.approx(0.0, abs=1e-12)
    dbca = DivergenceIndex(sampled)
    depth2 = DivergenceIndex(sampled, compound_kind="depth2")
    assert dbca.compound_kind == "dbca" and dbca.num_compounds > depth2.num_compounds
    with pytest.raises(ValueError, match="compound_kind"):
        DivergenceIndex(sampled, compound_kind="depth3")


def test_split_divergences_of_a_bank_split(tiny_bank):
    from curi.divergence import bank_index, split_divergences
    from curi.splits import make_split

    split = make_split(tiny_bank, "binding_color")
    d = split_divergences(tiny_bank, split)
    assert set(d) == {"d_atom", "d_compound", "d_atom_random", "d_compound_random"}
    direct = bank_index(tiny_bank).divergences(split.train, split.test)
    assert d["d_atom"] == direct.atom and d["d_compound"] == direct.compound
    assert d["d_atom"] > 5 * d["d_atom_random"]  # binding: test colours absent from train
    same = make_split(tiny_bank, "instance_iid")
    assert split_divergences(tiny_bank, same)["d_compound"] == pytest.approx(0.0, abs=1e-12)


def test_repeated_concepts_share_one_set_of_compound_weights():
    repeated = DivergenceIndex([RED, CUBE, RED, CUBE])
    once = DivergenceIndex([RED, CUBE])
    assert repeated.distributions([2, 3]) == once.distributions([0, 1])
    assert repeated.distributions([0])[1] == repeated.distributions([2])[1]
    assert repeated.entries("compounds")[0].tolist().count(2) == len(once.distributions([0])[1])

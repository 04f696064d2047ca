"""Split rules on hand-made concept lists, configs from YAML and Python, and the checks."""

from dataclasses import dataclass

import numpy as np
import pytest

from curi import SplitError, parse
from curi.splits import PAPER_SPLITS, SplitSpec, list_splits, make_split


@dataclass
class FakeBank:
    concepts: list
    groups: np.ndarray

    def __post_init__(self):
        self.lengths = np.array([len(parse(c)) for c in self.concepts])

    def __len__(self):
        return len(self.concepts)


C = [
    "x color? purple = lambda S. exists=",  # 0 held-out colour only
    "x color? red = lambda S. exists=",  # 1 held-in colour
    "x color? cyan = x color? red = or lambda S. exists=",  # 2 both: dropped by binding
    "x shape? cube = lambda S. exists=",  # 3 no colour at all
    "x color? green = x material? metal = and lambda S. exists=",  # 4 intrinsic pair
    "S color? red count= 3 = lambda S.",  # 5 counting pair (3, red)
    "x locationX? 7 = x color? gray = and lambda S. exists=",  # 6 extrinsic pair (7, gray)
    "x color? gray = S locationX? 3 any and lambda S. exists=",  # 7 no held-out pair
    "x color? green = x shape? cube = or lambda S. exists=",  # 8 boolean (green, or)
    "S color? red count= 3 > lambda S.",  # 9 counting pair again
]
BANK = FakeBank(C, np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 5]))  # 5 and 9: synonyms


def test_all_nine_paper_splits_have_configs():
    assert set(PAPER_SPLITS) <= set(list_splits())


def test_binding_rule():
    s = make_split(BANK, "binding_color")
    assert s.test.tolist() == [0]
    assert 2 in s.dropped and 1 in s.train and 3 in s.train
    assert s.val.tolist() == s.test.tolist()  # paper default: val = test concepts


def test_pair_rules():
    assert make_split(BANK, "intrinsic").test.tolist() == [4]
    assert make_split(BANK, "counting").test.tolist() == [5, 9]
    assert make_split(BANK, "extrinsic").test.tolist() == [6]
    # (red, or) in 2, (green, and) in 4, (green, or) in 8
    assert make_split(BANK, "boolean").test.tolist() == [2, 4, 8]
    # the condition token is required: (3, red) without count= is not a counting test concept
    assert 7 in make_split(BANK, "counting").train


def test_length_and_instance_rules():
    s = make_split(BANK, "complexity")
    assert all(BANK.lengths[s.train] < 10) and all(BANK.lengths[s.test] >= 10)
    s = make_split(BANK, "instance_iid")
    assert s.train.tolist() == s.test.tolist() == list(range(len(C)))


def test_concept_iid_keeps_synonym_groups_together(tiny_bank):
    s = make_split(tiny_bank, "concept_iid")
    g = tiny_bank.groups
    assert not set(g[s.train]) & set(g[s.test])
    assert not set(g[s.val]) & set(g[s.test])
    assert len(s.train) + len(s.val) + len(s.test) == len(tiny_bank)
    assert 0.7 < len(s.train) / len(tiny_bank) < 0.9


def test_user_split_from_config_and_predicate():
    spec = {"name": "mine", "rule": "pairs", "pairs": [["red", "count="]], "val": "same_as_test"}
    assert make_split(BANK, spec).test.tolist() == [5, 9]
    s = make_split(BANK, lambda c: c.quantifier is None)
    assert s.test.tolist() == [5, 9] and s.name == "<lambda>"
    s = make_split(BANK, {"name": "short", "rule": "length", "threshold": 8})
    assert s.test.tolist() == [i for i in range(len(C)) if BANK.lengths[i] >= 8]


def test_disjoint_val_takes_whole_groups(tiny_bank):
    spec = SplitSpec(
        name="bc",
        rule="binding",
        held_out=("purple", "cyan", "yellow"),
        held_in=("gray", "red", "blue", "green", "brown"),
        val="disjoint",
    )
    s = make_split(tiny_bank, spec)
    paper = make_split(tiny_bank, "binding_color")
    assert sorted(np.r_[s.val, s.test].tolist()) == paper.test.tolist()
    assert not set(s.val) & set(s.test) and len(s.val) > 0
    assert not set(tiny_bank.groups[s.val]) & set(tiny_bank.groups[s.test])


def test_paper_splits_on_a_real_bank_are_disjoint(tiny_bank):
    for name in PAPER_SPLITS:
        s = make_split(tiny_bank, name)
        if name != "instance_iid":
            assert not set(s.train) & set(s.test), name
            assert len(s.test) > 0, name


@pytest.mark.parametrize(
    "cfg, match",
    [
        ("nope", "unknown split 'nope'"),
        ({"name": "x", "rule": "magic"}, "unknown rule 'magic'"),
        ({"name": "x", "rule": "pairs"}, "needs a list of pairs"),
        ({"name": "x", "rule": "binding", "held_out": ["red"], "val": "sometimes"}, "val must"),
        ({"name": "x", "rule": "length", "treshold": 3}, "unknown split option"),
        ({"name": "x", "rule": "random_groups", "fractions": [0.5, 0.5, 0.5]}, "sum"),
    ],
)
def test_bad_split_configs_are_clear_errors(cfg, match):
    with pytest.raises(SplitError, match=match):
        make_split(BANK, cfg)

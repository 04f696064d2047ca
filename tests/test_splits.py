"""Split rules on hand-made concept lists, configs from YAML and Python, and the checks."""

import json
import os
from dataclasses import dataclass

import numpy as np
import pytest

from curi import SplitError, parse
from curi.splits import (
    PAPER_SPLITS,
    SPLIT_RULES,
    Split,
    SplitSpec,
    finish,
    list_split_rules,
    list_splits,
    make_split,
    register_split_rule,
    save_split,
)


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
        # NaN passed every check and failed in numpy with a traceback
        (
            {"name": "x", "rule": "random_groups", "fractions": [float("nan"), 1, 1]},
            r"fractions\[0\] must be a number in \[0, inf\], got nan",
        ),
        (
            {"name": "x", "rule": "random_groups", "fractions": [1.5, -0.5, 0]},
            r"fractions\[1\] must be a number in \[0, inf\], got -0.5",
        ),
        ({"name": "x", "rule": "mcd", "train": float("nan")}, "train must be a number in"),
        # an unknown token matched no concept: an empty test set and exit 0
        (
            {"name": "x", "rule": "binding", "held_out": ["notacolor"]},
            r"\['notacolor'\] in held_out",
        ),
        (
            {"name": "x", "rule": "binding", "held_out": ["red"], "held_in": ["bleu"]},
            r"unknown token\(s\) \['bleu'\] in held_in; valid tokens .*: gray, red, blue",
        ),
        ({"name": "x", "rule": "pairs", "pairs": [["red", "rubbr"]]}, r"\['rubbr'\] in pairs"),
        (
            {"name": "x", "rule": "pairs", "pairs": [[3, "red"]], "condition": ["count"]},
            r"\['count'\] in condition",
        ),
    ],
)
def test_bad_split_configs_are_clear_errors(cfg, match):
    with pytest.raises(SplitError, match=match):
        make_split(BANK, cfg)


# One minimal config per registered rule: a rule registered without an example fails below.
GENERATORS = ("mcd", "adversarial")
RULE_EXAMPLES = {
    "all": lambda tmp: {"rule": "all"},
    "random_groups": lambda tmp: {"rule": "random_groups", "fractions": [0.6, 0.2, 0.2]},
    "binding": lambda tmp: {"rule": "binding", "held_out": ["purple"], "held_in": ["red"]},
    "pairs": lambda tmp: {"rule": "pairs", "pairs": [["color?", "="]], "val": "disjoint"},
    "length": lambda tmp: {"rule": "length", "threshold": 8},
    "mcd": lambda tmp: {"rule": "mcd", "validation": 0.0, "refine": 0},
    "adversarial": lambda tmp: {
        "rule": "adversarial",
        "max_easiness": 1.01,
        "min_test": 1,
        "max_test_fraction": 1.0,
    },
    "file": lambda tmp: {
        "rule": "file",
        "path": str(save_split(make_split(BANK, "binding_color"), BANK, tmp / "bc.json")),
    },
}


def check_invariants(s: Split, bank) -> None:
    """What every split of every rule must satisfy."""
    n = len(bank)
    for part in ("train", "val", "test", "dropped"):
        a = getattr(s, part)
        assert a.ndim == 1 and np.issubdtype(a.dtype, np.integer), part
        assert np.all(np.diff(a) > 0), f"{part} is not sorted and unique"
        assert a.size == 0 or (a.min() >= 0 and a.max() < n), part
    used = np.unique(np.r_[s.train, s.val, s.test])
    assert not set(s.dropped) & set(used), "a dropped concept is also used"
    assert sorted(np.r_[used, s.dropped].tolist()) == list(range(n)), "a concept is lost"
    if not np.array_equal(s.train, s.test):  # only Instance IID shares train and test
        assert not set(s.train) & set(s.test)
    assert np.array_equal(s.val, s.test) or not set(s.val) & set(s.test)


def test_every_registered_rule_has_an_example():
    missing = set(list_split_rules()) - set(RULE_EXAMPLES)
    assert not missing, f"add a minimal config to RULE_EXAMPLES for {sorted(missing)}"


@pytest.mark.parametrize("rule", list_split_rules())
def test_every_rule_makes_a_valid_split(rule, tmp_path, request):
    # the generators search for a split with statistics a 10-concept bank cannot have
    bank = request.getfixturevalue("tiny_bank") if rule in GENERATORS else BANK
    cfg = {"name": f"example_{rule}", **RULE_EXAMPLES[rule](tmp_path)}
    s = make_split(bank, cfg)
    assert s.name == cfg["name"]
    check_invariants(s, bank)
    again = make_split(bank, cfg)  # same config, same split
    for part in ("train", "val", "test", "dropped"):
        assert np.array_equal(getattr(s, part), getattr(again, part)), part


def test_paper_splits_keep_the_invariants(tiny_bank):
    for name in PAPER_SPLITS:
        check_invariants(make_split(tiny_bank, name), tiny_bank)


def _same(a: Split, b: Split) -> bool:
    return all(np.array_equal(getattr(a, p), getattr(b, p)) for p in ("train", "val", "test"))


NO_VAL = {"name": "no_val", "rule": "random_groups", "fractions": [0.5, 0, 0.5], "seed": 1}


@pytest.mark.parametrize("cfg", ["binding_color", "instance_iid", NO_VAL])
def test_saved_split_round_trip(cfg, tmp_path):
    s = make_split(BANK, cfg)
    name = s.name
    path = save_split(s, BANK, tmp_path / "sub" / "s.json")
    assert [p.name for p in path.parent.iterdir()] == ["s.json"]  # no temporary file left
    doc = json.loads(path.read_text())
    assert doc["bank"]["num_concepts"] == len(C) and len(doc["bank"]["concepts_sha256"]) == 64
    for loaded in (make_split(BANK, path), make_split(BANK, str(path))):
        assert loaded.name == name and _same(loaded, s)
        assert np.array_equal(loaded.dropped, s.dropped)
    named = make_split(BANK, {"name": "again", "rule": "file", "path": str(path)})
    assert named.name == "again" and _same(named, s)


def test_saved_split_refuses_another_bank(tmp_path):
    path = save_split(make_split(BANK, "binding_color"), BANK, tmp_path / "s.json")
    for other in (FakeBank(C[:-1], BANK.groups[:-1]), FakeBank(C[::-1], BANK.groups[::-1])):
        with pytest.raises(SplitError, match="saved for another bank"):
            make_split(other, path)


def test_saved_split_errors_are_clear(tmp_path):
    with pytest.raises(SplitError, match="not found"):
        make_split(BANK, tmp_path / "missing.json")
    with pytest.raises(SplitError, match="not found"):
        make_split(BANK, {"name": "x", "rule": "file", "path": str(tmp_path / "missing.json")})
    with pytest.raises(SplitError, match="needs the path"):
        make_split(BANK, {"name": "x", "rule": "file"})
    with pytest.raises(SplitError, match="unknown split 'missing.json'"):
        make_split(BANK, "missing.json")  # a string that names no preset and no file
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SplitError, match="not readable JSON"):
        make_split(BANK, bad)
    path = save_split(make_split(BANK, "binding_color"), BANK, tmp_path / "s.json")
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "test": [0, len(C)]}))
    with pytest.raises(SplitError, match="outside"):
        make_split(BANK, path)
    path.write_text(json.dumps({**doc, "test": doc["train"][:1]}))
    with pytest.raises(SplitError, match="both train and test"):
        make_split(BANK, path)


def test_a_split_name_too_long_for_a_file_name_is_refused(tmp_path):
    """A split's name becomes part of file names (lm tasks, saved adversarial splits): 300
    characters ended in `OSError: File name too long` after the work."""
    long = "s" * 201
    with pytest.raises(SplitError, match=r"split name 'sss.*'... has 201 bytes; use at most 200"):
        make_split(BANK, {"name": long, "rule": "binding", "held_out": ["purple"]})
    with pytest.raises(SplitError, match="has 202 bytes"):  # bytes of UTF-8, not characters
        make_split(BANK, {"name": "é" * 101, "rule": "binding", "held_out": ["purple"]})
    path = save_split(make_split(BANK, "binding_color"), BANK, tmp_path / "s.json")
    path.write_text(json.dumps({**json.loads(path.read_text()), "name": long}))
    with pytest.raises(SplitError, match=r"split file '.*s.json': split name .* has 201 bytes"):
        make_split(BANK, path)
    assert make_split(BANK, {"name": "s" * 200, "rule": "binding", "held_out": ["purple"]})


@pytest.mark.parametrize("name", ["../split/binding_color", "split/binding_color", "x.yaml"])
def test_a_preset_name_is_never_a_path(name):
    with pytest.raises(SplitError, match="unknown split"):
        make_split(BANK, name)


@pytest.fixture
def scratch_rules(monkeypatch):
    """Rules registered in a test vanish after it (the registry is process-wide)."""
    monkeypatch.setattr(SPLIT_RULES, "_entries", dict(SPLIT_RULES._entries))


def test_a_registered_rule_is_usable_by_name(scratch_rules):
    @dataclass(frozen=True)
    class EveryOtherOptions:
        offset: int = 0

    @register_split_rule("every_other", options=EveryOtherOptions)
    def every_other(spec, bank):
        test = (np.arange(len(bank)) + spec.options.offset) % 2 == 0
        return finish(spec.name, bank, ~test, test, val=spec.val, seed=spec.seed)

    assert "every_other" in list_split_rules()
    s = make_split(BANK, {"name": "odd", "rule": "every_other", "offset": 1})
    assert s.test.tolist() == [1, 3, 5, 7, 9] and s.name == "odd"
    check_invariants(s, BANK)
    assert SplitSpec(name="odd", rule="every_other", offset=1).offset == 1
    with pytest.raises(SplitError, match="unknown split option"):
        make_split(BANK, {"name": "odd", "rule": "every_other", "ofset": 1})


def test_rule_options_belong_to_their_rule():
    spec = SplitSpec.from_mapping({"name": "t", "rule": "threshold", "threshold": 8})
    assert spec.rule == "length" and spec.threshold == 8  # threshold: another name of length
    length = {"name": "t", "rule": "length", "threshold": 8}
    assert _same(make_split(BANK, spec), make_split(BANK, length))
    # a key of another rule is ignored, as the flat spec of earlier versions accepted it
    plain = make_split(BANK, {"name": "b", "rule": "binding", "held_out": ["purple"]})
    extra = make_split(
        BANK, {"name": "b", "rule": "binding", "held_out": ["purple"], "threshold": 3}
    )
    assert _same(plain, extra)
    with pytest.raises(SplitError, match="needs a number as threshold"):
        make_split(BANK, {"name": "x", "rule": "length", "threshold": "long"})


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: {**d, "test": [10**30]}, r"test\[0\] = 10{30}.* outside"),
        (lambda d: {**d, "test": [-1]}, r"test\[0\] = -1 is outside"),
        (lambda d: {**d, "train": [i + 0.5 for i in d["train"]]}, r"train\[0\] is float 1.5"),
        (lambda d: {**d, "train": [float(i) for i in d["train"]]}, r"train\[0\] is float 1.0"),
        (lambda d: {**d, "train": [[i] for i in d["train"]]}, r"train\[0\] is list \[1\]"),
        (lambda d: {**d, "test": [True]}, r"test\[0\] is bool True"),
        (lambda d: {**d, "test": {"0": 0}}, "test is dict, not a list"),
    ],
)
def test_saved_split_refuses_bad_indices(edit, match, tmp_path):
    # each of these was read as if it were the original split (floats truncated, nested
    # lists flattened, True taken as 1) or ended in an OverflowError traceback
    path = save_split(make_split(BANK, "binding_color"), BANK, tmp_path / "s.json")
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    with pytest.raises(SplitError, match=f"split file '{path}': {match}"):
        make_split(BANK, path)


def test_saved_split_refuses_deep_nesting_and_special_files(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)  # json.loads: RecursionError
    with pytest.raises(SplitError, match="is not readable JSON: nested too deeply"):
        make_split(BANK, deep)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # reading it would block until a writer comes: forever
    for spec in (fifo, str(fifo), {"name": "x", "rule": "file", "path": str(fifo)}):
        with pytest.raises(SplitError, match="is a FIFO, not a regular file"):
            make_split(BANK, spec)
    with pytest.raises(SplitError, match="is a folder"):
        make_split(BANK, {"name": "x", "rule": "file", "path": str(tmp_path)})


@pytest.mark.parametrize(
    "cfg, match",
    [
        # each gave an empty subset with exit 0 (only a log warning for an empty test set)
        (
            {"name": "c", "rule": "length", "threshold": -1},
            r"split 'c' has an empty train set on this bank \(train 0, val 10, test 10 concepts"
            r" of 10\); choose a threshold in \d+\.\.\d+",
        ),
        ({"name": "c", "rule": "length", "threshold": 100}, "empty val and test set"),
        ("concept_iid", r"empty val and test set .* raise fractions\[1\] \(this bank has 9"),
        (
            {"name": "b", "rule": "binding", "held_out": ["S."]},  # in every concept
            r"empty train set .* change the rule's held_out and held_in \(rule binding\)",
        ),
        (lambda c: False, "empty val and test set .* the predicate marks no concept"),
        (
            {
                "name": "d",
                "rule": "pairs",
                "pairs": [["x", "="]],
                "val": "disjoint",
                "val_fraction": 1,
            },
            "empty test set .* lower val_fraction",
        ),
    ],
)
def test_an_empty_subset_is_refused(cfg, match):
    with pytest.raises(SplitError, match=match):
        make_split(BANK, cfg)


def test_an_empty_subset_asked_for_is_kept(tmp_path):
    s = make_split(BANK, NO_VAL)  # fractions[1] = 0
    assert len(s.val) == 0 and len(s.train) and len(s.test)
    assert _same(
        make_split(BANK, save_split(s, BANK, tmp_path / "s.json")), s
    )  # read back as saved
    spec = {"name": "d", "rule": "pairs", "pairs": [["color?", "="]], "val": "disjoint"}
    s = make_split(BANK, {**spec, "val_fraction": 0})
    assert len(s.val) == 0 and len(s.test) == 8
    path = save_split(make_split(BANK, "binding_color"), BANK, tmp_path / "bc.json")
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "test": [], "val": [], "dropped": [0, 2]}))
    with pytest.raises(SplitError, match="empty test set .* the split file holds no concept"):
        make_split(BANK, path)


def test_a_bad_split_file_or_inline_rule_is_refused_without_the_bank(tiny_bank, tmp_path):
    """What needs no bank is checked before a command's work (`check_split_file`,
    `curi.validate.splits`): `curi gap split=<a garbage file>` and an inline rule of an
    unknown name were refused only once the run folder was made, leaving it behind
    (issue 44's sweep of bad inputs)."""
    from curi import validate
    from curi.splits.saved import check_split_file

    good = save_split(make_split(tiny_bank, "concept_iid"), tiny_bank, tmp_path / "s.json")
    assert check_split_file(good)["name"] == "concept_iid"
    text = good.read_text()
    bad = {
        "garbage": ("{not json", "not readable JSON"),
        "floats": (text.replace('"train": [', '"train": [1.5, ', 1), r"train\[0\] is float"),
        "negative": (text.replace('"test": [', '"test": [-1, ', 1), r"test\[0\] = -1 is outside"),
        "version": (text.replace('"version": 1', '"version": 7', 1), "format version 7"),
        "long name": (text.replace('"concept_iid"', '"' + "n" * 300 + '"', 1), "300 bytes"),
    }
    for what, (content, says) in bad.items():
        path = tmp_path / f"{what}.json"
        path.write_text(content)
        with pytest.raises(SplitError, match=says):
            check_split_file(path)
        for value in (str(path), {"name": "f", "rule": "file", "path": str(path)}):
            with pytest.raises(SplitError, match=says):
                validate.splits([value])
    with pytest.raises(SplitError, match="unknown rule 'nosuch'"):
        validate.splits([{"name": "x", "rule": "nosuch"}])
    validate.splits([str(good), {"name": "f", "rule": "file", "path": str(good)}, "boolean"])


def test_a_split_file_of_another_bank_is_refused_from_the_banks_concepts(tiny_bank, tmp_path):
    """Given the concepts of the bank that is there (`curi.bank.bank_concepts`: its
    concepts.txt, not the bank), a split file saved for another bank or naming a concept
    outside it is refused as `load_split` refuses it: `curi gap split=<such a file>` was
    refused only once the run folder was made (the sweep of bad inputs)."""
    from curi import validate
    from curi.bank import BankConfig, bank_concepts
    from curi.splits.saved import check_split_file

    cfg = BankConfig.from_mapping(tiny_bank.config)
    concepts = bank_concepts(cfg, tiny_bank.path.parent)
    assert concepts == tiny_bank.concepts
    assert bank_concepts(cfg, tiny_bank.path.parent, force=True) is None  # to be rebuilt
    assert bank_concepts(cfg, tmp_path) is None  # to be built there
    good = save_split(make_split(tiny_bank, "concept_iid"), tiny_bank, tmp_path / "s.json")
    assert check_split_file(good, concepts)["name"] == "concept_iid"
    text = good.read_text()
    bad = {
        "outside": text.replace('"train": [', '"train": [99999, ', 1),
        "other bank": text.replace('"num_concepts": ', '"x": ', 1),
        "reordered": text.replace('"concepts_sha256": "', '"concepts_sha256": "0', 1),
    }
    for what, content in bad.items():
        path = tmp_path / f"{what}.json"
        path.write_text(content)
        check_split_file(path)  # without the bank: nothing to see
        with pytest.raises(SplitError) as late:
            make_split(tiny_bank, path)
        with pytest.raises(SplitError) as early:
            check_split_file(path, concepts)
        assert str(early.value) == str(late.value), what
        for value in (str(path), {"name": "f", "rule": "file", "path": str(path)}):
            with pytest.raises(SplitError) as early:
                validate.splits([value], concepts=concepts)
            assert str(early.value) == str(late.value), what

"""The ``adversarial`` split rule (curi.splits.adversarial): validity, what it holds out, the
Half and NoSib variants, files for every generated split, determinism and bad options."""

from __future__ import annotations

import numpy as np
import pytest

from curi import SplitError, make_split
from curi.splits import list_split_rules
from curi.splits.adversarial import AdversarialOptions, adversarial_splits
from curi.structures import StructureIndex

LOOSE = {"max_easiness": 1.01, "min_test": 1}


def _symbols(bank, idx):
    return set().union(*(set(bank.concepts[i].split()) for i in idx))


def test_registered():
    assert "adversarial" in list_split_rules()


@pytest.mark.parametrize("variant", ["all", "nosib"])
def test_generated_splits_are_valid_and_hold_out_similar_structures(tiny_bank, variant):
    opt = AdversarialOptions(variant=variant, max_test_fraction=0.2, **LOOSE)
    splits = adversarial_splits(tiny_bank, options=opt)
    assert splits, "the tiny bank gives some adversarial split"
    shapes = {"pc"} if variant == "nosib" else {"pc", "sib"}
    index = StructureIndex(tiny_bank.concepts, n=2, shapes=shapes)
    names = {f"{a}({' '.join(b)})": i for i, (a, b) in enumerate(index.structures)}
    seen_tests = set()
    for sp in splits:
        assert len(sp.test) <= 0.2 * len(tiny_bank)
        assert _symbols(tiny_bank, sp.test) <= _symbols(tiny_bank, sp.train)
        held = {names[h] for h in sp.info["held_out"]}
        has = [bool(set(index.concept_structures[i].tolist()) & held) for i in range(len(index))]
        assert all(has[i] for i in sp.test)
        assert not any(has[i] for i in sp.train)
        assert not set(np.asarray(tiny_bank.groups)[sp.train]) & set(
            np.asarray(tiny_bank.groups)[sp.test]
        )
        key = tuple(sp.test.tolist())
        assert key not in seen_tests  # duplicates dropped
        seen_tests.add(key)
    e = [sp.info["mean_easiness"] for sp in splits]
    assert e == sorted(e)  # hardest first


def test_threshold_filter_and_half(tiny_bank):
    all_ = adversarial_splits(tiny_bank, options=AdversarialOptions(**LOOSE))
    strict = adversarial_splits(tiny_bank, options=AdversarialOptions(max_easiness=0.3, min_test=1))
    assert len(strict) <= len(all_)
    assert all(sp.info["mean_easiness"] < 0.3 for sp in strict)
    half = adversarial_splits(
        tiny_bank, options=AdversarialOptions(variant="nosib", half=True, top=3, min_test=1)
    )
    assert len(half) <= 3 and all(sp.info["variant"] == "nosib-half" for sp in half)


def test_rule_writes_every_split_and_is_deterministic(tiny_bank, tmp_path):
    cfg = {"name": "adv", "rule": "adversarial", "save_dir": str(tmp_path), **LOOSE}
    a = make_split(tiny_bank, cfg)
    b = make_split(tiny_bank, cfg)
    assert np.array_equal(a.test, b.test) and np.array_equal(a.train, b.train)
    files = sorted(tmp_path.glob("adv-*.json"))
    assert len(files) == a.info["kept"]
    again = make_split(tiny_bank, {"name": "again", "rule": "file", "path": str(files[0])})
    assert np.array_equal(again.test, a.test)
    second = make_split(tiny_bank, {**cfg, "pick": 1, "save_dir": None})
    assert second.info["mean_easiness"] >= a.info["mean_easiness"]


def test_a_name_leading_out_of_save_dir_is_refused_before_the_search(tiny_bank, tmp_path):
    cfg = {"name": "../adv", "rule": "adversarial", "save_dir": str(tmp_path / "d"), **LOOSE}
    with pytest.raises(SplitError, match=r"save_dir: split name '../adv-0.json' resolves to"):
        make_split(tiny_bank, cfg)
    assert list(tmp_path.iterdir()) == []


def test_bad_options(tiny_bank):
    with pytest.raises(SplitError, match="variant"):
        make_split(tiny_bank, {"name": "adv", "rule": "adversarial", "variant": "nopc"})
    with pytest.raises(SplitError, match="max_test_fraction"):
        make_split(tiny_bank, {"name": "adv", "rule": "adversarial", "max_test_fraction": 0})
    with pytest.raises(SplitError, match="no adversarial split kept"):
        make_split(tiny_bank, {"name": "adv", "rule": "adversarial", "max_easiness": 0.0})
    with pytest.raises(SplitError, match="pick"):
        make_split(tiny_bank, {"name": "adv", "rule": "adversarial", "pick": 10**6, **LOOSE})


def test_by_extensions_holds_out_the_hardest_groups(tiny_bank):
    from curi.extension_predictors import ExtensionIndex, leave_group_out
    from curi.splits.adversarial import extension_split

    opt = AdversarialOptions(by="extensions", max_test_fraction=0.2, min_test=1)
    index = ExtensionIndex.from_bank(tiny_bank, sample_scenes=512)
    sp = extension_split(tiny_bank, name="advx", options=opt, index=index)
    easy = leave_group_out(index, "ext-neg", draws=opt.draws)
    groups = np.asarray(tiny_bank.groups)
    assert 0 < len(sp.test) <= 0.2 * len(tiny_bank) and sp.info["predictor"] == "ext-neg"
    assert not set(groups[sp.train]) & set(groups[sp.test])  # no synonym on both sides
    assert _symbols(tiny_bank, sp.test) <= _symbols(tiny_bank, sp.train)
    # plain: hardest groups first, skipping a group when the share or a symbol forbids it
    order = sorted(set(groups.tolist()), key=lambda g: (easy[groups == g][0], g))
    test, cap = set(), int(0.2 * len(tiny_bank))
    for g in order:
        members = np.flatnonzero(groups == g).tolist()
        if len(test) + len(members) > cap:
            continue
        train = [c for c in range(len(tiny_bank)) if c not in test and c not in members]
        if not _symbols(tiny_bank, members) <= _symbols(tiny_bank, train):
            continue
        test.update(members)
    assert sorted(test) == sp.test.tolist()
    assert easy[sp.test].mean() < easy[sp.train].mean()
    again = make_split(tiny_bank, {"name": "advx", "rule": "adversarial", "by": "extensions"})
    assert again.info["by"] == "extensions" and len(again.test) > 0


def test_by_extensions_bad_options(tiny_bank):
    rule = {"name": "adv", "rule": "adversarial"}
    with pytest.raises(SplitError, match="by must be one of structures, extensions"):
        make_split(tiny_bank, {**rule, "by": "nope"})
    with pytest.raises(SplitError, match="predictor must be one of ext-neg"):
        make_split(tiny_bank, {**rule, "by": "extensions", "predictor": "ext-nn"})
    with pytest.raises(SplitError, match="draws must be an integer >= 1"):
        make_split(tiny_bank, {**rule, "by": "extensions", "draws": 0})
    with pytest.raises(SplitError, match="only 0 concepts could be held out"):
        make_split(tiny_bank, {**rule, "by": "extensions", "max_test_fraction": 0.0001})

"""Tests of the ``mcd`` split rule: synonym groups never straddle sides, every test atom is in
train, D_A stays under max_da, D_C beats a random split, targets are met, the same seed gives
the same split, and impossible requests end with one message."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from curi.divergence import DivergenceIndex, atoms
from curi.errors import SplitError
from curi.splits import load_split, make_split, save_split

FAST = {"name": "m", "rule": "mcd", "progress": False, "restarts": 1}


@pytest.fixture(scope="module")
def two_way(tiny_bank):
    return make_split(tiny_bank, {**FAST, "validation": 0.0})


@pytest.fixture(scope="module")
def three_way(tiny_bank):
    return make_split(tiny_bank, {**FAST, "seed": 3})


def groups_of(bank, idx) -> set[int]:
    return set(np.asarray(bank.groups)[idx].tolist())


@pytest.mark.parametrize("which", ["two_way", "three_way"])
def test_groups_never_straddle_and_sizes_follow_the_shares(tiny_bank, which, request):
    s = request.getfixturevalue(which)
    tr, va, te = (groups_of(tiny_bank, x) for x in (s.train, s.val, s.test))
    assert not tr & te and not tr & va
    n = len(np.unique(tiny_bank.groups))
    assert len(tr) == round(0.4 * n) and len(te) == round(0.1 * n)
    if which == "three_way":
        assert not va & te and len(va) == round(0.1 * n)
    else:
        assert np.array_equal(s.val, s.test)
    used = np.concatenate([s.train, s.val, s.test, s.dropped])
    assert np.array_equal(np.unique(used), np.arange(len(tiny_bank)))


@pytest.mark.parametrize("which", ["two_way", "three_way"])
def test_every_test_atom_occurs_in_train(tiny_bank, which, request):
    s = request.getfixturevalue(which)
    in_train = Counter()
    for i in s.train:
        in_train.update(set(atoms(tiny_bank.concepts[i])))
    for i in np.concatenate([s.test, s.val]):
        assert all(in_train[a] >= 1 for a in atoms(tiny_bank.concepts[i]))
    assert s.info["test_atoms_absent_from_train"] == 0


def test_divergences_are_measured_and_beat_random(tiny_bank, two_way):
    info = two_way.info
    d = DivergenceIndex(tiny_bank.concepts).divergences(two_way.train, two_way.test)
    assert info["d_atom"] == pytest.approx(d.atom, abs=1e-4)
    assert info["d_compound"] == pytest.approx(d.compound, abs=1e-4)
    assert info["d_atom"] <= 0.02
    assert info["d_compound"] > 2 * info["d_compound_random"]
    assert info["groups"]["train"] == len(groups_of(tiny_bank, two_way.train))


def test_min_atom_count_is_honoured(tiny_bank):
    s = make_split(tiny_bank, {**FAST, "validation": 0.0, "min_atom_count": 3, "max_da": 0.05})
    in_train = Counter()
    for i in s.train:
        in_train.update(set(atoms(tiny_bank.concepts[i])))
    for i in s.test:
        assert all(in_train[a] >= 3 for a in atoms(tiny_bank.concepts[i]))


def test_same_seed_same_split(tiny_bank, two_way):
    again = make_split(tiny_bank, {**FAST, "validation": 0.0})
    assert all(np.array_equal(getattr(again, k), getattr(two_way, k)) for k in ("train", "test"))
    other = make_split(tiny_bank, {**FAST, "validation": 0.0, "seed": 1})
    assert not np.array_equal(other.test, two_way.test)


def test_restarts_keep_the_best_run(tiny_bank):
    single = make_split(tiny_bank, {**FAST, "validation": 0.0, "restarts": 1})
    best = make_split(tiny_bank, {**FAST, "validation": 0.0, "restarts": 3})
    assert best.info["restart"] in (0, 1, 2) and single.info["restart"] == 0
    assert len(best.info["objectives"]) == 3
    assert best.info["objectives"][0] == single.info["objectives"][0]  # run 0 is among them
    assert max(best.info["objectives"]) == best.info["objectives"][best.info["restart"]]
    assert best.info["d_atom"] <= 0.02 and best.info["test_atoms_absent_from_train"] == 0


@pytest.mark.parametrize("target", [None, 0.4])
def test_restarts_give_the_same_split_for_any_number_of_workers(tiny_bank, target):
    cfg = {**FAST, "seed": 2, "restarts": 3, "refine": 0.2, "target_dc": target}
    one = make_split(tiny_bank, {**cfg, "workers": 1})
    two = make_split(tiny_bank, {**cfg, "workers": 2})
    for part in ("train", "val", "test", "dropped"):
        assert np.array_equal(getattr(two, part), getattr(one, part)), part
    assert two.info["restart"] == one.info["restart"]
    assert two.info["objectives"] == one.info["objectives"]
    if target is not None:  # the first restart near enough the target ends the search
        objectives = one.info["objectives"]  # tolerance 0.05: near enough is within 0.025
        assert all(o < -0.025 for o in objectives[:-1])
        assert objectives[-1] >= -0.025 or len(objectives) == 3


def test_second_stage_keeps_d_compound_of_the_first(tiny_bank, three_way):
    """Three-way: val leaves train + val with test fixed; D_C(train, test) stays at least
    near that of the first stage (train + val against test), and val stays apart too."""
    info = three_way.info
    assert info["d_compound"] >= info["d_compound_stage1"] - 0.02
    assert info["d_compound_val"] > info["d_compound_random"]


def test_target_dc_is_met(tiny_bank, two_way):
    s = make_split(tiny_bank, {**FAST, "validation": 0.0, "target_dc": 0.4})
    assert abs(s.info["d_compound"] - 0.4) <= 0.05
    assert s.info["d_compound"] < two_way.info["d_compound"]


def test_impossible_requests_end_with_one_message(tiny_bank):
    with pytest.raises(SplitError, match="summing to at most 1"):
        make_split(tiny_bank, {**FAST, "train": 0.8, "test": 0.3})
    with pytest.raises(SplitError, match=r"reached D_C .* max_da"):
        make_split(tiny_bank, {**FAST, "validation": 0.0, "max_da": 0.0})
    with pytest.raises(SplitError, match=r"reached D_C .* target_dc 0.99"):
        make_split(tiny_bank, {**FAST, "validation": 0.0, "target_dc": 0.99, "tolerance": 0.001})
    with pytest.raises(SplitError, match="unknown split option"):
        make_split(tiny_bank, {**FAST, "trian": 0.4})
    with pytest.raises(SplitError, match="workers"):
        make_split(tiny_bank, {**FAST, "workers": -1})


def test_preset_and_saved_file_round_trip(tiny_bank, tmp_path):
    s = make_split(tiny_bank, "mcd")  # conf/split/mcd.yaml: the three-way defaults
    assert s.name == "mcd" and s.info["d_atom"] <= 0.02
    path = save_split(s, tiny_bank, tmp_path / "mcd.json")
    back = load_split(tiny_bank, path)
    assert all(np.array_equal(getattr(back, k), getattr(s, k)) for k in ("train", "val", "test"))


def test_depth2_compounds_are_an_option(tiny_bank):
    s = make_split(tiny_bank, {**FAST, "validation": 0.0, "compounds": "depth2"})
    d = DivergenceIndex(tiny_bank.concepts, compound_kind="depth2").divergences(s.train, s.test)
    assert s.info["compounds"] == "depth2"
    assert s.info["d_compound"] == pytest.approx(d.compound, abs=1e-4)


class RecordingBar:
    """Stands in for tqdm: records the count after every update, refresh and close."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.n, self.seen = total, desc, 0, []

    def update(self, k: int = 1) -> None:
        self.n += k
        self.seen.append(self.n)

    def refresh(self) -> None:
        self.seen.append(self.n)

    def close(self) -> None:
        self.seen.append(self.n)

    def set_postfix_str(self, *args, **kwargs) -> None:
        pass


def test_restarts_in_processes_show_their_growth(tiny_bank, monkeypatch):
    # the bar of restarts run in processes counted finished restarts only: with one per core
    # it stood at 0 for the whole growth (about 50 s on the default bank), then jumped to done
    import curi.splits.mcd as mcd

    bars = []

    def record(show, total, desc):
        bars.append(RecordingBar(total, desc))
        return bars[-1] if show else None

    monkeypatch.setattr(mcd, "_bar", record)
    monkeypatch.setattr(mcd, "POLL_SECONDS", 0.01)
    cfg = {**FAST, "progress": True, "validation": 0.0, "restarts": 2, "workers": 2, "refine": 0}
    make_split(tiny_bank, cfg)
    growth = bars[0]
    n = len(np.unique(tiny_bank.groups))
    groups = round(0.4 * n) + round(0.1 * n)  # the shares of FAST
    assert growth.total == 2 * groups  # the units grown by both restarts
    assert growth.seen[-1] == growth.total
    assert [n for n in growth.seen if 0 < n < groups]  # seen while the first restart ran
    monkeypatch.setattr(mcd, "POLL_SECONDS", 0.5)
    bars.clear()
    make_split(tiny_bank, {**cfg, "progress": False})
    assert all(not b.seen for b in bars)  # progress=False: nothing shown


def test_a_bad_compound_kind_or_weighting_is_one_split_option_error():
    from curi.errors import SplitOptionError
    from curi.splits.mcd_greedy import McdOptions

    with pytest.raises(SplitOptionError, match=r"mcd.compounds must be one of .*'depth2'"):
        McdOptions(compounds="depth3")
    with pytest.raises(SplitOptionError, match=r"mcd.weighting must be one of"):
        McdOptions(weighting="nosuch")

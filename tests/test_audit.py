"""The shortcut audit: its features against a plain per-record loop, its per-episode AUC against
the pooled one, the audit end to end on the tiny bank, its bad input, and the command."""

import json

import numpy as np
import pytest
from conftest import run_curi

from curi import ConfigError, make_split
from curi.oracles.audit import markdown, run_audit
from curi.oracles.audit_features import (
    FEATURE_GROUPS,
    feature_groups,
    feature_names,
    scene_features,
)
from curi.oracles.metrics import roc_auc
from curi.scenes import COLORS, MATERIALS, SHAPES, SIZES


def _plain_features(record: dict) -> list[float]:
    """The features of one scene record, written plainly (the order of `feature_names`)."""
    objs = record["objects"]
    out = [len(objs)]
    vocab = (("shape", SHAPES), ("color", COLORS), ("material", MATERIALS), ("size", SIZES))
    for prop, values in vocab:
        out += [sum(o[prop] == v for o in objs) for v in values]
    for prop, values in vocab:
        out += [len({o[prop] for o in objs}), max(sum(o[prop] == v for o in objs) for v in values)]
    for axis in ("x", "y"):
        out += [sum(o[axis] == b for o in objs) for b in range(1, 9)]
    for axis in ("x", "y"):
        out += [min(o[axis] for o in objs), max(o[axis] for o in objs)]
    return out


def test_features_match_a_plain_loop_over_records(tiny_bank):
    ids = np.r_[0:300, tiny_bank.num_scenes - 50 : tiny_bank.num_scenes]
    sc = tiny_bank.scenes
    got = scene_features(sc.n_objects[ids], sc.props[ids])
    want = np.array([_plain_features(r) for r in tiny_bank.scene_records(ids)], np.float32)
    assert got.shape == (len(ids), len(feature_names()))
    np.testing.assert_array_equal(got, want)
    groups = feature_groups()
    assert tuple(groups) == FEATURE_GROUPS
    cols = np.sort(np.concatenate(list(groups.values())))
    np.testing.assert_array_equal(cols, np.arange(len(feature_names())))  # a partition


def test_roc_auc_of_rows_is_the_share_of_pairs_ordered_right():
    """Each row's AUC (the audit's per-episode AUC) equals the share of its (positive,
    negative) pairs ordered right, ties one half, to the bit; one row gives a float."""
    rng = np.random.default_rng(0)
    s = rng.integers(0, 4, size=(30, 25)).astype(float)  # ties on purpose
    y = np.zeros((30, 25), np.int8)
    y[:, :5] = 1
    y = np.take_along_axis(y, rng.random((30, 25)).argsort(1), 1).astype(bool)
    gt = (s[:, :, None] > s[:, None, :]) + 0.5 * (s[:, :, None] == s[:, None, :])
    pairs = y[:, :, None] & ~y[:, None, :]
    want = (gt * pairs).sum((1, 2)) / pairs.sum((1, 2))
    np.testing.assert_array_equal(roc_auc(s, y), want)
    assert roc_auc(s[0], y[0]) == want[0] and isinstance(roc_auc(s[0], y[0]), float)
    assert np.isnan(roc_auc(s[:1], np.zeros((1, 25))))[0]


SMALL = {"train_episodes": 40, "test_episodes": 20, "max_iter": 10, "progress": False}


def test_audit_end_to_end_on_two_splits(tiny_bank):
    res = run_audit(tiny_bank, ["concept_iid", "boolean"], ["hard", "easy"], **SMALL)
    rows = res["rows"]
    assert [(r["split"], r["negatives"]) for r in rows] == [
        ("concept_iid", "hard"),
        ("boolean", "hard"),
        ("concept_iid", "easy"),
        ("boolean", "easy"),
    ]
    for r in rows:
        assert 0 <= r["auc"] <= 1 and 0 <= r["cba"] <= 1 and 0 < r["map"] <= 1
        assert set(r["importance"]) == set(FEATURE_GROUPS) and r["top"] in FEATURE_GROUPS
        assert r["train_scenes"] == 40 * 50 and r["test_episodes"] == 20
    for neg in ("hard", "easy"):
        mean = np.mean([r["importance"]["color"] for r in rows if r["negatives"] == neg])
        assert res["importance"][neg]["color"] == pytest.approx(mean)
    # the same seed, the same audit: episodes, trees and permutations are all seeded
    again = run_audit(tiny_bank, ["boolean"], ["easy"], **SMALL)["rows"][0]
    assert again["auc"] == rows[3]["auc"] and again["importance"] == rows[3]["importance"]
    text = markdown(res)
    assert text.count("| concept_iid |") == 2 and "| sameness |" in text


def test_query_only_learner_and_the_matched_sampler_run(tiny_bank):
    split = make_split(tiny_bank, "concept_iid")
    kw = {**SMALL, "support": False, "negative_sampler": "matched"}
    row = run_audit(tiny_bank, [split], "easy", **kw)["rows"][0]
    assert row["train_scenes"] == 40 * 25 and row["negative_sampler"] == "matched"


@pytest.mark.parametrize(
    "args, kw, match",
    [
        (["no_such_split"], {}, "no_such_split"),
        (["boolean"], {"negatives": ["medium"]}, "negatives must be one of"),
        (["boolean"], {"negatives": []}, "at least one split and one kind"),
        (["boolean"], {"train_episodes": 5}, "episodes.train must be an integer in"),
        (["boolean"], {"test_episodes": 0}, "episodes.test must be an integer in"),
        (["boolean"], {"negative_sampler": "best"}, "negative_sampler must be one of"),
    ],
)
def test_bad_input_is_one_config_error(tiny_bank, args, kw, match):
    with pytest.raises(ConfigError, match=match):
        run_audit(tiny_bank, args, **{**SMALL, **kw})


def test_command_writes_the_table(tiny_bank_dir, tmp_path):
    out = tmp_path / "audit"
    r = run_curi(
        "audit",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "splits=[concept_iid,boolean]",
        "negatives=[hard]",
        "episodes.train=30",
        "episodes.test=20",
        "max_iter=5",
        "progress=false",
        f"output_dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "| boolean | hard |" in r.stdout
    result = json.loads((out / "audit.json").read_text())
    assert [row["split"] for row in result["rows"]] == ["concept_iid", "boolean"]
    assert result["strongest"]["hard"] in FEATURE_GROUPS
    assert "# Shortcut audit" in (out / "audit.md").read_text()

"""Difficulty evaluation (oracles.difficulty_auc), the difficulty report
(models.difficulty_report) and the `curi difficulty` command: AUC against a brute-force pair
count, labels, per-concept oracle outcomes, the bank check of checkpoints, and the command end
to end on the tiny bank."""

from __future__ import annotations

import csv
import dataclasses
import itertools

import numpy as np
import pytest
from conftest import run_curi

from curi import ConfigError, make_split
from curi.episodes import EpisodeSpec
from curi.errors import OptionError, SplitError
from curi.models.difficulty_report import difficulty_report, write_report
from curi.oracles.difficulty_auc import (
    auc_table,
    easy_labels,
    oracle_outcomes,
    split_correlations,
    stratified_auc,
)
from curi.oracles.metrics import roc_auc


def _brute_auc(s, y, strata=None):
    num = den = 0.0
    for i, j in itertools.product(range(len(s)), repeat=2):
        if y[i] and not y[j] and (strata is None or strata[i] == strata[j]):
            den += 1
            num += 1.0 if s[i] > s[j] else 0.5 if s[i] == s[j] else 0.0
    return num / den if den else float("nan")


@pytest.mark.parametrize("seed", range(5))
def test_auc_matches_pair_count(seed):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 4, 40) / 3  # many ties
    y = rng.random(40) < 0.4
    g = rng.integers(0, 3, 40)
    assert roc_auc(s, y) == pytest.approx(_brute_auc(s, y))
    assert stratified_auc(s, y, g) == pytest.approx(_brute_auc(s, y, g))


def test_auc_edge_cases():
    assert roc_auc([0.1, 0.9], [False, True]) == 1.0
    assert roc_auc([0.9, 0.1], [False, True]) == 0.0
    assert roc_auc([0.5, 0.5], [False, True]) == 0.5
    assert np.isnan(roc_auc([0.1, 0.2], [True, True]))
    assert np.isnan(stratified_auc([0.1, 0.2], [True, False], [0, 1]))


def test_easy_labels():
    o = np.array([0.1, 0.5, 0.5, 0.9])
    assert easy_labels(o).tolist() == [False, True, True, True]  # median 0.5, ties easy
    assert easy_labels(o, 0.6).tolist() == [False, False, False, True]


def test_auc_table_and_split_correlations():
    rows = [
        {"split": s, "length": 7 + i % 3, "p": float(i), "q": 0.0, "oracle_ap": i / 10 + k}
        for k, s in enumerate(["a", "b"])
        for i in range(10)
    ]
    table = auc_table(rows, ["p", "q"], "oracle_ap")
    got = {(r["scope"], r["predictor"]): r for r in table}
    assert got[("a", "p")]["auc"] == 1.0 and got[("pooled", "p")]["auc"] == 1.0
    assert got[("pooled", "q")]["auc"] == 0.5 and got[("pooled", "p")]["n"] == 20
    # one threshold over both splits: split b (all above 1) is easy, split a hard
    pooled = auc_table(rows, ["p"], "oracle_ap", threshold="pooled_median")
    assert pooled[0]["easy"] == 0.5 and pooled[1]["scope"] == "a" and pooled[1]["easy"] == 0
    srows = [
        {"m": m, "d_compound": d, "mean_p": e}
        for m, d, e in [(0.9, 0.1, 1.0), (0.5, 0.3, 0.6), (0.2, 0.8, 0.1)]
    ]
    corr = {c["predictor"]: c for c in split_correlations(srows, ["p"], "m")}
    assert corr["p"]["spearman"] == pytest.approx(1.0)
    assert corr["-D_C"]["spearman"] == pytest.approx(1.0)


def test_oracle_outcomes_deterministic(tiny_bank):
    sp = make_split(tiny_bank, "boolean")
    te = sp.test[:4]
    spec = EpisodeSpec(sp, "test", seed=1, size=3)
    a = oracle_outcomes(tiny_bank, spec, te)
    b = oracle_outcomes(tiny_bank, spec, te)
    assert np.array_equal(a["ap"], b["ap"]) and np.array_equal(a["cba"], b["cba"])
    assert a["ap"].shape == (4,) and ((0 <= a["ap"]) & (a["ap"] <= 1)).all()
    c = oracle_outcomes(tiny_bank, spec, te[:2])  # per concept: independent
    assert np.array_equal(c["ap"], a["ap"][:2])


def test_checkpoint_of_another_bank_refused(tiny_bank):
    from curi.models.difficulty_report import check_checkpoint_bank

    check_checkpoint_bank(dict(tiny_bank.config), tiny_bank)  # same bank: fine
    other = {**tiny_bank.config, "seed": 7, "name": "other"}
    with pytest.raises(ConfigError, match="trained on bank 'other'.*bank=other"):
        check_checkpoint_bank(other, tiny_bank)


def test_command_end_to_end(tiny_bank_dir, tmp_path):
    data = f"data_dir={tiny_bank_dir.parent}"
    run = tmp_path / "run"
    out = run_curi(
        "train",
        "bank=tiny",
        "train=tiny",
        data,
        "split=boolean",
        "device=cpu",
        f"output_dir={run}",
        "progress=false",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    adv = "{name:adv,rule:adversarial,max_easiness:1.01,min_test:1}"
    res = tmp_path / "diff"
    out = run_curi(
        "difficulty",
        "bank=tiny",
        data,
        f"splits=[binding_color,{adv}]",
        f"checkpoint={run}",
        "max_concepts=8",
        "episodes_per_concept=2",
        f"output_dir={res}",
        "progress=false",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "ROC AUC against the model" in out.stdout
    rows = list(csv.DictReader((res / "concepts.csv").open()))
    assert {r["split"] for r in rows} == {"binding_color", "adv", "boolean"}
    binding = [r for r in rows if r["split"] == "binding_color"]
    assert all(r["unseen_symbols"] == "True" and float(r["easiness_2-LS"]) == 0 for r in binding)
    assert all(r["model_ap"] for r in rows if r["split"] == "boolean")
    assert all(int(r["length"]) == len(r["concept"].split()) for r in rows)
    assert (res / "difficulty.png").stat().st_size > 0 and (res / "auc.md").is_file()


@pytest.mark.parametrize("n_test", [0, 1])
def test_split_with_too_few_test_concepts_is_one_clear_error(tiny_bank, n_test):
    sp = make_split(tiny_bank, "boolean")
    few = dataclasses.replace(sp, name="few", test=sp.test[:n_test])
    with pytest.raises(
        SplitError,
        match=r"split 'few' has (no test concepts|1 test concept) "
        r"in this bank; .*needs at least 2",
    ):
        difficulty_report(tiny_bank, [sp, few], max_concepts=2, episodes=1)
    with pytest.raises(ConfigError, match=r"max_concepts must be an integer in \[2, "):
        difficulty_report(tiny_bank, [sp], max_concepts=1, episodes=1)


def test_command_on_an_empty_test_set_ends_in_one_line(tiny_bank_dir, tmp_path):
    empty = "{name:long,rule:length,threshold:100,val:same_as_test}"  # no concept that long
    out = run_curi(
        "difficulty",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        f"splits=[{empty}]",
        f"output_dir={tmp_path}",
        "progress=false",
        cwd=tmp_path,
    )
    assert out.returncode == 2, out.stderr
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and "'long'" in err[0] and "test" in err[0], out.stderr
    out = run_curi(
        "difficulty",
        "bank=tiny",
        "max_concepts=0",
        "data_dir=/nonexistent",
        f"output_dir={tmp_path}",
        cwd=tmp_path,
    )  # checked before the bank opens
    assert out.returncode == 2 and "max_concepts must be an integer" in out.stderr, out.stderr


def test_fewer_than_three_splits_say_why_there_is_no_correlation(tiny_bank, tmp_path):
    report = difficulty_report(
        tiny_bank, ["boolean", "extrinsic"], predictors=["2-LS"], max_concepts=4, episodes=1
    )
    write_report(report, tmp_path)
    md = (tmp_path / "auc.md").read_text()
    section = md[md.index("## Per split") :]
    assert "needs at least 3 splits; this report has 2 (boolean, extrinsic)" in section
    assert "nan" not in section and "| -D_C |" not in section
    assert len(report["correlations"]) == 2  # difficulty.json keeps them


def test_unknown_predictor_is_one_clear_error(tiny_bank):
    with pytest.raises(OptionError, match=r"predictors must be one of .*ext-neg.*, got 'ext-nope'"):
        difficulty_report(tiny_bank, ["boolean"], predictors=["2-LS", "ext-nope"], episodes=1)


def test_report_has_the_extension_predictors_and_the_nearest_training_concept(tiny_bank):
    names = ["2-LS", "ext-nn", "ext-neg"]
    report = difficulty_report(tiny_bank, ["boolean"], predictors=names, max_concepts=4, episodes=1)
    rows = report["rows"]
    assert all(0 <= r["easiness_ext-neg"] <= 1 for r in rows)
    assert all(r["nearest_train"] in tiny_bank.concepts for r in rows)
    train = set(make_split(tiny_bank, "boolean").train.tolist())
    assert all(tiny_bank.concepts.index(r["nearest_train"]) in train for r in rows)
    assert {r["predictor"] for r in report["auc_oracle"]} == set(names)


def test_a_misspelt_threshold_is_refused_with_a_suggestion():
    """The threshold names are declared once (`curi.predictors.THRESHOLDS`) and checked by the
    one check of closed sets; a typo used to fail later inside float()."""
    from curi.errors import OptionError

    with pytest.raises(OptionError, match=r"threshold must be one of .*\(did you mean 'median'"):
        auc_table([], ["length"], "oracle_ap", threshold="medain")

"""The gap computation: grouped AP against plain AP, invariants of the table, the report."""

import json

import numpy as np
import pytest

from curi.bits import unpack_rows
from curi.episodes import EpisodeSampler
from curi.oracles.gap import (
    ROW_KEYS,
    EvalSet,
    _oracle_ap,
    _random_ap,
    ap_from_counts,
    compositionality_gap,
)
from curi.oracles.metrics import average_precision
from curi.oracles.policies import Oracle
from curi.oracles.report import write_report
from curi.splits import make_split


@pytest.fixture(scope="module")
def evalset(tiny_bank):
    return EvalSet.from_bank(tiny_bank)


def test_eval_set_rows_are_the_truth_on_eval_scenes(tiny_bank, evalset):
    dense = unpack_rows(np.asarray(tiny_bank.truth_words), tiny_bank.num_scenes)
    np.testing.assert_array_equal(
        unpack_rows(evalset.rows, len(evalset)), dense[:, tiny_bank.eval_ids]
    )


@pytest.mark.parametrize("max_cells", [64, 0])  # 0: per-scene scores only
def test_grouped_ap_equals_plain_ap(tiny_bank, evalset, monkeypatch, max_cells):
    from curi.oracles import gap as gap_mod

    monkeypatch.setattr(gap_mod, "_MAX_CELLS", max_cells)
    m = len(evalset)
    dense = unpack_rows(evalset.rows, m)
    split = make_split(tiny_bank, "concept_iid")
    groups = np.asarray(tiny_bank.groups)
    sizes = set()
    for negatives, hypotheses in [(n, h) for n in ("hard", "easy") for h in (None, split.train)]:
        oracle = Oracle(tiny_bank, hypotheses, negatives=negatives)
        sampler = EpisodeSampler(tiny_bank, split, "test", negatives, seed=2, size=80)
        for i in range(len(sampler)):
            e = sampler[i]
            idx, w = oracle.posterior(e.support_ids, e.support_labels)
            label = dense[e.concept]
            scores = np.round(w @ dense[idx], 12) if len(idx) else np.zeros(m)
            want = average_precision(scores, label)
            assert _oracle_ap(evalset, label, idx, w, groups) == pytest.approx(want, abs=1e-12)
            n_groups = len(np.unique(groups[idx]))
            sizes.add(0 if n_groups == 0 else 1 if n_groups <= 8 else 2 if n_groups <= 16 else 3)
    assert sizes == {0, 1, 2, 3}  # none, one block of byte codes (or cells), two, more


def test_ap_from_counts_all_equal_scores_is_positive_rate():
    assert ap_from_counts(np.array([0.3]), np.array([7]), np.array([100])) == pytest.approx(0.07)


def test_random_ap_matches_uniform_scores_in_expectation():
    rng = np.random.default_rng(0)
    sim = np.mean([_random_ap(rng, 5, 200) for _ in range(3000)])
    labels = np.zeros(200, bool)
    labels[:5] = True
    ref = np.mean([average_precision(rng.random(200), labels) for _ in range(3000)])
    assert sim == pytest.approx(ref, abs=0.01)


@pytest.fixture(scope="module")
def rows(tiny_bank):
    return compositionality_gap(
        tiny_bank,
        ["instance_iid", "binding_color", "counting"],
        ["hard", "easy"],
        episodes=150,
        workers=1,
        progress=False,
    )


def test_table_invariants(rows):
    assert len(rows) == 6
    for r in rows:
        assert set(ROW_KEYS) <= set(r)
        assert r["map_gap"] == pytest.approx(r["map_strong"] - r["map_weak"])
        assert 0.9 < r["map_strong"] <= 1 and 0.9 < r["cba_strong"] <= 1
        assert 0.4 < r["cba_random"] < 0.6
    iid = [r for r in rows if r["split"] == "instance_iid"]
    assert all(r["map_gap"] == 0 and r["cba_gap"] == 0 and r["d_atom"] == 0 for r in iid)
    bc = next(r for r in rows if r["split"] == "binding_color" and r["negatives"] == "hard")
    assert bc["map_gap"] > 0.5 and bc["d_atom"] > 0.05
    assert bc["d_compound"] > bc["d_compound_random"]


def test_weak_oracle_without_train_concepts(tiny_bank):
    split = make_split(tiny_bank, "binding_color")
    empty = type(split)("empty", split.train[:0], split.val, split.test, split.dropped)
    (row,) = compositionality_gap(
        tiny_bank, [empty], "hard", episodes=40, workers=1, divergences=False, progress=False
    )
    assert row["cba_weak"] == 0.5
    assert 0 < row["map_weak"] < 0.2  # all-zero scores: AP is the positive rate


def test_report_files(rows, tmp_path):
    paths = write_report(rows, tmp_path, meta={"bank": "tiny"})
    assert json.loads(paths["json"].read_text())[0]["split"] == rows[0]["split"]
    md = paths["md"].read_text()
    assert "| binding_color | hard |" in md and "mAP gap" in md
    assert "Beside the paper" in md and "Pearson r" in md  # 3 paper splits with hard negatives
    assert paths["png"].stat().st_size > 10_000


def test_ap_of_scores_matches_plain_ap_with_ties_and_zeros():
    from curi.oracles.gap import _ap_of_scores

    rng = np.random.default_rng(0)
    for _ in range(300):
        m = int(rng.integers(1, 80))
        scores = rng.choice([0.0, 1e-14, 0.1, 0.25, 0.5, 0.9], size=m) * rng.integers(1, 3, size=m)
        labels = rng.random(m) < 0.3
        if not labels.any():
            assert np.isnan(_ap_of_scores(scores, labels))
            continue
        want = average_precision(np.round(scores, 12), labels)
        assert _ap_of_scores(scores, labels) == pytest.approx(want, abs=1e-12)


def test_paper_comparison():
    from curi.oracles.paper import PAPER_GAP, paper_comparison

    rows = []
    for split, (ms, _, mg, cs, cw, cg) in PAPER_GAP.items():
        for neg, shrink in (("hard", 0.0), ("easy", 0.05)):
            gap = max(mg - shrink, 0.0) if split != "instance_iid" else 0.0
            rows.append(dict(split=split, negatives=neg, map_strong=ms, map_weak=ms - gap,
                             map_gap=gap, cba_strong=cs, cba_weak=cw, cba_gap=cg))  # fmt: skip
    text = paper_comparison(rows)
    assert "Pearson r 1.00" in text and "mean absolute error strong 0.000" in text
    assert "gap 0.000" in text and "shrink the mAP gap by 5.0 +- 0.0 points" in text
    assert text.count("\n| ") == len(PAPER_GAP)  # one row per split
    assert paper_comparison([dict(rows[0], split="mine")]) == ""


def test_paper_agreement_with_ties_and_nan():
    from curi.oracles.paper import _ranks, agreement

    np.testing.assert_array_equal(_ranks([0.5, 0.2, 0.5, 0.9]), [1.5, 0, 1.5, 3])
    tied = [dict(split=s, negatives="hard", map_strong=0.9, map_weak=0.4, map_gap=0.5)
            for s in ("counting", "boolean", "intrinsic")]  # fmt: skip
    a = agreement(tied)
    assert np.isnan(a["pearson"]) and np.isnan(a["spearman"])  # no variance: undefined
    tied[0]["map_gap"] = float("nan")
    assert np.isnan(agreement(tied)["spearman"])
    assert agreement(tied[:2]) is None

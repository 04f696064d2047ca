"""The gap computation: invariants of the table, the weak oracle without train concepts, the
report. The AP maths it uses are tested in test_oracles_metrics.py."""

import json

import numpy as np
import pytest

from curi.oracles.gap import ROW_KEYS, compositionality_gap
from curi.oracles.report import write_report
from curi.splits import make_split


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
        # the prior-only oracle: no support, so below the strong oracle, in range
        assert 0 < r["map_prior"] < r["map_strong"] and r["map_prior"] <= 1
        assert 0 <= r["cba_prior"] <= 1 and 0 <= r["cba_pooled_prior"] <= 1
    iid = [r for r in rows if r["split"] == "instance_iid"]
    assert all(r["map_gap"] == 0 and r["cba_gap"] == 0 and r["d_atom"] == 0 for r in iid)
    bc = next(r for r in rows if r["split"] == "binding_color" and r["negatives"] == "hard")
    assert bc["map_gap"] > 0.5 and bc["d_atom"] > 0.05
    assert bc["d_compound"] > bc["d_compound_random"]


def test_pool_rows_equal_serial_rows(tiny_bank):
    """The pool's workers get the bank, evaluation set and splits as initializer arguments:
    their rows equal those of one process, in the same order, and the parent keeps no state."""
    from curi.oracles import gap

    kw = dict(episodes=40, divergences=False, progress=False)
    splits, negatives = ["binding_color", "counting"], ["hard", "easy"]
    serial = compositionality_gap(tiny_bank, splits, negatives, workers=1, **kw)
    pooled = compositionality_gap(tiny_bank, splits, negatives, workers=2, **kw)
    timing = {"seconds", "stage_seconds"}
    assert [{k: v for k, v in r.items() if k not in timing} for r in pooled] == [
        {k: v for k, v in r.items() if k not in timing} for r in serial
    ]
    assert gap._worker_jobs is None


def test_rows_scored_in_chunks_equal_rows_scored_whole(tiny_bank, monkeypatch):
    """A row scored in chunks of a few episodes by two processes (each chunk's episodes,
    posteriors and random-oracle draws taken where the whole row would take them, the AP
    caches of a process reused across its chunks, and emptied when full) equals the row
    scored in one piece."""
    from curi.oracles import gap, gap_oracles

    kw = dict(episodes=45, divergences=False, progress=False)
    splits, negatives = ["instance_iid", "binding_color"], ["hard", "easy"]
    whole = compositionality_gap(tiny_bank, splits, negatives, workers=1, **kw)
    monkeypatch.setattr(gap, "CHUNK", 7)
    monkeypatch.setattr(gap_oracles, "_MAX_CACHED_APS", 3)  # full after a chunk: emptied next
    chunked = compositionality_gap(tiny_bank, splits, negatives, workers=2, **kw)
    timing = {"seconds", "stage_seconds"}
    assert [{k: v for k, v in r.items() if k not in timing} for r in chunked] == [
        {k: v for k, v in r.items() if k not in timing} for r in whole
    ]


def test_the_progress_bar_counts_episodes_within_a_row(tiny_bank, monkeypatch):
    """The bar moves as each chunk of a row's episodes is scored, not once per row."""
    import tqdm

    from curi.oracles import gap

    bars = []

    class Bar(tqdm.tqdm):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.steps = []
            bars.append(self)

        def update(self, n=1):
            self.steps.append(n)
            return super().update(n)

    monkeypatch.setattr(tqdm, "tqdm", Bar)
    monkeypatch.setattr(gap, "CHUNK", 10)
    compositionality_gap(tiny_bank, "counting", "hard", episodes=30, workers=1, progress=True)
    (bar,) = bars
    assert (bar.total, bar.unit, bar.steps) == (30, "episode", [10, 10, 10])


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
    assert "mAP prior" in md and "CBA prior" in md
    bc = next(r for r in rows if r["split"] == "binding_color" and r["negatives"] == "hard")
    assert f"| {bc['map_prior']:.3f} |" in md
    assert "Beside the paper" in md and "Pearson r" in md  # 3 paper splits with hard negatives
    assert paths["png"].stat().st_size > 10_000


def test_paper_comparison():
    from curi.oracles.paper import PAPER_GAP, paper_comparison

    rows = []
    for split, (ms, _, mg, cs, cw, cg) in PAPER_GAP.items():
        for neg, shrink in (("hard", 0.0), ("easy", 0.05)):
            gap = max(mg - shrink, 0.0) if split != "instance_iid" else 0.0
            rows.append(
                dict(
                    split=split,
                    negatives=neg,
                    map_strong=ms,
                    map_weak=ms - gap,
                    map_gap=gap,
                    cba_strong=cs,
                    cba_weak=cw,
                    cba_gap=cg,
                )
            )
    text = paper_comparison(rows)
    assert "Pearson r 1.00" in text and "mean absolute error strong 0.000" in text
    assert "gap 0.000" in text and "shrink the mAP gap by 5.0 +- 0.0 points" in text
    assert text.count("\n| ") == len(PAPER_GAP)  # one row per split
    assert paper_comparison([dict(rows[0], split="mine")]) == ""


def test_paper_agreement_with_ties_and_nan():
    from curi.oracles.paper import _ranks, agreement

    np.testing.assert_array_equal(_ranks([0.5, 0.2, 0.5, 0.9]), [1.5, 0, 1.5, 3])
    tied = [
        dict(split=s, negatives="hard", map_strong=0.9, map_weak=0.4, map_gap=0.5)
        for s in ("counting", "boolean", "intrinsic")
    ]
    a = agreement(tied)
    assert np.isnan(a["pearson"]) and np.isnan(a["spearman"])  # no variance: undefined
    tied[0]["map_gap"] = float("nan")
    assert np.isnan(agreement(tied)["spearman"])
    assert agreement(tied[:2]) is None

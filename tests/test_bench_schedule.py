"""The training-recipe comparison (`benchmarks/bench_schedule.py`): each recipe's settings, its
records (resumed, refused when broken) and their tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_schedule.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_schedule

        yield bench_schedule
    finally:
        sys.path.remove(str(SCRIPT.parent))


def _run(*args, env=None):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        timeout=600,
    )


def test_recipes_follow_the_square_root_rule_except_the_control(bench):
    paper = bench.recipe_train("paper", 64_000, 10)
    assert (paper["batch_size"], paper["lr"], paper["lr_schedule"]) == (64, 1e-3, "constant")
    assert (paper["steps"], paper["eval_every"], paper["warmup_steps"]) == (1000, 100, 0)
    big = bench.recipe_train("sqrt-256", 64_000, 10)
    assert big["steps"] == 250 and big["lr"] == pytest.approx(2e-3)
    assert big["warmup_steps"] == 5 and big["lr_schedule"] == "cosine"  # 2 % of 250 steps
    assert bench.recipe_train("sqrt-16", 64_000, 10)["lr"] == pytest.approx(5e-4)
    assert bench.recipe_train("same-lr-256", 64_000, 10)["lr"] == 1e-3


def _record(bench, recipe, seed, curve, **kw):
    batch = bench.RECIPES[recipe][0]
    return {
        "bank": "default",
        "split": "concept_iid",
        "recipe": recipe,
        "episodes": 1000,
        "seed": seed,
        "val_episodes": 50,
        "batch": batch,
        "lr": 1e-3,
        "schedule": "cosine",
        "warmup_steps": 0,
        "steps": 1000 // batch,
        "val_curve": curve,
        "wall_s": 60.0,
        "commit": "abc1234",
        "machine": "test host",
    } | kw


def test_the_table_reads_each_share_of_the_budget_and_the_seeds_spread(bench):
    curve0 = [[250, 0.1], [500, 0.2], [750, 0.3], [1000, 0.4]]
    curve1 = [[250, 0.2], [500, 0.4], [750, 0.5], [1000, 0.6]]
    rows = [_record(bench, "paper", 0, curve0), _record(bench, "paper", 1, curve1)]
    row = next(line for line in bench.tables(rows).splitlines() if line.startswith("| paper"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4:9] == [
        "0, 1",
        "0.150 ± 0.071",
        "0.300 ± 0.141",
        "**0.500 ± 0.141**",
        "0.400, 0.600",
    ]
    assert cells[9] == "0.500 ± 0.141" and cells[10] == "1.0"
    assert "abc1234" in bench.tables(rows)
    *_, curve = (line for line in bench.tables(rows).splitlines() if line.startswith("| paper |"))
    assert "| curve: mean val mAP at | 100 | 200 |" in bench.tables(rows)
    # tenths 1-2 precede the first validation (250); 3-4 read it, 5-7 the second, ...
    cells = [c.strip() for c in curve.strip("|").split("|")]
    assert cells[1:] == [
        "nan",
        "nan",
        "0.150",
        "0.150",
        "0.300",
        "0.300",
        "0.300",
        "0.400",
        "0.400",
        "0.500",
    ]


def test_a_recipe_run_is_recorded_then_skipped_and_rendered(tiny_bank_dir, tmp_path, bench):
    results = tmp_path / "r.json"
    args = [
        "--bank",
        tiny_bank_dir,
        "--recipes",
        "sqrt-256",
        "--episodes",
        256,
        "--seeds",
        0,
        "--points",
        1,
        "--val-episodes",
        8,
        "--results",
        results,
    ]
    first = _run(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    (rec,) = json.loads(results.read_text())
    assert (rec["recipe"], rec["batch"], rec["steps"], rec["bank"]) == ("sqrt-256", 256, 1, "tiny")
    assert [e for e, _ in rec["val_curve"]] == [256] and 0 <= rec["val_curve"][0][1] <= 1
    before = results.read_bytes()
    again = _run(*args)
    assert again.returncode == 0 and "recorded, skipped" in again.stdout
    assert results.read_bytes() == before

    doc = tmp_path / "benchmarks.md"
    doc.write_text("# B\n\n<!-- bench:recipes-cpu -->\nold\n<!-- /bench:recipes-cpu -->\n")
    bench.render(json.loads(before), doc, tmp_path / "c.png")
    text = doc.read_text()
    assert "old" not in text and "| sqrt-256 | 256 | 0.002 |" in text
    assert (tmp_path / "c.png").stat().st_size > 0


@pytest.mark.parametrize(
    "content, said",
    [
        ("{not json", "is not JSON"),
        ('{"a": 1}', "is not a JSON list"),
        ('[{"bank": "x"}]', "lacks"),
    ],
)
def test_a_broken_results_file_is_refused_in_one_line_and_kept(tmp_path, content, said):
    results = tmp_path / "r.json"
    results.write_text(content)
    got = _run("--results", results, "--episodes", 256, env={"CURI_DATA_DIR": str(tmp_path)})
    assert got.returncode != 0 and said in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1
    assert results.read_text() == content
    assert not (tmp_path / "default").exists()  # refused before any bank was built


def test_a_results_file_in_a_missing_folder_is_refused_before_training(tmp_path):
    results = tmp_path / "no" / "r.json"
    got = _run("--results", results, "--episodes", 256, env={"CURI_DATA_DIR": str(tmp_path)})
    assert got.returncode != 0 and "is not a writable folder" in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "no").exists() and not (tmp_path / "default").exists()

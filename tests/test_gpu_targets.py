"""The GPU targets script (`benchmarks/gpu_targets.py`) end to end on the CPU with the tiny
bank: every stage runs (calibration, the steady rate with its applied gradients, the headline
cell, table cells) and one JSON summary comes out, so a lent GPU's minutes are never spent on
a bug of the script; and bad input is one line before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_targets.py"
REQUIRED = (  # gpu_table.REQUIRED
    "device", "torch", "commit", "bank", "bank_sha256", "pooler", "split", "negatives", "seed",
    "batch", "steps", "episodes", "wall_s", "test_s", "val_curve", "test_map", "test_cba",
)  # fmt: skip


def _run(tiny_bank_dir, tmp_path, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    base = ["--bank", "tiny", "--device", "cpu", "--data-dir", str(tiny_bank_dir.parent)]
    return subprocess.run(
        [sys.executable, str(SCRIPT), *base, "--commit", "abc123", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,  # a hang guard: about 1 min on a loaded 2-core machine
    )


def test_every_stage_runs_on_the_cpu_and_ends_in_one_summary(tiny_bank_dir, tmp_path):
    res, out = tmp_path / "res.json", tmp_path / "out"
    # a budget far above a busy machine's time (the table capped instead), so that no stage is
    # skipped for time: at load 15 the 0.8 minutes this had left no room for the headline
    args = ["--minutes", "30", "--max-cells", "2", "--headline-minutes", "0.1"]
    args += ["--results", str(res)]
    r = _run(tiny_bank_dir, tmp_path, *args, "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "targets.json").read_text())
    assert r.stdout.rstrip().endswith("}") and json.loads(r.stdout[r.stdout.index("\n{") :])
    assert summary["cuda_checks"] == "n/a (no GPU)" and summary["mode"] == "eager"
    assert summary["roofline"]["gflop"] > 0 and summary["calibration"][0]["episodes_per_s"] > 0
    rate = summary["rate"]
    assert rate["applied_steps"] == rate["steps"] and rate["steady_s"] > 0
    assert rate["steady_episodes"] % rate["batch"] == 0 and rate["episodes_per_s"] > 0
    assert rate["tflops"] > 0 and rate["gbps"] > 0 and rate["bytes_model"] == "unfused fp32"
    head = summary["headline"]
    assert head["steps"] >= 2 and head["test_episodes"] == 100 and 0 < head["test_map"] < 1
    records = json.loads(res.read_text())
    assert (records[0]["pooler"], records[0]["split"], records[0]["negatives"]) == (
        "relation_net", "concept_iid", "hard",
    )  # fmt: skip
    assert records[0]["test_map"] == head["test_map"] and records[0]["commit"] == "abc123"
    for rec in records:
        assert set(REQUIRED) <= set(rec) and rec["bank"] == "tiny" and rec["seed"] == 0
    assert len(summary["table"]["cells"]) == 2 and not summary["skipped"]
    assert len(records) == 1 + len(summary["table"]["cells"])
    assert set(summary["seconds"]) >= {"bank", "roofline", "calibration", "rate", "total"}


def test_a_negative_cell_cap_is_one_line_before_any_work(tiny_bank_dir, tmp_path):
    r = _run(tiny_bank_dir, tmp_path, "--max-cells", "-1", "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("gpu_targets.py: --max-cells must be 0 or more")
    assert not (tmp_path / "out").exists()


def test_a_bad_mode_is_one_line_before_any_work(tiny_bank_dir, tmp_path):
    r = _run(tiny_bank_dir, tmp_path, "--modes", "warp", "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("gpu_targets.py: --modes: 'warp' is not one of")
    assert not (tmp_path / "out").exists()

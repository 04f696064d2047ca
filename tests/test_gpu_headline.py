"""The GPU headline script (`benchmarks/gpu_headline.py`) end to end on the CPU, at the size
the script picks there, so a borrowed GPU's minutes are never spent on a bug of the script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_headline.py"


def test_the_headline_script_runs_end_to_end_on_the_cpu(tiny_bank_dir, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "CURI_DATA_DIR": str(tiny_bank_dir.parent), "OMP_NUM_THREADS": "1"}
    args = ["--bank", "tiny", "--device", "cpu", "--minutes", "0.2", "--out", str(out)]
    r = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,  # a hang guard: about 1.5 min on a loaded 2-core machine
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((out / "headline.json").read_text())
    assert report["steps"] >= 2 and report["sampler"] == "loader" and report["step_mode"] == "eager"
    assert 0 < report["test_map"] < 1 and report["test_episodes"] == 200
    assert report["gpu_utilisation"] == "n/a" and len(report["val"]) >= 2
    assert (out / "run" / "checkpoints" / "best.pt").is_file()
    assert "| test mAP (200 episodes, seed 0) |" in r.stdout and "(paper 0.607)" in r.stdout

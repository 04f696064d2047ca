"""`learner=` on the command line (docs/learners.md): bad input refused in one line before any
work, and a tiny `curi train learner=propose_verify` then `curi eval` of its checkpoint."""

from __future__ import annotations

import json

import pytest
from conftest import run_curi

BAD = [
    ("learner=propose_verify learner.k=0", "learner.k must be an integer in [1, 65536], got 0"),
    ("learner=propose_verify learner.k=-1", "learner.k must be an integer"),
    ("learner=propose_verify learner.k=2.5", "k=2.5 is not int"),
    ("learner=propose_verify learner.k=65537", "learner.k must be an integer"),
    ("learner.k=8", "unknown option 'learner.k'"),
    ("learner=propose_verify pooling=avg", "pooling is an option of learner=protonet"),
    ("learner=propose_verify train.alpha=1", "train.alpha is an option of learner=protonet"),
    ("learner=propose_verify modality=image", "reads the scenes' object arrays"),
    ("learner=propose_verify negative_sampler=matched", "does not take negative_sampler=matched"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_learner_input_is_one_line_before_any_work(tmp_path, args, message):
    out = tmp_path / "run"
    data = tmp_path / "data"
    r = run_curi(
        "train", "bank=tiny", f"data_dir={data}", f"output_dir={out}", *args.split(), cwd=tmp_path
    )
    assert r.returncode == 2, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("curi train: error: "), r.stderr[-3000:]
    assert message in lines[0]
    assert not out.exists() and not data.exists()


@pytest.mark.slow
def test_train_then_eval_a_tiny_propose_verify_run(tiny_bank_dir, tmp_path):
    data = tiny_bank_dir.parent
    out = tmp_path / "pv"
    args = ["bank=tiny", f"data_dir={data}", f"output_dir={out}", "progress=false"]
    opts = ["learner=propose_verify", "learner.steps=4", "learner.select_episodes=2", "learner.k=8"]
    opts.append("learner.fallback_steps=2")
    r = run_curi("train", *args, *opts, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "checkpoints" / "best.pt").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["learner"] == "propose_verify" and summary["settings"]["k"] == 8
    assert summary["fallback"]["steps"] == 2 and summary["fallback"]["pooling"] == "avg"
    ev = tmp_path / "ev"
    r = run_curi(
        "eval", f"checkpoint={out}", "episodes=5", "oracles=false", "progress=false",
        f"output_dir={ev}", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    metrics = json.loads((ev / "metrics.json").read_text())
    assert metrics["learner"] == "propose_verify" and metrics["episodes"] == 5
    assert 0.0 <= metrics["map"] <= 1.0 and 0.0 <= metrics["fallback_rate"] <= 1.0
    assert 0.0 <= metrics["fallback_model_rate"] <= metrics["fallback_rate"]

"""Tests of `curi curve` (oracles/curve.py): target spacing, correlations, and the study end to
end on the tiny bank (splits made to order, oracles, table, plot, saved split files)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_curi

from curi.errors import ConfigError
from curi.oracles.curve import correlations, divergence_curve, targets, write_curve
from curi.splits import load_split


def test_targets_step_up_to_the_maximum():
    assert targets(0.73, 0.1) == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    assert targets(0.7, 0.1)[-1] == 0.7
    with pytest.raises(ConfigError, match="step"):
        targets(0.5, 0.0)


@pytest.mark.parametrize("step", [float("nan"), float("inf"), -0.1, 0.001, 2.0])
def test_a_bad_step_is_refused_naming_the_bound(step):
    with pytest.raises(ConfigError, match=r"step must be a number in \[0.005, 1.0\].*201 targets"):
        targets(1.0, step)


@pytest.mark.parametrize("step", ["nan", "1e-12"])
def test_the_command_checks_step_before_any_work(tiny_bank_dir, tmp_path, step):
    """NaN was a traceback after a minute of jobs, 1e-12 about 1e11 targets (out of memory)."""
    out = tmp_path / "curve"
    r = run_curi(
        "curve",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        f"step={step}",
        f"output_dir={out}",
        cwd=tmp_path,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [
        f"curi curve: error: curve: step must be a number in [0.005, 1.0], got {float(step)!r} "
        "(D_C lies in [0, 1]: at most 201 targets)"
    ]
    assert not (out / "points").exists()


def test_correlations():
    x = [0.1, 0.2, 0.3, 0.4]
    c = correlations(x, [1.0, 2.0, 3.0, 5.0])
    assert c["pearson"] == pytest.approx(np.corrcoef(x, [1, 2, 3, 5])[0, 1])
    assert c["spearman"] == pytest.approx(1.0) and c["n"] == 4
    assert correlations(x, [-1.0, -2.0, -3.0, -4.0])["spearman"] == pytest.approx(-1.0)
    assert correlations([0.1, 0.2], [1.0, 2.0])["pearson"] is None  # too few points
    assert correlations(x, [1.0] * 4)["pearson"] is None  # constant


def test_the_study_on_the_tiny_bank(tiny_bank, tmp_path):
    result = divergence_curve(
        tiny_bank,
        mcd={"validation": 0.0},
        step=0.3,
        seeds=[0],
        episodes=60,
        paper_splits=False,
        split_dir=tmp_path / "splits",
        model_results={"mcd_max_s0": 0.5},
        workers=1,
        progress=False,
    )
    mcd = [r for r in result["rows"] if r["kind"] == "mcd"]
    reached = {r["target_dc"] for r in mcd}
    assert None in reached  # the maximum
    for r in mcd:
        if r["target_dc"] is not None:
            assert abs(r["d_compound"] - r["target_dc"]) <= 0.05
        assert {"map_gap", "cba_gap", "d_atom"} <= set(r)
    done = {(f["target_dc"], f["seed"]) for f in result["failed"]}
    below = [t for t in result["targets"] if t < result["max_dc"][0]]
    assert len(mcd) + len(done) == 1 + len(below)  # the maximum, then each target or a reason
    assert "hard/map_gap/mcd" in result["correlations"] or len(mcd) < 3
    assert [r["model_map"] for r in mcd if r["split"] == "mcd_max_s0"] == [0.5]
    saved = sorted((tmp_path / "splits").glob("*.json"))
    assert len(saved) == len(mcd)
    back = load_split(tiny_bank, saved[0])
    assert len(back.test) > 0
    paths = write_curve(result, tmp_path / "out")
    assert paths["png"].stat().st_size > 1000
    assert "Correlation with D_C" in paths["md"].read_text()
    assert json.loads(paths["json"].read_text())["targets"] == result["targets"]


def test_the_command(tiny_bank_dir, tmp_path):
    out = tmp_path / "curve"
    r = run_curi(
        "curve",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "seeds=[0]",
        "step=0.4",
        "episodes.test=40",
        "paper_splits=false",
        "workers=1",
        "progress=false",
        "mcd.validation=0.0",
        f"output_dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "curve.md").is_file() and (out / "curve.png").is_file()
    assert "Pearson" in r.stdout

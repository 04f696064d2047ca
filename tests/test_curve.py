"""Tests of `curi curve` (oracles/curve.py): target spacing, correlations, and the study end to
end on the tiny bank (splits made to order, oracles, table, plot, saved split files)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import run_curi

from curi.errors import ConfigError
from curi.oracles.curve import (
    collect_curve,
    correlations,
    divergence_curve,
    targets,
    write_curve,
)
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
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [
        f"curi curve: error: step must be a number in [0.005, 1.0], got {float(step)!r} "
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


def test_a_fifo_in_a_curve_folder_is_one_line_not_a_hang(tmp_path):
    """`curi curve collect` in a process of its own, stopped after 60 s: a FIFO in place of
    the plan or of a point's file is refused, never read (it would block)."""
    points = tmp_path / "C" / "points"
    points.mkdir(parents=True)
    os.mkfifo(points / "plan.json")
    _collect_refuses(points.parent, "plan.json")
    (points / "plan.json").unlink()
    plan = {"settings": {"negatives": ["hard"]}, "points": ["p0"], "targets": [0.0]}
    (points / "plan.json").write_text(json.dumps({**plan, "max_dc": {}, "seconds": 0.0}))
    os.mkfifo(points / "p0.json")
    _collect_refuses(points.parent, "p0.json")


def _collect_refuses(out, fifo: str) -> None:
    r = run_curi("curve", "collect", f"output_dir={out}", cwd=out.parent, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    assert fifo in lines[0] and "is a FIFO, not a regular file" in lines[0]


# --- a tampered curve folder ends in one line naming the file and the field --------------------

_SETTINGS = {"base": {"rule": "mcd"}, "negatives": ["hard"], "episodes": 40}
_ROW = {"split": "mcd_max_s0", "negatives": "hard", "d_compound": 0.84, "map_gap": 0.93}
CURVE_FILES = {  # a curve of three points (reached, unreached, failed), as the study writes it
    "plan.json": {
        "settings": {**_SETTINGS, "workers": 1, "split_dir": None},
        "points": ["mcd_max_s0", "mcd_0.00_s0", "mcd_0.40_s0"],
        "targets": [0.0, 0.4, 0.8],
        "max_dc": {"0": 0.84},
        "seconds": 15.0,
    },
    "mcd_max_s0.json": {
        **{"name": "mcd_max_s0", "settings": _SETTINGS, "seed": 0, "target_dc": None},
        **{"d_compound": 0.84, "rows": [_ROW]},
    },
    "mcd_0.00_s0.json": {"settings": _SETTINGS, "seed": 0, "target_dc": 0.0, "unreached": "no"},
    "mcd_0.40_s0.json": {"name": "mcd_0.40_s0", "settings": _SETTINGS, "error": "Killed"},
}


def _set(key, value):
    return lambda d: d.update({key: value})


def _drop(*keys):
    def edit(d):
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]

    return edit


CURVE_TAMPERED = {  # id: (file, edit of its JSON or its new JSON, what the message says)
    "plan-a-list": ("plan.json", [1], "the file must be an object, got [1]"),
    "plan-points-a-number": ("plan.json", _set("points", 5), "points must be a list, got 5"),
    "plan-without-settings": ("plan.json", _drop("settings"), "settings is missing"),
    "plan-negatives-a-string": (
        "plan.json",
        lambda d: d["settings"].update(negatives="hard"),
        "settings.negatives must be a list, got 'hard'",
    ),
    "plan-max-dc-key-not-a-seed": (
        "plan.json",
        _set("max_dc", {"x": 0.8}),
        "max_dc must have integer keys, got 'x'",
    ),
    "plan-without-seconds": ("plan.json", _drop("seconds"), "seconds is missing"),
    "point-a-list": ("mcd_max_s0.json", [1], "the file must be an object, got [1]"),
    "point-rows-a-number": ("mcd_max_s0.json", _set("rows", 5), "rows must be a list, got 5"),
    "point-without-rows": ("mcd_max_s0.json", _drop("rows"), "rows is missing"),
    "point-row-without-split": ("mcd_max_s0.json", _drop("rows", 0, "split"), "split is missing"),
    "point-gap-a-string": (
        "mcd_max_s0.json",
        lambda d: d["rows"][0].update(map_gap="abc"),
        "rows[0].map_gap must be a number or null, got 'abc'",
    ),
}


def _write_curve(out, file=None, edit=None):
    """The curve of `CURVE_FILES` under ``out/points``, `file` edited by `edit`."""
    files = json.loads(json.dumps(CURVE_FILES))
    if file:
        files[file] = edit(files[file]) or files[file] if callable(edit) else edit
    (out / "points").mkdir(parents=True)
    for name, body in files.items():
        (out / "points" / name).write_text(json.dumps(body))


def test_the_hand_written_curve_collects(tmp_path):
    """`CURVE_FILES` is a curve `collect_curve` reads (so each tampering below is the only
    fault)."""
    _write_curve(tmp_path)
    result = collect_curve(tmp_path)
    assert [r["map_gap"] for r in result["rows"]] == [0.93]
    assert [f.get("point") for f in result["failed"]] == [None, "mcd_0.40_s0"]


@pytest.mark.parametrize(("file", "edit", "message"), CURVE_TAMPERED.values(), ids=CURVE_TAMPERED)
def test_curi_curve_collect_of_a_tampered_curve_is_one_line(
    file, edit, message, tmp_path, capsys, monkeypatch
):
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "curve"
    _write_curve(out, file, edit)
    with pytest.raises(SystemExit) as e:
        main(["curve", "collect", f"output_dir={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    kind = "plan" if file == "plan.json" else "point"
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"curi curve collect: error: {kind} file '{out / 'points' / file}'")
    assert message in err[0]


def test_model_results_that_are_not_numbers_are_one_line(tmp_path, capsys, monkeypatch):
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    _write_curve(tmp_path / "curve")
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"mcd_max_s0": "abc"}))
    with pytest.raises(SystemExit) as e:
        main(["curve", "collect", f"output_dir={tmp_path / 'curve'}", f"model_results={model}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert f"model_results '{model}': mcd_max_s0 must be a number, got 'abc'" in err[0]


@pytest.mark.parametrize(
    ("option", "says"),
    [("mcd.train=1.5", "train must be a number in [0, 1], got 1.5"), ("mcd.max_da=-1", "max_da")],
)
def test_mcd_options_are_checked_before_the_jobs(
    option, says, tiny_bank_dir, tmp_path, capsys, monkeypatch
):
    """`curi curve mcd.train=1.5` failed in every job, then in a traceback building a table of
    no rows (issue 44's sweep of bad inputs): the options are refused before the jobs."""
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    bank = [f"data_dir={tiny_bank_dir.parent}", "bank=tiny"]
    with pytest.raises(SystemExit) as e:
        main(["curve", *bank, option, "seeds=[0]", "episodes.test=8", "paper_splits=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and says in err[0], err
    assert list(tmp_path.iterdir()) == []

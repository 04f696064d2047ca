"""The sweeps as jobs (`curi baselines`, `curi curve`), run as a user runs them: the same table
under the basic launcher and submitit's local processes (Ray: slow, below), a job killed mid-run
resumed by the next invocation, a job that raises listed with its error and exit 1, the collect
commands, and `-m` refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import run_curi

import curi.models.baselines as baselines_mod
from curi.models import cli as models_cli

SWEEP = [
    "bank=tiny",
    "train=tiny",
    "only=[schema-relation_net]",
    "splits=[concept_iid,counting]",
    "episodes=40",
    "train.steps=4",
    "train.eval_every=2",
    "train.checkpoint_every=2",
    "train.val_episodes=8",
    "train.batch_size=2",
    "embed_dim=16",
    "threads=1",
    "progress=false",
]
TIMINGS = ("train_seconds", "train_cpu_seconds", "eval_seconds", "dir")


def _rows(out):
    table = json.loads((out / "baselines.json").read_text())
    rows = [{k: v for k, v in r.items() if k != "train_seconds"} for r in table["rows"]]
    runs = [{k: v for k, v in r.items() if k not in TIMINGS} for r in table["runs"]]
    return rows, runs, table


def _sweep(tmp_path, bank_dir, out, *more, sweep=SWEEP):
    return run_curi(
        "baselines", *sweep, f"data_dir={bank_dir.parent}", f"output_dir={out}", *more, cwd=tmp_path
    )


def test_submitit_local_writes_the_basic_launchers_table(tiny_bank_dir, tmp_path):
    # threads left at null: one torch thread a job under both (basic left torch's default,
    # submitit gave a job its CPUs, and the tables differed)
    basic, local = tmp_path / "basic", tmp_path / "local"
    sweep = [a for a in SWEEP if a != "threads=1"]
    r = _sweep(tmp_path, tiny_bank_dir, basic, "splits=[counting]", sweep=sweep)
    assert r.returncode == 0, r.stderr[-2000:]
    more = ["hydra/launcher=submitit_local", "splits=[counting]"]
    r = _sweep(tmp_path, tiny_bank_dir, local, *more, sweep=sweep)
    assert r.returncode == 0, r.stderr[-2000:]
    (b_rows, b_runs, b), (l_rows, l_runs, _) = _rows(basic), _rows(local)
    assert len(b_rows) == 1 and b_rows == l_rows and b_runs == l_runs
    for out in (basic, local):  # as planned (run.json) and as the job ran (result.json)
        run = out / "runs" / "schema-relation_net" / "counting" / "seed0"
        assert json.loads((run / "run.json").read_text())["threads"] == 1
        assert json.loads((run / "result.json").read_text())["threads"] == 1
    assert all(row["oracle_strong"] is not None for row in b_rows)
    assert b["incomplete"] == []
    # each run was a job of its own process, its log under the sweep's folder
    assert len(list((local / ".submitit").glob("*/*_log.out"))) == 2  # the run, the oracles
    # collect rebuilds the same table from the folders
    r = run_curi("baselines", "collect", f"output_dir={local}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _rows(local)[0] == l_rows


def test_a_failed_run_is_listed_then_resumed(tiny_bank_dir, tmp_path, monkeypatch):
    from hydra import compose, initialize_config_module

    out = tmp_path / "bl"
    with initialize_config_module(config_module="curi.conf", version_base="1.3"):
        cfg = compose(
            "baselines", [*SWEEP, f"data_dir={tiny_bank_dir.parent}", f"output_dir={out}"]
        )
    real = baselines_mod._train_and_test

    def broken(r, *a, **k):
        if r.split == "counting":
            raise RuntimeError("out of memory (simulated)")
        return real(r, *a, **k)

    monkeypatch.setattr(baselines_mod, "_train_and_test", broken)
    with pytest.raises(SystemExit) as e:
        models_cli.baselines(cfg)
    assert e.value.code == 1
    table = json.loads((out / "baselines.json").read_text())
    assert [r["split"] for r in table["rows"]] == ["concept_iid"]  # the finished run is there
    (bad,) = table["incomplete"]
    assert bad == {
        "run": "schema-relation_net/counting/seed0",
        "status": "failed",
        "error": "RuntimeError: out of memory (simulated)",
        "dir": str(out / "runs" / "schema-relation_net" / "counting" / "seed0"),
    }
    assert "1 runs not finished" in (out / "baselines.md").read_text()
    monkeypatch.undo()
    models_cli.baselines(cfg)  # the next invocation runs only the failed one
    table = json.loads((out / "baselines.json").read_text())
    assert [r["split"] for r in table["rows"]] == ["concept_iid", "counting"]
    assert (
        table["incomplete"] == []
        and not (
            out / "runs" / "schema-relation_net" / "counting" / "seed0" / "failed.json"
        ).exists()
    )


def test_a_job_killed_mid_run_is_resumed_by_the_next_invocation(tiny_bank_dir, tmp_path):
    out = tmp_path / "bl"
    args = [
        *SWEEP,
        "splits=[concept_iid]",
        "train.steps=40",
        "train.checkpoint_every=4",
        "train.eval_every=20",
        f"data_dir={tiny_bank_dir.parent}",
        f"output_dir={out}",
        "hydra/launcher=submitit_local",
    ]
    run = out / "runs" / "schema-relation_net" / "concept_iid" / "seed0" / "train"
    cmd = [sys.executable, "-c", "from curi.cli import main; main()", "baselines", *args]
    p = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while not (run / "checkpoints" / "last.pt").is_file():
            assert p.poll() is None and time.monotonic() < deadline, "no checkpoint written"
            time.sleep(0.2)
    finally:  # SIGKILL the command and its job processes (one session)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    killed_at = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert max(killed_at) < 40 and not (run.parent / "result.json").exists()
    r = run_curi("baselines", *args, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [x["step"] for x in lines if x["tag"] == "train"]
    assert len(steps) == len(set(steps)) and max(steps) == 40  # resumed, no step twice
    assert min(s for s in steps if s > max(killed_at) - 4) > 0
    assert json.loads((run.parent / "result.json").read_text())["steps"] == 40


@pytest.mark.parametrize("command", ["baselines", "curve"])
def test_a_second_command_on_a_sweeps_folder_fails_at_once(tiny_bank_dir, tmp_path, command):
    out = tmp_path / "sweep"
    args = {
        "baselines": [*SWEEP, "splits=[concept_iid]", "train.steps=100000"],
        "curve": ["bank=tiny", "seeds=[0]", "paper_splits=false", "progress=false"],
    }[command]
    args = [command, *args, f"data_dir={tiny_bank_dir.parent}", f"output_dir={out}"]
    cmd = [sys.executable, "-c", "from curi.cli import main; main()", *args]
    first = subprocess.Popen(
        cmd, cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 300
        while not (out / ".sweep.lock").is_file():
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first command did not start"
            time.sleep(0.1)
        second = run_curi(*args, cwd=tmp_path, timeout=300)
        assert first.poll() is None  # still running, alone
    finally:  # the command and its jobs (one session)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert second.returncode == 2, second.stderr[-3000:]
    (line,) = second.stderr.splitlines()
    assert line.startswith(
        f"curi {command}: error: output_dir={out} (a sweep) is being written by another process "
        f"(pid {first.pid}, holding the lock {out / '.sweep.lock'})"
    )


@pytest.mark.slow  # run and reported in docs/benchmarks.md (CI time)
def test_the_curve_under_submitit_equals_the_basic_launcher(tiny_bank, tmp_path):
    from curi.jobs import Launcher
    from curi.oracles.curve import divergence_curve, write_curve

    opts = {"mcd": {"validation": 0.0}, "step": 0.5, "seeds": [0], "episodes": 30}
    opts.update(paper_splits=False, workers=1, progress=False)
    launchers = {
        "basic": Launcher(threads=1),
        "local": Launcher("submitit_local", {"cpus_per_task": 1}, folder=tmp_path),
    }
    timings = ("seconds", "stage_seconds")
    rows = {}
    for name, launcher in launchers.items():
        result = divergence_curve(tiny_bank, **opts, out_dir=tmp_path / name, launcher=launcher)
        rows[name] = [{k: v for k, v in r.items() if k not in timings} for r in result["rows"]]
        write_curve(result, tmp_path / name)
    assert rows["basic"] == rows["local"] and rows["basic"][0]["split"] == "mcd_max_s0"
    # a point that is missing: collect lists it, exit 1
    (tmp_path / "basic" / "points" / "mcd_max_s0.json").unlink()
    r = run_curi("curve", "collect", f"output_dir={tmp_path / 'basic'}", cwd=tmp_path)
    assert r.returncode == 1 and "points failed or are missing: mcd_max_s0" in r.stderr


def test_multirun_with_a_job_command_is_refused(tmp_path):
    for command in ("baselines", "curve"):
        r = run_curi(command, "-m", "bank=tiny", cwd=tmp_path)
        assert r.returncode == 2
        assert r.stderr.strip().endswith(
            "runs its own jobs: choose where with hydra/launcher=NAME, without -m"
        )


def test_a_launcher_option_the_launcher_lacks_is_one_line(tmp_path):
    r = run_curi(
        "baselines", "hydra/launcher=submitit_local", "hydra.launcher.partition=gpu", cwd=tmp_path
    )
    assert r.returncode == 2 and r.stderr.startswith(
        "curi baselines: error: hydra/launcher=submitit_local has no options ['partition']; "
        "valid: cpus_per_task"
    )
    r = run_curi("curve", "+hydra.launcher.ray.init.num_cpus=2", cwd=tmp_path)  # no ray chosen
    assert r.returncode == 2 and "hydra/launcher=basic has no options ['ray']" in r.stderr


@pytest.mark.slow
def test_ray_writes_the_basic_launchers_table(tiny_bank_dir, tmp_path):
    pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    basic, ray = tmp_path / "basic", tmp_path / "ray"
    assert _sweep(tmp_path, tiny_bank_dir, basic).returncode == 0
    r = _sweep(
        tmp_path,
        tiny_bank_dir,
        ray,
        "hydra/launcher=ray",
        "+hydra.launcher.ray.init.num_cpus=2",
        f"+hydra.launcher.ray.init._temp_dir={temp}",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert _rows(basic)[:2] == _rows(ray)[:2]

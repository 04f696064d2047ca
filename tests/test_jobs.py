"""Tests of `curi.jobs`: every job comes back (done with its value, or failed with its error) in
the jobs' order, under the basic launcher and submitit's local processes (Ray: slow, below);
torch threads are pinned per job; bad launcher settings end in one line naming what to fix.

Job functions are the standard library's and torch's own (picklable by reference in any
process), so the jobs run the same code in this process and in submitit's workers."""

from __future__ import annotations

import dataclasses
import operator
import os
import shutil
import tempfile

import pytest
import torch

import curi.jobs as jobs_mod
from curi.errors import ConfigError, OptionError
from curi.jobs import Job, Launcher, call, check_installed, check_launcher, run_jobs

JOBS = [
    Job("pow", operator.pow, (3, 4)),
    Job("zero", operator.truediv, (1, 0)),
    Job("threads", torch.get_num_threads),
    Job("pid", os.getpid),
]


def _check(out, launcher_threads):
    assert [o.name for o in out] == ["pow", "zero", "threads", "pid"]
    assert [o.status for o in out] == ["done", "failed", "done", "done"]
    assert out[0].value == 81 and out[0].ok and not out[1].ok
    assert out[1].error == "ZeroDivisionError: division by zero" and out[1].value is None
    assert "ZeroDivisionError" in out[1].detail
    assert out[2].value == launcher_threads


def test_basic_runs_in_this_process_reports_failures_and_restores_threads():
    before = torch.get_num_threads()
    out = run_jobs(JOBS, Launcher("basic", threads=1), progress=False)
    _check(out, 1)
    assert out[3].value == os.getpid() and torch.get_num_threads() == before
    # threads=None: torch's default is left alone
    assert run_jobs(JOBS[2:3], Launcher(), progress=False)[0].value == before


def test_submitit_local_runs_each_job_in_its_own_process(tmp_path):
    launcher = Launcher("submitit_local", {"cpus_per_task": 1}, folder=tmp_path)
    out = run_jobs(JOBS, launcher, progress=False)
    _check(out, 1)  # threads follow cpus_per_task
    assert out[3].value != os.getpid()
    logs = list((tmp_path / ".submitit").glob("*/*_log.err"))
    assert len(logs) == len(JOBS)  # the engine's logs under the folder given
    assert not (tmp_path / ".submitit" / "%j").exists()  # submitit's empty pattern folder


def test_launcher_settings_are_checked_in_one_line(monkeypatch):
    with pytest.raises(OptionError, match="^hydra/launcher must be one of basic, .*, got 'nope'"):
        Launcher("nope")
    with pytest.raises(ConfigError, match=r"has no options \['partition'\]; valid: cpus_per"):
        Launcher("submitit_local", {"partition": "gpu"})
    with pytest.raises(ConfigError, match="needs a partition: hydra.launcher.partition"):
        Launcher("submitit_slurm", {"timeout_min": 60})
    with pytest.raises(ConfigError, match="wait=false needs hydra/launcher=submitit_slurm"):
        Launcher("submitit_local", wait=False)
    with pytest.raises(ConfigError, match="threads must be a positive integer"):
        Launcher(threads=0)
    with pytest.raises(ConfigError, match="job names must differ"):
        run_jobs([JOBS[0], JOBS[0]], Launcher(), progress=False)
    monkeypatch.setattr(jobs_mod, "_importable", lambda m: m != "ray")
    with pytest.raises(
        ConfigError,
        match=r"hydra/launcher=ray is not installed \(ray missing\): "
        r'pip install "curi\[ray\]"',
    ):
        check_installed("ray")
    check_installed("submitit_local")


def test_check_launcher_is_the_one_place_of_the_rules(monkeypatch):
    """`Launcher`, `run_jobs`, `curi.core_cli.job_launcher` and the command line all check a
    launcher with `check_launcher`: with option names alone (the command line, before Hydra
    composes their values) the partition waits for its value; the engine is checked unless
    `installed=False` (a `Launcher` is described before it runs)."""
    check_launcher("submitit_slurm", {"timeout_min"})  # names only: the partition comes later
    with pytest.raises(ConfigError, match="needs a partition: hydra.launcher.partition"):
        check_launcher("submitit_slurm", {"timeout_min": 60})
    with pytest.raises(ConfigError, match=r"has no options \['partition'\]; valid: cpus_per"):
        check_launcher("submitit_local", {"partition"})
    with pytest.raises(ConfigError, match="threads must be a positive integer"):
        check_launcher("basic", threads=True)
    monkeypatch.setattr(jobs_mod, "_importable", lambda m: m != "ray")
    check_launcher("ray", {"ray": {}}, installed=False)
    launcher = Launcher("ray", {"ray": {}})
    for check in (lambda: check_launcher("ray"), lambda: run_jobs(JOBS[:1], launcher)):
        with pytest.raises(ConfigError, match="hydra/launcher=ray is not installed"):
            check()


@pytest.mark.parametrize(
    ("key", "value", "low"),
    [
        ("cpus_per_task", -2, 1),
        ("cpus_per_task", 0, 1),
        ("tasks_per_node", 0, 1),
        ("nodes", 0, 1),
        ("gpus_per_node", -1, 0),
        ("cpus_per_task", 1.5, 1),
        ("cpus_per_task", "2", 1),
    ],
)
def test_a_count_no_job_can_run_with_is_refused(key, value, low):
    """`hydra.launcher.cpus_per_task=-2` ran the job. Zero GPUs is a CPU job, as in
    submitit's own default; no CPU, task or node is nothing."""
    for name in ("submitit_local", "submitit_slurm"):
        options = {key: value, "partition": "p"} if name == "submitit_slurm" else {key: value}
        with pytest.raises(ConfigError, match=rf"^hydra.launcher.{key} must be an integer in "):
            check_launcher(name, options)
        assert f"[{low}, inf]" in str(pytest.raises(ConfigError, Launcher, name, options).value)
    Launcher("submitit_local", {key: low})  # the least is fine
    Launcher("submitit_local", {"gpus_per_node": None, "cpus_per_task": None})  # unset


def test_a_bad_count_on_the_command_line_is_one_line_before_any_folder(tiny_bank_dir, tmp_path):
    from conftest import run_curi

    out = tmp_path / "sweep"
    args = ["baselines", "bank=tiny", "train=tiny", f"data_dir={tiny_bank_dir.parent}"]
    args += ["hydra/launcher=submitit_local", "hydra.launcher.cpus_per_task=-2"]
    r = run_curi(*args, f"output_dir={out}", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "curi baselines: error: hydra.launcher.cpus_per_task must be an integer in [1, inf], got -2"
    ], r.stderr[-3000:]
    assert not out.exists()


def test_submitits_options_are_the_plugins_own():
    """The option names come from the installed plugin's config: every field of its SLURM
    config is accepted (and no other), so a name the plugin lacks (`srun_args`, in curi's old
    hand-copied list) is refused before submitit sees it."""
    from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf

    for name, conf in (("submitit_local", LocalQueueConf), ("submitit_slurm", SlurmQueueConf)):
        options = dict.fromkeys({f.name for f in dataclasses.fields(conf)} - {"_target_"})
        if name == "submitit_slurm":
            options["partition"] = "gpu"
        Launcher(name, options)
    with pytest.raises(ConfigError, match=r"has no options \['srun_args'\]"):
        Launcher("submitit_slurm", {"partition": "gpu", "srun_args": ["-v"]})


def test_a_requeued_job_is_the_same_call():
    """submitit requeues a preempted job through its `checkpoint` method (found by name):
    the same callable, which runs the job again."""
    from submitit.helpers import DelayedSubmission

    fn = jobs_mod._Requeueable(JOBS[0], None)
    again = fn.checkpoint()
    assert isinstance(again, DelayedSubmission) and again.function is fn
    assert again.result() == call(JOBS[0], None)


def test_a_slurm_launcher_without_slurm_says_so_before_any_job(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun / sbatch here
    launcher = Launcher("submitit_slurm", {"partition": "gpu"}, folder=tmp_path)
    with pytest.raises(ConfigError, match="hydra/launcher=submitit_slurm: "):
        run_jobs(JOBS[:1], launcher, progress=False)


def test_a_ray_address_nothing_answers_at_is_one_line(monkeypatch):
    monkeypatch.setattr(jobs_mod, "_importable", lambda m: True)  # checked before Ray imports
    launcher = Launcher("ray", {"ray": {"init": {"address": "127.0.0.1:1"}}})
    with pytest.raises(ConfigError, match="Ray is not reachable at 127.0.0.1:1"):
        run_jobs(JOBS[:1], launcher, progress=False)


@pytest.mark.slow
def test_ray_runs_jobs_on_a_local_instance():
    pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    init = {"num_cpus": 2, "_temp_dir": temp}
    out = run_jobs(JOBS, Launcher("ray", {"ray": {"init": init}}), progress=False)
    _check(out, 1)  # threads follow remote.num_cpus (1 unless set)
    assert out[3].value != os.getpid()
    shutil.rmtree(temp, ignore_errors=True)


def test_a_sweep_runs_each_job_with_one_thread_unless_told():
    # the same table under every launcher: basic left torch's default, submitit gave cpus
    assert Launcher().for_sweep().job_threads() == 1
    assert Launcher("submitit_local", {"cpus_per_task": 2}).for_sweep().job_threads() == 1
    assert Launcher("ray", {"ray": {"remote": {"num_cpus": 4}}}).for_sweep().job_threads() == 1
    assert Launcher(threads=3).for_sweep().job_threads() == 3

"""Independent jobs run where the user chose: one after another in this process (``basic``), in
local processes or on SLURM through submitit (``submitit_local``, ``submitit_slurm``), or on a
Ray cluster (``ray``). The engines do the scheduling; this module only hands them the jobs and
brings back what each returned or why it failed (docs/cluster.md).

A job is a picklable call (a module-level function and its arguments). The work that calls this
module makes its jobs idempotent, resumable and self-describing (each writes its own folder
with its config and result), so a finished job is skipped by the next invocation and a killed
one goes on from its checkpoint; `run_jobs` never drops a job: every job comes back as an
`Outcome`, done, failed (with the error) or submitted (SLURM without waiting).

The commands choose the launcher as Hydra users do, ``hydra/launcher=NAME`` with the options
of Hydra's launcher plugins (``hydra.launcher.cpus_per_task=2``, ``hydra.launcher.partition=X``,
``hydra.launcher.ray.init.num_cpus=2``); `curi.core_cli.job_launcher` turns that config into a
`Launcher`. Submitit and Ray are extras (``curi[slurm]``, ``curi[ray]``), imported only here
and only when their launcher runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
import re
import signal
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from curi.atomic import exclusive, remove
from curi.errors import ConfigError
from curi.validate import choice, integer

__all__ = [
    "LAUNCHERS",
    "Job",
    "Launcher",
    "Outcome",
    "check_installed",
    "check_launcher",
    "check_options",
    "run_jobs",
    "sweep_lock",
]

log = logging.getLogger("curi")

#: Launcher name -> (the extra that installs it, the modules it needs).
LAUNCHERS = {
    "basic": (None, ()),
    "submitit_local": ("slurm", ("submitit", "hydra_plugins.hydra_submitit_launcher")),
    "submitit_slurm": ("slurm", ("submitit", "hydra_plugins.hydra_submitit_launcher")),
    "ray": ("ray", ("ray", "hydra_plugins.hydra_ray_launcher")),
}

_RAY = {"ray"}


@dataclasses.dataclass(frozen=True)
class Job:
    """One independent call: ``fn(*args, **kwargs)`` with a module-level `fn` (it is pickled to
    other processes) and a `name` unique in its list (logs, the table)."""

    name: str
    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What became of a job: ``status`` ``done`` (with its ``value``), ``failed`` (``error``:
    the exception's last line; ``detail``: the traceback or the engine's report) or
    ``submitted`` (queued on SLURM, not waited for; ``job_id``)."""

    name: str
    status: str
    value: Any = None
    error: str | None = None
    detail: str | None = None
    job_id: str | None = None
    seconds: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "done"


@dataclasses.dataclass(frozen=True)
class Launcher:
    """Where jobs run.

    Attributes:
        name: a key of `LAUNCHERS`.
        options: the launcher's options, as Hydra's plugin config holds them (without
            ``_target_``): submitit's ``cpus_per_task``, ``timeout_min``, ``partition``, ...;
            Ray's ``ray: {init: {...}, remote: {...}}``.
        folder: where the engine keeps its logs and pickles (submitit: ``<folder>/%j``).
        threads: torch threads of each job; None: the cores the launcher gives a job
            (submitit ``cpus_per_task``, Ray ``remote.num_cpus``, 1 when unset; ``basic``:
            torch's default). Fixed threads make the numbers the same under every launcher;
            the sweeps fix them (`for_sweep`).
        wait: wait for the jobs (False: submit to SLURM and return; collect later).
    """

    name: str = "basic"
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    folder: Path | None = None
    threads: int | None = None
    wait: bool = True

    def __post_init__(self) -> None:
        # its engine is checked when it runs (`run_jobs`): a launcher may be described where
        # the engine is not installed
        check_launcher(
            self.name, self.options, threads=self.threads, wait=self.wait, installed=False
        )

    @property
    def in_process(self) -> bool:
        """Whether the jobs run in this process (progress bars and logs show here)."""
        return self.name == "basic"

    def for_sweep(self) -> Launcher:
        """This launcher with one torch thread per job unless `threads` is set: the thread
        count changes the order of torch's reductions, hence a run's numbers, so a sweep pins
        it and the same command gives the same table under every launcher."""
        return self if self.threads is not None else dataclasses.replace(self, threads=1)

    def job_threads(self) -> int | None:
        """The torch threads each job sets (None: leave torch's default)."""
        if self.threads is not None:
            return self.threads
        if self.name.startswith("submitit"):
            return int(self.options.get("cpus_per_task") or 1)
        if self.name == "ray":
            remote = dict(dict(self.options.get("ray") or {}).get("remote") or {})
            return max(1, int(remote.get("num_cpus", 1)))
        return None


def sweep_lock(out_dir: str | Path) -> contextlib.AbstractContextManager:
    """The lock of a sweep's folder (``<out_dir>/.sweep.lock``, `curi.atomic.exclusive`), held
    by the command that plans, runs and collects its jobs: a second command on the folder
    fails at once in one line. Jobs lock what they write themselves (a training run its own
    folder, another file), so a job never waits for its command's lock.

    Raises:
        ConfigError: another process holds it (naming its pid).
    """
    return exclusive(
        Path(out_dir) / "sweep", what=f"output_dir={out_dir} (a sweep)", error=ConfigError
    )


def check_launcher(
    name: str,
    options: Mapping[str, Any] | Iterable[str] = (),
    *,
    threads: int | None = None,
    wait: bool = True,
    installed: bool = True,
) -> None:
    """Refuse a launcher and its settings: every rule of a launcher, in this one place, which
    `Launcher` (its own settings), `run_jobs` (before any job), `curi.core_cli.job_launcher`
    and the command line (`curi.cli`, before Hydra runs and torch is imported) all call.

    In this order: `name` is a key of `LAUNCHERS`; with `installed`, its engine is installed
    (`check_installed`); every option is one the launcher has (`check_options`); with the
    options' values (a mapping), submitit's counts are ones a job can run with (at least one
    CPU per task, task per node and node; no negative GPUs) and ``submitit_slurm`` has a
    ``partition``; `threads` is null or a positive integer; and ``wait=false`` is for
    ``submitit_slurm`` alone. `options` may be the option names alone, all the command line
    knows before Hydra composes the config: the value rules then wait for the values
    (`Launcher`, which `curi.core_cli.job_launcher` makes in the command's check, before
    Hydra runs).

    Raises:
        OptionError: an unknown launcher (a `ConfigError`).
        ConfigError: a launcher not installed, an unknown option, a count no job can run
            with, no SLURM partition, bad `threads`, ``wait=false`` with another launcher.
    """
    if installed:
        check_installed(name)  # a known name too
    else:
        choice(name, "hydra/launcher", LAUNCHERS)
    check_options(name, options)
    if isinstance(options, Mapping) and name.startswith("submitit_"):
        # what a job gets: at least one CPU, task and node; zero GPUs is a CPU job (submitit's
        # own default), fewer is nothing (cpus_per_task=-2 ran the job)
        for key, low in (("cpus_per_task", 1), ("tasks_per_node", 1), ("nodes", 1)):
            if options.get(key) is not None:
                integer(options[key], f"hydra.launcher.{key}", low=low)
        if options.get("gpus_per_node") is not None:
            integer(options["gpus_per_node"], "hydra.launcher.gpus_per_node", low=0)
    if name == "submitit_slurm" and isinstance(options, Mapping) and not options.get("partition"):
        raise ConfigError(
            "hydra/launcher=submitit_slurm needs a partition: hydra.launcher.partition=NAME"
        )
    if threads is not None and (isinstance(threads, bool) or threads < 1):
        raise ConfigError(f"threads must be a positive integer or null, got {threads!r}")
    if not wait and name != "submitit_slurm":
        raise ConfigError(f"wait=false needs hydra/launcher=submitit_slurm, not {name}")


def check_options(name: str, keys) -> None:
    """Refuse options `keys` (names of ``hydra.launcher.*``) that launcher `name` lacks.

    Raises:
        ConfigError: ``hydra/launcher=submitit_local has no options ['partition']; valid: ...``.
    """
    known = (
        _submitit_options(name.removeprefix("submitit_"))
        if name.startswith("submitit_")
        else _RAY
        if name == "ray"
        else set()
    )
    unknown = sorted(set(keys) - known)
    if unknown:
        valid = ", ".join(sorted(known)) or "none"
        raise ConfigError(f"hydra/launcher={name} has no options {unknown}; valid: {valid}")


def _submitit_options(cluster: str) -> set[str]:
    """The option names of Hydra's submitit plugin for executor `cluster` (``local`` or
    ``slurm``), read from the plugin's own config classes: the shared ones (`BaseQueueConf`)
    reach submitit as they are, SLURM's others with a ``slurm_`` prefix, as the plugin passes
    them."""
    from hydra_plugins.hydra_submitit_launcher import config

    conf = config.SlurmQueueConf if cluster == "slurm" else config.BaseQueueConf
    return {f.name for f in dataclasses.fields(conf)} - {"_target_"}


def check_installed(name: str) -> None:
    """Refuse a launcher whose engine is not installed, naming the extra that installs it.

    Raises:
        ConfigError: ``hydra/launcher=ray needs Ray: pip install "curi[ray]"``.
    """
    choice(name, "hydra/launcher", LAUNCHERS)
    extra, modules = LAUNCHERS[name]
    missing = [m for m in modules if not _importable(m)]
    if missing:
        raise ConfigError(
            f"hydra/launcher={name} is not installed ({', '.join(missing)} missing): "
            f'pip install "curi[{extra}]"'
        )


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def call(job: Job, threads: int | None):
    """Run `job` with `threads` torch threads (the body of every job, in whatever process)."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    return job.fn(*job.args, **dict(job.kwargs))


def run_jobs(jobs: Sequence[Job], launcher: Launcher, *, progress: bool = True) -> list[Outcome]:
    """Run `jobs` with `launcher`; one `Outcome` per job, in the jobs' order.

    A job that raises is reported as failed with its error; the others still run. An error of
    the launcher itself (Ray not reachable, submitit refusing an option) raises before any job
    starts where it can be known before.

    Raises:
        ConfigError: duplicate job names, a launcher not installed or not reachable.
    """
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ConfigError(f"job names must differ: {names}")
    if not jobs:
        return []
    check_launcher(  # its settings again, now with its engine
        launcher.name, launcher.options, threads=launcher.threads, wait=launcher.wait
    )
    run = {"basic": _basic, "ray": _ray}.get(launcher.name, _submitit)
    return run(list(jobs), launcher, progress)


def _failed(job: Job, e: BaseException, t0: float, detail: str | None = None) -> Outcome:
    """A failed job's outcome: its error is the last exception line of the traceback (a
    submitit report holds the job's traceback), else the error's first line."""
    lines = str(e).strip().splitlines() or [type(e).__name__]
    raised = [x for x in lines if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", x)]
    if raised:
        error = raised[-1]
    else:
        error = f"{type(e).__name__}: {lines[0]}" if lines[0] != type(e).__name__ else lines[0]
    return Outcome(
        job.name,
        "failed",
        error=error,
        detail=detail or "".join(traceback.format_exception(e)),
        seconds=round(time.perf_counter() - t0, 2),
    )


def _report(i: int, n: int, out: Outcome) -> Outcome:
    if out.ok:
        log.info("job %d/%d %s: done (%.1f s)", i, n, out.name, out.seconds or 0)
    elif out.status == "failed":
        log.error("job %d/%d %s: failed: %s", i, n, out.name, out.error)
    return out


def _basic(jobs: list[Job], launcher: Launcher, progress: bool) -> list[Outcome]:
    """One after another in this process (torch's threads restored afterwards)."""
    import torch

    threads, before = launcher.job_threads(), torch.get_num_threads()
    out = []
    try:
        for i, job in enumerate(jobs, 1):
            t0 = time.perf_counter()
            try:
                value = call(job, threads)
            except Exception as e:  # a failed job is reported, the others still run
                out.append(_report(i, len(jobs), _failed(job, e, t0)))
                continue
            done = Outcome(job.name, "done", value, seconds=round(time.perf_counter() - t0, 2))
            out.append(_report(i, len(jobs), done))
    finally:
        torch.set_num_threads(before)
    return out


def _submitit(jobs: list[Job], launcher: Launcher, progress: bool) -> list[Outcome]:
    """Through submitit: local processes (at most cores / cpus_per_task at once) or a SLURM job
    array. Each job is checkpointable: a SLURM job preempted or timed out is requeued
    (``max_num_timeout`` times) and, being resumable, goes on from its checkpoint."""
    import submitit

    cluster = launcher.name.removeprefix("submitit_")
    opts = dict(launcher.options)
    folder = opts.pop("submitit_folder", None) or str(
        Path(launcher.folder or ".") / ".submitit" / "%j"
    )
    init = {}
    if "max_num_timeout" in opts:
        init[f"{cluster}_max_num_timeout"] = opts.pop("max_num_timeout")
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster=cluster, **init)
        shared = _submitit_options("local")
        params = {k if k in shared else f"slurm_{k}": v for k, v in opts.items()}
        params = {k: v for k, v in params.items() if v is not None}
        executor.update_parameters(**params)
    except (RuntimeError, ValueError, TypeError) as e:  # e.g. "Could not detect srun"
        raise ConfigError(f"hydra/launcher={launcher.name}: {e}") from e
    threads = launcher.job_threads()
    fns = [_Requeueable(job, threads) for job in jobs]
    if cluster == "slurm":
        with executor.batch():
            submitted = [executor.submit(f) for f in fns]
        if not launcher.wait:
            out = [
                Outcome(j.name, "submitted", job_id=s.job_id)
                for j, s in zip(jobs, submitted, strict=True)
            ]
            log.info("submitted %d jobs to SLURM (%s ...)", len(out), out[0].job_id)
            return out
        return _gather(jobs, submitted, progress)
    # local: no more processes at once than the cores allow
    width = max(1, (os.cpu_count() or 1) // int(opts.get("cpus_per_task") or 1))
    out = _gather(jobs, _windowed(executor, fns, width, progress), False)
    pattern = Path(folder)
    if "%j" in folder and pattern.is_dir() and not any(pattern.iterdir()):
        remove(pattern, root=pattern.parent)  # submitit leaves an empty folder of that name
    return out


class _Requeueable:
    """A job that SLURM may stop and requeue: on preemption or timeout submitit calls its
    `checkpoint` (found by name), which submits the same call again. The job saves its own
    progress (a training run its checkpoints, an export its finished parts), so the new
    attempt goes on from there."""

    def __init__(self, job: Job, threads: int | None) -> None:
        self.job, self.threads = job, threads

    def __call__(self):
        # submitit's job process ignores SIGTERM (it waits for SLURM's own signal); a forked
        # worker of a process pool inherits that, so the pool's terminate (its `with` exit)
        # hung forever: processes forked by the job get the default handler back.
        os.register_at_fork(after_in_child=_default_sigterm)
        return call(self.job, self.threads)

    def checkpoint(self, *args, **kwargs):
        """The same call, to submit again (what `submitit.helpers.Checkpointable` does)."""
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _windowed(executor, fns: list, width: int, progress: bool) -> list:
    """Submit `fns` keeping at most `width` running; returns their submitit jobs, in order,
    once all have finished."""
    from tqdm import tqdm

    submitted: list = []
    finished = 0
    with tqdm(total=len(fns), desc="jobs", disable=not progress) as bar:
        while finished < len(fns):
            running = sum(not j.done() for j in submitted)
            bar.update(len(submitted) - running - finished)
            finished = len(submitted) - running
            if len(submitted) < len(fns) and running < width:
                submitted.append(executor.submit(fns[len(submitted)]))
            else:  # a job takes seconds at least: polling twice a second costs nothing
                time.sleep(0.5)
    return submitted


def _gather(jobs: list[Job], submitted: list, progress: bool) -> list[Outcome]:
    """The outcome of each submitit job, waiting for each in order."""
    from tqdm import tqdm

    out = []
    with tqdm(total=len(jobs), desc="jobs", disable=not progress) as bar:
        for i, (job, s) in enumerate(zip(jobs, submitted, strict=True), 1):
            t0 = time.perf_counter()
            try:
                value = s.result()
            except Exception as e:  # FailedJobError / UncompletedJobError: the job's traceback
                out.append(_report(i, len(jobs), _failed(job, e, t0, detail=str(e))))
            else:
                out.append(_report(i, len(jobs), Outcome(job.name, "done", value, job_id=s.job_id)))
            bar.update()
    return out


def _ray(jobs: list[Job], launcher: Launcher, progress: bool) -> list[Outcome]:
    """Through Ray: ``ray.init(**init)`` (a local instance when ``address`` is null; its
    dashboard off unless asked), each job a ``ray.remote(**remote)`` task."""
    conf = dict(launcher.options.get("ray") or {})
    init = {k: v for k, v in dict(conf.get("init") or {}).items() if v is not None}
    remote = {"num_cpus": 1, **dict(conf.get("remote") or {})}
    if init.get("address") not in (None, "auto", "local"):
        _check_reachable(str(init["address"]))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local instance needs no token
    import ray

    started = not ray.is_initialized()
    if started:
        if "address" not in init:
            init.setdefault("include_dashboard", False)
        init.setdefault("log_to_driver", False)
        init.setdefault("logging_level", logging.WARNING)
        try:
            ray.init(**init)
        except (OSError, RuntimeError, ValueError, TypeError) as e:
            where = init.get("address") or "a local instance"
            raise ConfigError(
                f"hydra/launcher=ray: could not start or reach Ray ({where}): {e}"
            ) from e
    try:
        task = ray.remote(**remote)(call)
        refs = [task.remote(job, launcher.job_threads()) for job in jobs]
        out = []
        for i, (job, ref) in enumerate(zip(jobs, refs, strict=True), 1):
            t0 = time.perf_counter()
            try:
                out.append(_report(i, len(jobs), Outcome(job.name, "done", ray.get(ref))))
            except Exception as e:  # RayTaskError wraps the job's own exception
                cause = getattr(e, "cause", None) or e
                out.append(_report(i, len(jobs), _failed(job, cause, t0, detail=str(e))))
        return out
    finally:
        if started:
            ray.shutdown()


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse a Ray address (``host:port`` or ``ray://host:port``) nothing answers at: Ray
    itself would retry for minutes."""
    import socket

    host, _, port = address.split("://")[-1].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"hydra/launcher=ray: Ray is not reachable at {address} ({e}); start the cluster "
            "(ray start --head) or correct hydra.launcher.ray.init.address"
        ) from e

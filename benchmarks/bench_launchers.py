"""The launchers of `curi.jobs` on this machine: a four-run tiny `curi baselines` sweep (one
configuration x two splits x two seeds, run as the command a user types) under the basic
launcher (in this process, one run after another) and with two submitit_local workers (and
Ray's local instance with two CPUs when Ray is installed), wall seconds and the ratio to the
serial time; and each launcher's overhead per job, from a list of empty jobs.

    python benchmarks/bench_launchers.py [--steps 300] [--repeats 3] [--ray]

Every run uses one torch thread (threads=1), so each launcher computes the same numbers; the
basic launcher is also timed with torch's default threads (both cores for one run)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import machine

from curi import build_bank
from curi.jobs import Job, Launcher, run_jobs

SWEEP = [
    "bank=tiny",
    "train=tiny",
    "only=[schema-relation_net]",
    "splits=[concept_iid,counting]",
    "seeds=[0,1]",
    "episodes=200",
    "progress=false",
]


def sweep(data: Path, out: Path, steps: int, *extra: str) -> float:
    """Wall seconds of one sweep command into a fresh folder."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "curi", "baselines", *SWEEP, f"train.steps={steps}"]
    cmd += [f"data_dir={data}", f"output_dir={out}", *extra]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-3000:])
    return time.perf_counter() - t0


def overhead(launcher: Launcher, n: int = 8) -> float:
    """Seconds per empty job (wall / jobs; for the parallel launchers, the jobs side by side)."""
    t0 = time.perf_counter()
    out = run_jobs([Job(f"j{i}", os.getpid) for i in range(n)], launcher, progress=False)
    assert all(o.ok for o in out)
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ray", action="store_true", help="also time Ray (needs curi[ray])")
    ap.add_argument(
        "--one-thread-only", action="store_true", help="skip basic with torch's default threads"
    )
    args = ap.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(prefix="bl", dir="/tmp") as tmp:
        tmp = Path(tmp)
        build_bank("tiny", tmp / "data", progress=False)
        settings = {
            "basic, torch's threads": [],
            "basic, threads=1": ["threads=1"],
            "submitit_local, 2 workers": ["threads=1", "hydra/launcher=submitit_local"],
        }
        if args.one_thread_only:
            del settings["basic, torch's threads"]
        if args.ray:
            settings["ray, 2 CPUs"] = [
                "threads=1",
                "hydra/launcher=ray",
                "+hydra.launcher.ray.init.num_cpus=2",
                f"+hydra.launcher.ray.init._temp_dir={tmp}/ray",
            ]
        times: dict[str, list[float]] = {k: [] for k in settings}
        for _ in range(args.repeats):
            for name, extra in settings.items():
                times[name].append(sweep(tmp / "data", tmp / "out", args.steps, *extra))
        serial = statistics.median(times["basic, threads=1"])
        print(f"four-run tiny sweep, {args.steps} steps a run, median of {args.repeats}:")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"  {name:<28} {med:7.1f} s   ratio to basic threads=1: {med / serial:.2f}")
        launchers = {
            "basic": Launcher(threads=1),
            "submitit_local": Launcher("submitit_local", {"cpus_per_task": 1}, folder=tmp),
        }
        if args.ray:
            init = {"num_cpus": 2, "_temp_dir": f"{tmp}/ray"}
            launchers["ray"] = Launcher("ray", {"ray": {"init": init}})
        print("overhead per empty job (8 jobs; parallel launchers run 2 at once):")
        for name, launcher in launchers.items():
            per = statistics.median(overhead(launcher) for _ in range(args.repeats))
            print(f"  {name:<16} {per:6.2f} s")


if __name__ == "__main__":
    main()

"""The README's main job as a user runs it: `curi gap` in an empty working folder with a new,
empty data folder (``CURI_DATA_DIR``), so the default bank is built first; each run's wall
seconds, CPU seconds (user + sys of the whole process tree), peak memory of its largest
process, the CPU time the hypervisor stole meanwhile (``/proc/stat``), its stage seconds
(``stage_seconds`` of gap.json, summed over rows) and whether its rows equal
docs/results/gap_default.json in every value but the timings. With ``--before``, another
installation's ``curi`` (say a virtual environment of the commit before a change) is run in
turn with this one, A B A B, and the ratio of their medians is reported.

    python benchmarks/bench_main_job.py [--runs 2] [--before /path/to/venv/bin/curi]
                                        [--args bank=tiny episodes.test=200]  # a quick check

The first run of an installation also compiles its numba loops (their cache is written beside
the modules), so this code runs once untimed first, unless ``--no-warm-up``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import machine, write_section

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "results" / "gap_default.json"
TIMINGS = {"seconds", "stage_seconds"}


def run(curi: str, args: list[str], tmp: Path) -> dict:
    """One main job by the `curi` executable, from a new data folder under `tmp`."""
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "data").mkdir(parents=True)
    (tmp / "work").mkdir()
    env = {**os.environ, "CURI_DATA_DIR": str(tmp / "data")}
    cmd = [curi, "gap", f"output_dir={tmp / 'out'}", "progress=false", *args]
    steal, start = _steal(), time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tmp / "work", env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status:
        sys.exit(f"{' '.join(cmd)} failed ({status})")
    rows = json.loads((tmp / "out" / "gap.json").read_text())
    stages: dict[str, float] = {}
    for row in rows:
        for k, v in row["stage_seconds"].items():
            stages[k] = stages.get(k, 0.0) + v
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "peak_mib": usage.ru_maxrss / 1024,
        "steal": _steal() - steal,
        "stages": stages,
        "equal": None if args else _strip(rows) == _strip(json.loads(REFERENCE.read_text())),
    }


def _strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]


def _steal() -> float:
    """Seconds of CPU time stolen from this machine so far (all cores)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=2, help="timed runs of each installation")
    ap.add_argument("--before", help="the `curi` executable of the code to compare with")
    ap.add_argument("--args", nargs="*", default=[], help="overrides (then nothing is written)")
    ap.add_argument("--no-warm-up", action="store_true", help="time the first runs too")
    opts = ap.parse_args()
    this = shutil.which("curi") or sys.exit("no `curi` on the path")
    codes = {"this": this, **({"before": opts.before} if opts.before else {})}
    results: dict[str, list[dict]] = {k: [] for k in codes}
    with tempfile.TemporaryDirectory() as tmp:
        if not opts.no_warm_up:  # this code's loops compiled and cached
            print(f"warm-up: {run(this, opts.args, Path(tmp) / 'job')['wall']:.1f} s")
        for i in range(opts.runs):
            for name, curi in codes.items():  # A B A B
                got = run(curi, opts.args, Path(tmp) / "job")
                results[name].append(got)
                print(f"{name} run {i + 1}: {got['wall']:.1f} s wall, steal {got['steal']:.1f} s")
    body = _report(codes, results, opts)
    if opts.args:
        print(body)
    else:
        write_section("main-job", body)


def _report(codes: dict, results: dict, opts) -> str:
    warm = "" if opts.no_warm_up else ", after one untimed run of this code"
    lines = [
        f"Machine: {machine()}. `curi gap` from a new data folder (bank build included), "
        f"{opts.runs} timed run(s) of each, interleaved{warm}.",
        "",
        "| code | wall s (median) | min / max | CPU s (median) | peak MiB | stolen s | equal |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, curi in codes.items():
        r = results[name]
        wall = [x["wall"] for x in r]
        equal = "not compared" if opts.args else all(x["equal"] for x in r)
        lines.append(
            f"| {name} (`{curi}`) | {statistics.median(wall):.1f} | {min(wall):.1f} / "
            f"{max(wall):.1f} | {statistics.median(x['cpu'] for x in r):.1f} | "
            f"{max(x['peak_mib'] for x in r):.0f} | {max(x['steal'] for x in r):.1f} | {equal} |"
        )
    if "before" in codes:
        ratio = statistics.median(x["wall"] for x in results["before"]) / statistics.median(
            x["wall"] for x in results["this"]
        )
        lines += ["", f"This code is **{ratio:.2f}x** as fast as the other (median wall)."]
    lines += ["", "Stage seconds of the rows (summed over rows and workers, median run):", ""]
    names = sorted({k for r in results.values() for x in r for k in x["stages"]})
    lines += ["| code | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for name, r in results.items():
        cells = [f"{statistics.median(x['stages'].get(k, 0) for x in r):.1f}" for k in names]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""How fast the command line says no: every kind of refusal that needs only the config and the
file system (one per command at least: a bad value, a missing or wrong input, an output place
that is a file or cannot be written, a missing bank), and every usage message, each run as a
user runs it (a fresh `curi` process), timed to its exit: wall seconds (median of `--repeats`),
peak memory, and whether it left anything in the working folder. Targets: a refusal in at most
2 s on a quiet machine (5 s on a shared one), a usage message in under 2 s (3 s).

    python benchmarks/bench_refusals.py [--repeats 3] [--before OLD_CHECKOUT [--before-repeats 1]]
                                        [--dry-run]

The data folder is ``$CURI_DATA_DIR`` when set (the banks a user has built), else an empty
one. ``--before`` also times another checkout of curi (say a worktree of the commit before a
change) with this interpreter, after this one, and puts its times beside: its source folders
are laid out as the installed package in a temporary folder put first on the path. The
machine's load average before and after each is reported with the times.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _report import machine, write_section

from curi.presets import conf_dir

MISSING = "/nonexistent/curi"
LIMIT = 60  # seconds a command may run before it is stopped


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """(what is refused, the command line) of every timed refusal; inputs made under `tmp`."""
    a_file, fifo, locked = tmp / "a_file", tmp / "fifo.jsonl", tmp / "locked"
    a_file.write_text("x")
    if not fifo.exists():
        os.mkfifo(fifo)
    locked.mkdir(exist_ok=True)
    lock(locked, True)
    no_data = f"data_dir={tmp / 'no_data'}"
    return [
        ("a misspelt command", ["bnak"]),
        ("a misspelt key", ["gap", "splts=[counting]"]),
        ("an unknown key of a group", ["train", "train=tiny", "train.nosuch=1"]),
        ("a value out of range", ["train", "train.batch_size=-4"]),
        ("a rule option out of range", ["rules", "theta=2"]),
        ("an unknown split", ["gap", "splits=[nosuch]"]),
        ("an unknown split (audit)", ["audit", "splits=[nosuch]"]),
        ("a sweep's bad value", ["gap", "-m", "seed=0,-1"]),
        ("no bank in data_dir", ["gap", "bank=tiny", no_data]),
        ("data_dir empty", ["bank", "data_dir="]),
        ("data_dir a file", ["split", f"data_dir={a_file}"]),
        ("output_dir a file", ["gap", f"output_dir={a_file}"]),
        ("output_dir not writable", ["gap", f"output_dir={locked / 'gap'}"]),
        ("out a file (lm export)", ["lm", "export", f"out={a_file}"]),
        ("out not writable (lm export)", ["lm", "export", f"out={locked / 'lm'}"]),
        ("a missing tokenizer", ["lm", "export", f"out={tmp / 'lm'}", f"tokenizer={MISSING}"]),
        ("lm compare, missing folders", ["lm", "compare", f"tasks={MISSING}", "results=R"]),
        ("lm rules, bad theta", ["lm", "rules", f"out={tmp / 'r'}", "theta=2"]),
        ("episodes render without in=", ["episodes", "render"]),
        ("episodes render, missing in=", ["episodes", "render", f"in={MISSING}.jsonl", "out=o"]),
        ("episodes render, a FIFO as in=", ["episodes", "render", f"in={fifo}", "out=o"]),
        ("episodes render, out= a file", ["episodes", "render", "in=e.jsonl", f"out={a_file}"]),
        ("episodes, n=0", ["episodes", "n=0"]),
        ("show, scene=-1", ["show", "scene=-1"]),
        ("split, save= a folder", ["split", f"save={tmp}"]),
        ("score, missing files", ["score", f"tasks={MISSING}", "predictions=p"]),
        ("eval, missing checkpoint", ["eval", f"checkpoint={MISSING}"]),
        ("difficulty, missing checkpoint", ["difficulty", f"checkpoint={MISSING}"]),
        ("curve, step=0", ["curve", "step=0"]),
        ("curve collect, not a curve", ["curve", "collect", f"output_dir={tmp}"]),
        ("baselines, SLURM without partition", ["baselines", "hydra/launcher=submitit_slurm"]),
        ("baselines collect, not a sweep", ["baselines", "collect", f"output_dir={tmp}"]),
    ]


def lock(folder: Path, on: bool) -> None:
    """Make `folder` unwritable (`on`) or writable again: its mode, and for root, whom modes
    do not stop, the immutable attribute (chattr)."""
    if on:
        folder.chmod(0o555)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i" if on else "-i", str(folder)], check=False)
    if not on:
        folder.chmod(0o755)


def usages() -> list[tuple[str, list[str]]]:
    """(what, the command line) of every usage message: the list, `curi lm`, each --help."""
    names = sorted(p.stem for p in conf_dir().glob("*.yaml"))
    out = [("curi --help", ["--help"]), ("curi lm", ["lm"])]
    return out + [(f"curi {n.replace('_', ' ')} --help", [*n.split("_"), "--help"]) for n in names]


def _python_path(root: Path | None, tmp: Path) -> dict:
    """The environment that runs `root`'s curi (None: the installed one)."""
    if root is None:
        return dict(os.environ)
    pkg = tmp / "pkg" / "curi"
    pkg.mkdir(parents=True, exist_ok=True)
    for item in (root / "curi").iterdir():
        (pkg / item.name).unlink(missing_ok=True)
        (pkg / item.name).symlink_to(item)
    for layer in ("renderers", "oracles", "models", "conf"):  # installed as curi.<layer>
        (pkg / layer).unlink(missing_ok=True)
        (pkg / layer).symlink_to(root / layer)
    return {**os.environ, "PYTHONPATH": str(pkg.parent)}


def run(args: list[str], env: dict, cwd: Path) -> tuple[float, float, int | None, str]:
    """(wall seconds, peak MiB, exit status, first line of stderr) of ``curi *args``; the
    status is None where the command was stopped after LIMIT seconds (an older checkout
    runs the work before it refuses, e.g. the first job of a sweep)."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from curi.cli import main; main()", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: a stop reaches a sweep's jobs too
    )
    stop = threading.Timer(LIMIT, os.killpg, (proc.pid, signal.SIGKILL))
    stop.start()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    stopped = not stop.is_alive()
    stop.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    first = (err.strip().splitlines() or [""])[0]
    return wall, usage.ru_maxrss / 1024, None if stopped else proc.returncode, first


def time_all(rows, env: dict, repeats: int, tmp: Path) -> list[tuple]:
    out = []
    for what, args in rows:
        cwd = Path(tempfile.mkdtemp(dir=tmp))
        runs = [run(args, env, cwd) for _ in range(repeats)]
        wall = statistics.median(r[0] for r in runs)
        left = sorted(p.name for p in cwd.iterdir())
        out.append((what, args, wall, max(r[1] for r in runs), runs[0][2], runs[0][3], left))
    return out


def measure(root: Path | None, repeats: int) -> dict:
    """Every refusal and usage message of the checkout `root` (None: this one), timed."""
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env = _python_path(root, tmp)
        env.setdefault("CURI_DATA_DIR", str(tmp / "data"))  # set: the banks a user has
        before = os.getloadavg()[0]
        t0 = time.perf_counter()
        try:
            refused = time_all(cases(tmp), env, repeats, tmp)
            usage = time_all(usages(), env, repeats, tmp)
        finally:
            lock(tmp / "locked", False)
        spent, after = time.perf_counter() - t0, os.getloadavg()[0]
    return {
        "root": root,
        "repeats": repeats,
        "refused": refused,
        "usage": usage,
        "load": (before, after),
        "spent": spent,
    }


def _ok(row: tuple, refusals: bool) -> str:
    """Empty for the outcome a row should have (a refusal: exit 2 and a `curi` line), else
    what happened instead."""
    code, first = row[4], row[5]
    if code is None:
        return f"stopped after {LIMIT} s"
    ok = (code == 2 and first.startswith("curi")) if refusals else code == 0
    return "" if ok else f"exit {code}: {first[:70]!r}".replace("|", "\\|")  # a table cell


def table(rows: list[tuple], old: list[tuple] | None, refusals: bool) -> str:
    """One line per command: its wall time, peak memory and what it left in the working
    folder, with the older checkout's beside them when `old` is given."""
    if old is None:
        lines = ["| | command | wall (s) | peak (MiB) | left behind |", "|---|---|---|---|---|"]
    else:
        lines = [
            "| | command | wall (s) before -> after | peak (MiB) before -> after "
            "| before: left behind, outcome | after: left behind |",
            "|---|---|---|---|---|---|",
        ]
    for i, (what, args, wall, mib, _, _, left) in enumerate(rows):
        shown = "curi " + " ".join(a if len(a) < 40 else a[:37] + "..." for a in args)
        bad = _ok(rows[i], refusals)
        mark = f" (unexpected: {bad})" if bad else ""
        after = ", ".join(left) or "nothing"
        if old is None:
            lines.append(f"| {what}{mark} | `{shown}` | {wall:.2f} | {mib:.0f} | {after} |")
            continue
        o = old[i]
        then = ", ".join(o[6]) or "nothing"
        outcome = _ok(o, refusals) or ("refused, exit 2" if refusals else "exit 0")
        lines.append(
            f"| {what}{mark} | `{shown}` | {o[2]:.2f} -> {wall:.2f} | {o[3]:.0f} -> {mib:.0f} "
            f"| {then}; {outcome} | {after} |"
        )
    return "\n".join(lines)


def _summary(m: dict, label: str) -> str:
    walls = [r[2] for r in m["refused"]]
    usage = [r[2] for r in m["usage"]]
    return (
        f"{label}: load average {m['load'][0]:.1f} before, {m['load'][1]:.1f} after "
        f"({m['spent']:.0f} s in all), median of {m['repeats']} fresh process(es) each; "
        f"refusals median {statistics.median(walls):.2f} s, slowest {max(walls):.2f} s; "
        f"usage messages median {statistics.median(usage):.2f} s, slowest {max(usage):.2f} s."
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--before", type=Path, help="an older checkout of curi to time beside")
    p.add_argument("--before-repeats", type=int, default=1)
    p.add_argument("--dry-run", action="store_true", help="print, do not write the doc")
    a = p.parse_args()
    now = measure(None, a.repeats)
    old = measure(a.before, a.before_repeats) if a.before else None
    lines = [
        "## How fast the command line says no (benchmarks/bench_refusals.py)",
        "",
        f"{machine()}; `CURI_DATA_DIR` {os.environ.get('CURI_DATA_DIR', 'empty')}.",
        "",
        "- " + _summary(now, "This checkout"),
    ]
    if old:
        commit = subprocess.run(
            ["git", "-C", str(a.before), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        lines.append("- " + _summary(old, f"Before (commit {commit or a.before})"))
    lines += [
        "",
        table(now["refused"], old and old["refused"], True),
        "",
        table(now["usage"], old and old["usage"], False),
    ]
    body = "\n".join(lines)
    if a.dry_run:
        print(body)
    else:
        write_section("refusals", body)


if __name__ == "__main__":
    main()

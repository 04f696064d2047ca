"""Shared helpers of the benchmark scripts: the machine's description, medians, peak memory,
and rewriting one marked section of docs/benchmarks.md (or docs/fidelity.md)."""

from __future__ import annotations

import os
import platform
import re
import resource
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
FIDELITY = DOC.with_name("fidelity.md")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import numpy
    import torch

    return (
        f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM; Python {platform.python_version()}, "
        f"numpy {numpy.__version__}, torch {torch.__version__}"
    )


def git_commit(short: int | None = None) -> str | None:
    """The checkout's HEAD commit, abbreviated to at least `short` hex digits (git's default
    when None), or None where there is no git history (a copy of the tree)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short" if short is None else f"--short={short}", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def median_time(fn, repeats: int = 5) -> float:
    """Median wall time of `repeats` calls of fn (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def peak_rss_gib() -> float:
    """Peak resident memory of this process and of its largest finished child, in GiB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 2**20


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished child processes so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def write_section(name: str, body: str, doc: Path = DOC) -> None:
    """Replace (or append) the section between ``<!-- bench:name -->`` markers of `doc`."""
    doc.parent.mkdir(exist_ok=True)
    text = (
        doc.read_text()
        if doc.exists()
        else "# Benchmarks\n\nEvery number here is written by a script in `benchmarks/`.\n"
    )
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block + "\n"
    )
    doc.write_text(text)
    print(body)


def replace_block(doc: Path, mark: str, body: str) -> None:
    """Replace what stands between ``<!-- mark -->`` and ``<!-- /mark -->`` in `doc` with
    `body` (written atomically).

    Raises:
        ValueError: `doc` has no such block.
    """
    from curi.atomic import write_text

    text = doc.read_text()
    start, end = f"<!-- {mark} -->", f"<!-- /{mark} -->"
    if start not in text or end not in text:
        raise ValueError(f"{doc} has no {start} ... {end} block to replace")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    write_text(doc, f"{head}{start}\n{body}\n{end}{tail}")

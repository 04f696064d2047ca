"""Benchmark of the shortcut audit (`curi audit`): wall and CPU time of the audit of every
split for one kind of negatives, with the command's defaults (1,000 training and 1,000 test
episodes per split, 50 boosting iterations, one tree thread), on a built bank.

    python benchmarks/bench_audit.py --bank ~/.cache/curi/default [--repeats 3] [--doc FILE]

Target (docs/benchmarks.md): at most two minutes per kind of negatives on the default bank,
nine splits, 2 cores. CPU time is given beside wall time: on a busy host the wall time is the
other processes' as much as the audit's; the audit itself runs in one thread.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _report import DOC, machine, peak_rss_gib, write_section

from curi import load_bank
from curi.oracles.audit import run_audit
from curi.splits import PAPER_SPLITS


def timed(bank, negatives: str, splits, sampler: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one audit of `splits` with `negatives`."""
    t, c = time.perf_counter(), time.process_time()
    run_audit(bank, splits, [negatives], negative_sampler=sampler, progress=False)
    return time.perf_counter() - t, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--negative-sampler", default="paper")
    ap.add_argument("--doc", type=Path, default=DOC, help="the Markdown file to update")
    args = ap.parse_args()
    bank = load_bank(args.bank, verify=False)
    splits = list(PAPER_SPLITS)
    lines = [
        f"Machine: {machine()}.\n",
        f"`curi audit` defaults on {bank.path.name} ({len(bank):,} concepts, "
        f"{bank.num_scenes:,} scenes), {len(splits)} splits, negative_sampler="
        f"{args.negative_sampler}; median of {args.repeats} runs (each run's times in brackets):\n",
        "| negatives | wall | CPU |",
        "|---|---|---|",
    ]
    for neg in ("hard", "easy"):
        runs = [timed(bank, neg, splits, args.negative_sampler) for _ in range(args.repeats)]
        wall, cpu = ([r[i] for r in runs] for i in (0, 1))
        fmt = ", ".join
        lines.append(
            f"| {neg} | {statistics.median(wall):.0f} s ({fmt(f'{w:.0f}' for w in wall)}) | "
            f"{statistics.median(cpu):.0f} s ({fmt(f'{c:.0f}' for c in cpu)}) |"
        )
        print(lines[-1], flush=True)
    lines.append(f"\nPeak memory: {peak_rss_gib():.2f} GiB.")
    write_section("audit", "\n".join(lines), doc=args.doc)


if __name__ == "__main__":
    main()

"""Benchmark of episode generation: CPU time per episode on one core (ids and labels), hard and
easy negatives, on built banks.

    python benchmarks/bench_episodes.py --bank ~/.cache/curi/default [--bank .../paper]

Each timed pass follows an untimed pass over the same episodes, so the banks' memory-mapped
pages are already mapped (what a long training run sees) and the figure is the sampler's own
cost. CPU time, not wall time: the figure holds on a busy host too.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _report import DOC, machine, peak_rss_gib, write_section

from curi import EpisodeSampler, load_bank


def cost_us(bank, negatives: str, n: int, split: str) -> float:
    """Median CPU microseconds per episode over 3 passes on episodes 0..n-1."""
    sampler = EpisodeSampler(bank, split, "train", negatives, seed=0)
    for i in range(n):  # map the pages these episodes touch
        sampler[i]
    passes = []
    for _ in range(3):
        t = time.process_time()
        for i in range(n):
            sampler[i]
        passes.append(1e6 * (time.process_time() - t) / n)
    return sorted(passes)[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", action="append", required=True)
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--split", default="concept_iid")
    ap.add_argument("--doc", type=Path, default=DOC, help="the Markdown file to update")
    args = ap.parse_args()
    lines = [
        f"Machine: {machine()}.\n",
        f"CPU time per episode on one core ({args.split} train, {args.n:,} episodes, "
        "median of 3 passes after a warm-up pass; episodes per CPU-second in brackets):\n",
        "| bank | concepts | scenes | hard | easy |",
        "|---|---|---|---|---|",
    ]
    for path in args.bank:
        bank = load_bank(path, verify=False)
        cost = {neg: cost_us(bank, neg, args.n, args.split) for neg in ("hard", "easy")}
        cells = " | ".join(f"{cost[k]:,.0f} us ({1e6 / cost[k]:,.0f} / s)" for k in cost)
        lines.append(f"| {bank.path.name} | {len(bank):,} | {bank.num_scenes:,} | {cells} |")
    lines.append(f"\nPeak memory: {peak_rss_gib():.2f} GiB (the banks are memory-mapped).")
    write_section("episodes", "\n".join(lines), doc=args.doc)


if __name__ == "__main__":
    main()

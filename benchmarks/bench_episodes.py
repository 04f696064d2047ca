"""Benchmark of episode generation: episodes per second on one core (ids and labels), hard and
easy negatives, on a built bank.

    python benchmarks/bench_episodes.py --bank ~/.cache/curi/default [--bank .../paper]
"""

from __future__ import annotations

import argparse
import time

from _report import machine, peak_rss_gib, write_section

from curi import EpisodeSampler, load_bank


def rate(bank, negatives: str, n: int) -> float:
    sampler = EpisodeSampler(bank, "concept_iid", "train", negatives, seed=0)
    sampler[n]  # warm the page cache for this bank
    t = time.perf_counter()
    for i in range(n):
        sampler[i]
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", action="append", required=True)
    ap.add_argument("-n", type=int, default=5000)
    args = ap.parse_args()
    lines = [
        f"Machine: {machine()}.\n",
        "Episodes / s on one core (concept_iid train, "
        f"{args.n:,} episodes each; median of 3 runs):\n",
        "| bank | concepts | scenes | hard | easy |",
        "|---|---|---|---|---|",
    ]
    for path in args.bank:
        bank = load_bank(path, verify=False)
        r = {neg: sorted(rate(bank, neg, args.n) for _ in range(3))[1] for neg in ("hard", "easy")}
        lines.append(
            f"| {bank.path.name} | {len(bank):,} | {bank.num_scenes:,} | "
            f"{r['hard']:,.0f} | {r['easy']:,.0f} |"
        )
    lines.append(f"\nPeak memory: {peak_rss_gib():.2f} GiB (the banks are memory-mapped).")
    write_section("episodes", "\n".join(lines))


if __name__ == "__main__":
    main()

"""Loading rendered episodes with a plain `DataLoader` (`curi.models.data.episode_dataset`,
schema modality, tiny bank): episodes per second of wall time for a few batch sizes and worker
counts. Small episodes cost more to pass between processes than to make, so workers help only
when each fetch is a batch of several episodes.

    python benchmarks/bench_loader.py [--episodes 2000] [--repeats 3]

Prints the median of `--repeats` runs per setting (the loader made and iterated to the end)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _report import machine
from torch.utils.data import DataLoader

from curi import build_bank, load_bank
from curi.models.data import collate_episodes, episode_dataset

SETTINGS = [(1, 0), (1, 2), (8, 0), (8, 2), (32, 2)]  # (batch size, workers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        bank = load_bank(build_bank("tiny", Path(tmp) / "data", progress=False))
        ds = episode_dataset(bank, "concept_iid", "train", modality="schema", size=args.episodes)
        rates: dict[tuple[int, int], list[float]] = {s: [] for s in SETTINGS}
        for _ in range(args.repeats):
            for batch, workers in SETTINGS:
                loader = DataLoader(
                    ds, batch_size=batch, collate_fn=collate_episodes, num_workers=workers
                )
                start = time.perf_counter()
                n = sum(len(b["support_labels"]) for b in loader)
                rates[batch, workers].append(n / (time.perf_counter() - start))
    print(
        f"Machine: {machine()}. {args.episodes} schema episodes of the tiny bank, median of "
        f"{args.repeats}:"
    )
    print("\n| batch size | workers | episodes / s |\n|---|---|---|")
    for (batch, workers), r in rates.items():
        print(f"| {batch} | {workers} | {statistics.median(r):,.0f} |")


if __name__ == "__main__":
    main()

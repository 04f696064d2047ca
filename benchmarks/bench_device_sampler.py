"""Benchmark of the device sampler on CPU tensors against `curi.EpisodeSampler`, per core:
microseconds per training episode, one torch and one numpy thread, blocks of the two
interleaved so that the machine's load hits both alike.

    python benchmarks/bench_device_sampler.py [--banks tiny default] [--batch 64]
        [--blocks 7] [--doc]

The target: the device sampler on CPU tensors at least as fast per core as EpisodeSampler
(it is the path CI tests; on a GPU the same code draws whole batches on the device).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from _report import machine, write_section  # noqa: E402

import curi  # noqa: E402
from curi.episodes import EpisodeSpec  # noqa: E402
from curi.models.device_sampler import DeviceBank, DeviceEpisodeSampler  # noqa: E402


def per_episode(bank, negatives: str, batch: int, blocks: int) -> tuple[float, float]:
    """Median microseconds per episode of the device sampler and of the reference."""
    data = DeviceBank(bank, "cpu")
    spec = EpisodeSpec("concept_iid", "train", negatives, seed=0)
    dev = DeviceEpisodeSampler(bank, spec, data=data)
    ref = curi.EpisodeSampler(bank, "concept_iid", "train", negatives, seed=0)
    dev.sample(0, batch)  # warm up
    ref[0]
    a, b = [], []
    for k in range(blocks):
        t = time.perf_counter()
        for step in range(4):
            dev.sample(1 + 4 * k + step, batch)
        a.append((time.perf_counter() - t) / (4 * batch))
        t = time.perf_counter()
        for i in range(4 * batch * k, 4 * batch * (k + 1)):
            ref[i]
        b.append((time.perf_counter() - t) / (4 * batch))
    return 1e6 * statistics.median(a), 1e6 * statistics.median(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--banks", nargs="+", default=["tiny", "default"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--doc", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [
        "| bank | negatives | device sampler (CPU tensors), us / episode | EpisodeSampler, "
        "us / episode | ratio |",
        "|---|---|---|---|---|",
    ]
    for name in args.banks:
        bank = curi.load_bank(curi.build_bank(name, progress=False))
        for negatives in ("hard", "easy"):
            dev, ref = per_episode(bank, negatives, args.batch, args.blocks)
            rows.append(f"| {name} | {negatives} | {dev:,.0f} | {ref:,.0f} | {dev / ref:.2f} |")
    load = os.getloadavg()[0]
    body = "\n".join(
        [
            f"Device sampler on CPU tensors, batches of {args.batch} episodes, one thread, "
            f"medians of {args.blocks} interleaved blocks ({machine()}; load average "
            f"{load:.1f} at the end):",
            "",
            *rows,
        ]
    )
    if args.doc:
        write_section("device-sampler-cpu", body)
    else:
        print(body)


if __name__ == "__main__":
    main()

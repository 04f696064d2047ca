"""Where a schema relation-net training step's time goes on one GPU: the device sampler alone,
and whole training runs at several batch sizes and draw sizes (episodes drawn at once,
`curi.models.device_batches.DRAW_EPISODES`), each with its GPU utilisation.

    python benchmarks/gpu_train_rate.py [--bank default] [--batches 256 1024]
        [--draws 256 4096] [--compile] [--steps 400] [--device cuda] [--data-dir DIR]

1. the sampler alone: milliseconds per draw of 256 and of 4,096 hard-negative episodes (the
   device synchronised after each), so the cost of a draw's launches and host
   synchronisations shows against its size;
2. for each (batch, draw): `--steps` steps of the headline row's model (schema relation-net,
   concept_iid, hard negatives, the CUDA-graph step, the device sampler), validation only at
   the end on 8 episodes; the median rate of the log windows after the first, and
   ``nvidia-smi``'s utilisation while it trains (gpu_headline.GpuUtilisation).

``--compile`` adds, for each batch and the largest draw, a run with ``train.compile=true``
(Inductor fuses the masked BatchNorms' element-wise chains, which the CUDA graph replays one
kernel at a time). On a CPU (``--device cpu --bank tiny --steps 6 --batches 8 --draws 8``)
the same path runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

from gpu_headline import GpuUtilisation, relation_net_run, short_run


def sampler_ms(bank, device: str, size: int, repeats: int) -> float:
    """Median milliseconds of one draw of `size` episodes."""
    import torch

    from curi.episodes import EpisodeSpec
    from curi.models.device_sampler import DeviceEpisodeSampler

    spec = EpisodeSpec("concept_iid", "train", "hard", 0)
    s = DeviceEpisodeSampler(bank, spec, device=device)
    s.sample(0, size)  # warm-up
    times = []
    for d in range(1, repeats + 1):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        s.sample(d, size)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def train_rate(
    args, bank, batch: int, draw: int, data_dir: Path, out: Path, *, compile: bool = False
) -> dict:
    import torch

    import curi.models.device_batches as device_batches
    from curi.models.train import train

    device_batches.DRAW_EPISODES = draw
    train_settings = short_run(
        args.steps,
        batch,
        log_every=max(1, args.steps // 8),
        sampler="device",
        compile=compile,
        num_workers=0,
    )
    run = relation_net_run(args.bank, args.device, data_dir, train_settings)
    run_dir = out / f"b{batch}-d{draw}{'-compile' if compile else ''}"
    with GpuUtilisation() as gpu:
        summary = train(run, run_dir=run_dir, bank=bank, progress=False)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["episodes_per_s"] for r in rows if r["tag"] == "train"][1:] or [0.0]
    k = device_batches.steps_per_draw(batch, torch.device(args.device))
    return {
        "batch": batch,
        "draw": k * batch,
        "episodes_per_s": statistics.median(rates),
        "gpu": gpu.summary(),
        "step_mode": summary["step_mode"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bank", default="default")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--draws", type=int, nargs="+", default=[256, 4096])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--compile", action="store_true", help="also train.compile=true rows")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--data-dir", type=Path, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from _report import machine

    from curi import BankConfig, build_bank, load_bank
    from curi.bank import default_data_dir

    data_dir = args.data_dir or default_data_dir()
    bank = load_bank(
        build_bank(BankConfig.preset(args.bank, workers=os.cpu_count() or 1), data_dir)
    )
    lines = [f"Machine: {machine()}; device {args.device}; `{args.bank}` bank", ""]
    lines += ["| draw (episodes) | ms per draw | us per episode |", "|---|---|---|"]
    for size in sorted(set(args.draws)):
        ms = sampler_ms(bank, args.device, size, args.repeats)
        lines.append(f"| {size:,} | {ms:.1f} | {1e3 * ms / size:.1f} |")
        print(lines[-1], flush=True)
    lines += ["", "| batch | episodes per draw | episodes / s | GPU utilisation | step |"]
    lines.append("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for batch in args.batches:
            runs = [(draw, False) for draw in args.draws]
            runs += [(max(args.draws), True)] if args.compile else []
            for draw, compile in runs:
                r = train_rate(args, bank, batch, draw, data_dir, Path(tmp), compile=compile)
                lines.append(
                    f"| {batch} | {r['draw']:,} | {r['episodes_per_s']:,.0f} | {r['gpu']} "
                    f"| {r['step_mode']} |"
                )
                print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

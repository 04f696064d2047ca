"""Image relation-net training on one GPU: steady episodes per second and peak GPU memory at
a few batch sizes, images rendered on the GPU beside the step.

    python benchmarks/gpu_image.py [--batches 8 64] [--steps 12] [--bank tiny] [--device cuda]
        [--data-dir DIR]

Each batch size trains `--steps` steps of the schema-free image relation-net
(``modality=image modality.device=<device> pooling=relation_net``, the chunked pair path
chosen as in any run) on `--bank`'s concept_iid split with hard negatives, in this process.
Reported per batch: episodes per second over the steps after the first two (start-up and the
first render excluded), ``torch.cuda.max_memory_allocated`` (the target: batch 64 within an
80 GB H100) and whether it ran out of memory. On a CPU (``--device cpu --batches 1
--steps 3``) the same path runs, without the memory column.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from gpu_headline import relation_net_run, short_run


def one(args, batch: int, data_dir: Path, out: Path, bank) -> dict:
    import torch

    from curi.models.train import train

    run = relation_net_run(
        args.bank,
        args.device,
        data_dir,
        short_run(args.steps, batch, log_every=1, num_workers=args.workers),
        modality={"name": "image", "device": args.device},
    )
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        train(run, run_dir=out / f"batch{batch}", bank=bank, progress=False)
    except torch.OutOfMemoryError as e:
        return {"batch": batch, "oom": True, "error": str(e).splitlines()[0]}
    rows = [
        json.loads(x) for x in (out / f"batch{batch}" / "metrics.jsonl").read_text().splitlines()
    ]
    steps = [r for r in rows if r["tag"] == "train" and r["step"] > 2]
    rate = sum(r["episodes_per_s"] for r in steps) / max(1, len(steps))
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    return {"batch": batch, "oom": False, "episodes_per_s": rate, "peak_gib": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--bank", default="tiny")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--data-dir", type=Path, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from _report import machine

    from curi import BankConfig, build_bank, load_bank
    from curi.bank import default_data_dir

    data_dir = args.data_dir or default_data_dir()
    bank = load_bank(build_bank(BankConfig.preset(args.bank), data_dir))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for batch in args.batches:
            t = time.perf_counter()
            r = one(args, batch, data_dir, Path(tmp), bank)
            r["wall_s"] = time.perf_counter() - t
            print(json.dumps(r), flush=True)
            rows.append(r)
    print(f"Machine: {machine()}; device {args.device}; {args.steps} steps of each batch\n")
    print("| batch | episodes / s (steps 3 on) | peak GPU memory (GiB) | wall (s) |")
    print("|---|---|---|---|")
    for r in rows:
        if r["oom"]:
            print(f"| {r['batch']} | out of memory | - | {r['wall_s']:.0f} |")
            continue
        peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"
        print(f"| {r['batch']} | {r['episodes_per_s']:,.1f} | {peak} | {r['wall_s']:.0f} |")


if __name__ == "__main__":
    main()

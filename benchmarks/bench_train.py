"""Benchmark of training throughput: episodes per second of `curi train` (rendering included)
for each pooler, on the tiny bank, through the real command line.

    python benchmarks/bench_train.py [--modality schema] [--device auto] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _report import machine, write_section

POOLERS = ("avg", "concat", "relation_net", "transformer")


def run(pooling: str, args, tmp: Path) -> dict:
    out = tmp / pooling
    cmd = [
        sys.executable, "-c", "from curi.cli import main; main()", "train", "bank=tiny",
        "train=tiny", f"data_dir={tmp / 'data'}", f"output_dir={out}", f"pooling={pooling}",
        f"modality={args.modality}", f"device={args.device}", f"train.steps={args.steps}",
        f"train.batch_size={args.batch}", f"train.eval_every={10 * args.steps}",
        f"train.checkpoint_every={10 * args.steps}", f"train.num_workers={args.workers}",
        "progress=false",
    ]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, cwd=tmp)
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--modality", default="schema")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    rows = ["| pooling | episodes / s | parameters |", "|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for pooling in POOLERS:
            s = run(pooling, args, Path(tmp))
            rows.append(f"| {pooling} | {s['episodes_per_s']:.1f} | {s['parameters']['total']:,} |")
            device = s["device"]
    body = (
        f"Machine: {machine()}; device {device}.\n\n`curi train` throughput, {args.modality} "
        f"modality, {args.batch} episodes a step, {args.steps} steps (the first steps and "
        f"episode rendering included, {args.workers} data workers):\n\n" + "\n".join(rows)
    )
    write_section(f"train-{args.modality}-{device}", body)


if __name__ == "__main__":
    main()

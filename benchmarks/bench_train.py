"""Benchmark of training throughput: episodes per second of `curi train` (rendering included)
for each pooler, on the tiny bank, through the real command line.

    python benchmarks/bench_train.py [--modality schema] [--device auto] [--steps 30]
        [--render-device cuda] [--poolers relation_net] [-o train.channels_last=true ...]

On a GPU, ``--render-device cuda`` renders each batch on the GPU beside the step (the workers
only sample episodes); ``-o`` adds any `curi train` override (``train.render_cache=DIR``,
``train.compile=true``, ...).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _report import DOC, machine, write_section

POOLERS = ("avg", "concat", "relation_net", "transformer")


def run(pooling: str, args, tmp: Path) -> dict:
    out = tmp / pooling
    cmd = [
        sys.executable,
        "-c",
        "from curi.cli import main; main()",
        "train",
        "bank=tiny",
        "train=tiny",
        f"data_dir={tmp / 'data'}",
        "build=true",  # the tiny bank is built in the temporary data folder on first use
        f"output_dir={out}",
        f"pooling={pooling}",
        f"modality={args.modality}",
        f"device={args.device}",
        f"train.steps={args.steps}",
        f"train.batch_size={args.batch}",
        f"train.eval_every={10 * args.steps}",
        f"train.checkpoint_every={10 * args.steps}",
        f"train.num_workers={args.workers}",
        "progress=false",
    ]
    if args.render_device:
        cmd.append(f"modality.device={args.render_device}")
    cmd += args.override
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    if r.returncode:
        raise SystemExit(f"curi train ({pooling}) failed:\n{r.stderr[-3000:]}")
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--modality", default="schema")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--doc", type=Path, default=DOC, help="markdown file to write the section to")
    ap.add_argument("--render-device", default=None, help="modality.device (cpu or cuda)")
    ap.add_argument("--poolers", nargs="+", default=list(POOLERS))
    ap.add_argument("-o", "--override", action="append", default=[], help="curi train override")
    args = ap.parse_args()
    rows = ["| pooling | episodes / s | parameters |", "|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for pooling in args.poolers:
            s = run(pooling, args, Path(tmp))
            rows.append(f"| {pooling} | {s['episodes_per_s']:.1f} | {s['parameters']['total']:,} |")
            device = s["device"]
    body = (
        f"Machine: {machine()}; device {device}.\n\n`curi train` throughput, {args.modality} "
        f"modality, {args.batch} episodes a step, {args.steps} steps (the first steps and "
        f"episode rendering included, {args.workers} data workers, render device "
        f"{args.render_device or 'cpu'}{', ' + ' '.join(args.override) if args.override else ''})"
        ":\n\n" + "\n".join(rows)
    )
    write_section(f"train-{args.modality}-{device}", body, doc=args.doc)


if __name__ == "__main__":
    main()

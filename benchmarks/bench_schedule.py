"""The learning-rate schedule at a fixed budget of episodes, on the CPU: the schema
relation-net on the `default` bank's concept_iid split (hard negatives), trained for `--steps`
steps of `--batch` episodes with the paper's constant rate and with warmup then cosine decay,
for three seeds; the val mAP of each run at the end (and half-way).

    python benchmarks/bench_schedule.py [--steps 2000] [--batch 16] [--seeds 0 1 2] [--doc]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _report import machine, write_section

import curi
from curi.models.config import RunConfig
from curi.models.train import train


def one_run(bank, schedule: str, seed: int, args, out: Path) -> dict:
    run = RunConfig.from_mapping(
        {
            "bank": dict(bank.config),
            "split": "concept_iid",
            "pooling": {"name": "relation_net"},
            "device": "cpu",
            "seed": seed,
            "train": {
                "steps": args.steps,
                "batch_size": args.batch,
                "lr": args.lr,
                "lr_schedule": schedule,
                "warmup_steps": args.warmup if schedule != "constant" else 0,
                "log_every": 100,
                "eval_every": args.steps // 2,
                "checkpoint_every": args.steps,
                "val_episodes": args.val_episodes,
                "num_workers": 1,
                "sampler": "device",
            },
        }
    )
    t = time.perf_counter()
    summary = train(run, run_dir=out / f"{schedule}-{seed}", bank=bank, progress=False)
    rows = [json.loads(x) for x in (out / f"{schedule}-{seed}" / "metrics.jsonl").open()]
    val = {r["step"]: r["map"] for r in rows if r["tag"] == "val"}
    return {"val": val, "best": summary["best_map"], "seconds": time.perf_counter() - t}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--val-episodes", type=int, default=500)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--doc", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    bank = curi.load_bank(curi.build_bank("default", progress=False))
    out = Path(tempfile.mkdtemp(prefix="curi-schedule-"))
    res = {
        s: [one_run(bank, s, seed, args, out) for seed in args.seeds]
        for s in ("constant", "cosine")
    }
    half, end = args.steps // 2, args.steps
    lines = [
        f"Schema relation-net, `default` bank, concept_iid, hard negatives, {args.steps:,} steps "
        f"of {args.batch} episodes ({args.steps * args.batch:,} episodes, lr {args.lr:g}; cosine: "
        f"{args.warmup} warmup steps), val mAP on {args.val_episodes} val episodes, seeds "
        f"{', '.join(map(str, args.seeds))} ({machine()}):",
        "",
        f"| schedule | val mAP at step {half:,} (per seed) | at step {end:,} (per seed) | mean at "
        f"{end:,} | minutes per run |",
        "|---|---|---|---|---|",
    ]
    for s, runs in res.items():
        at_half = ", ".join(f"{r['val'][half]:.3f}" for r in runs)
        at_end = ", ".join(f"{r['val'][end]:.3f}" for r in runs)
        mean = statistics.fmean(r["val"][end] for r in runs)
        minutes = statistics.median(r["seconds"] for r in runs) / 60
        lines.append(f"| {s} | {at_half} | {at_end} | {mean:.3f} | {minutes:.1f} |")
    body = "\n".join(lines)
    if args.doc:
        write_section("schedule-cpu", body)
    else:
        print(body)


if __name__ == "__main__":
    main()

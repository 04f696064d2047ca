"""Benchmark of the ``mcd`` split rule (docs/divergence.md, "MCD splits"): D_C reached at
D_A <= max_da, the random baseline of the same sizes, and the time, per bank preset.

Run (nice'd on a shared host):
    nice python benchmarks/bench_mcd.py --banks default paper --validation 0 0.1
    nice python benchmarks/bench_mcd.py --banks paper --validation 0 --restarts 1 4

Prints one JSON line per run and a Markdown table at the end. Times are wall-clock seconds (and
CPU seconds of the process and its restart workers, less sensitive to a busy host) on whatever
machine runs it: the DBCA index of the bank (compounds and weights, once per bank), then each
split (greedy, refinement, repair, measurement); the 1-minute load average says how busy the
host was."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

from _report import children_cpu

from curi import build_bank, load_bank
from curi.divergence import bank_index
from curi.splits import make_split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--banks", nargs="+", default=["default", "paper"])
    ap.add_argument("--validation", nargs="+", type=float, default=[0.0, 0.1])
    ap.add_argument("--compounds", nargs="+", default=["dbca"], choices=["dbca", "depth2"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--train", type=float, default=0.4)
    ap.add_argument("--test", type=float, default=0.1)
    ap.add_argument("--refine", type=float, default=None)
    ap.add_argument("--candidates", nargs="+", type=int, default=[None])
    ap.add_argument("--restarts", nargs="+", type=int, default=[None])
    ap.add_argument("--workers", type=int, default=0, help="0: one per core")
    ap.add_argument("--val-weight", type=float, default=None)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    rows = []
    for name in args.banks:
        t = time.perf_counter()
        bank = load_bank(build_bank(name, args.data_dir, progress=False))
        load_s = time.perf_counter() - t
        for kind in args.compounds:
            t, c = time.perf_counter(), time.process_time()
            bank_index(bank, compound_kind=kind)
            index_s = time.perf_counter() - t
            index_cpu_s = time.process_time() - c
            runs = itertools.product(args.validation, args.candidates, args.restarts, args.seeds)
            for val, cands, restarts, seed in runs:
                t, c, cc = time.perf_counter(), time.process_time(), children_cpu()
                s = make_split(
                    bank,
                    {
                        "name": "mcd",
                        "rule": "mcd",
                        "train": args.train,
                        "test": args.test,
                        "validation": val,
                        "seed": seed,
                        "compounds": kind,
                        "workers": args.workers,
                        "progress": False,
                        **({"candidates": cands} if cands else {}),
                        **({"refine": args.refine} if args.refine is not None else {}),
                        **({"restarts": restarts} if restarts else {}),
                        **({"val_weight": args.val_weight} if args.val_weight is not None else {}),
                    },
                )
                split_s = time.perf_counter() - t
                split_cpu_s = time.process_time() - c + children_cpu() - cc
                i = s.info
                row = {
                    "bank": name,
                    "concepts": len(bank),
                    "groups": i["groups"]["all"],
                    "compounds": kind,
                    "validation": val,
                    "seed": seed,
                    "candidates": i["candidates"],
                    "restarts": i["restarts"],
                    "d_compound": i["d_compound"],
                    "d_atom": i["d_atom"],
                    "d_compound_random": i["d_compound_random"],
                    "ratio": round(i["d_compound"] / i["d_compound_random"], 1),
                    "d_compound_val": i.get("d_compound_val"),
                    "d_compound_stage1": i.get("d_compound_stage1"),
                    "objectives": i.get("objectives"),
                    "workers": args.workers,
                    "phase_seconds": i.get("phase_seconds"),
                    "absent_atoms": i["test_atoms_absent_from_train"],
                    "load_s": round(load_s, 1),
                    "index_s": round(index_s, 1),
                    "split_s": round(split_s, 1),
                    "index_cpu_s": round(index_cpu_s, 1),
                    "split_cpu_s": round(split_cpu_s, 1),
                    "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    keys = [
        "bank",
        "concepts",
        "groups",
        "compounds",
        "validation",
        "candidates",
        "restarts",
        "seed",
        "d_compound",
        "d_atom",
        "d_compound_random",
        "ratio",
        "d_compound_val",
        "d_compound_stage1",
        "absent_atoms",
        "index_s",
        "index_cpu_s",
        "split_s",
        "split_cpu_s",
        "load_avg_1m",
    ]
    print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()

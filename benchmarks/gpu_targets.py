"""Every GPU target of the schema third of the paper's table in one call on one H100 or H200,
within a time budget (8 minutes, bank build included), ending in one JSON summary.

    python benchmarks/gpu_targets.py --commit SHA [--minutes 8] [--bank paper] [--device cuda]
        [--batch 1024] [--modes graph compile_graph] [--rate-seconds 60]
        [--headline-minutes 2] [--results FILE] [--out DIR] [--data-dir DIR] [--no-checks]

Stages, in this order, each timed; one the budget leaves no room for is skipped, and named so:

0. the CUDA-only tests (`gpu_headline.cuda_checks`' list: the eager and the compiled step
   replayed from CUDA graphs against eager, the chunked pair step captured, the device
   sampler), in a process of their own while the bank is built;
1. the bank, built with every core if it is missing;
2. the roofline of the paper's relation net (`flops_roofline.count`): GFLOP and MB an episode;
3. calibration: a short run of the headline row's model per step mode of `--modes`
   (``graph``: the eager step in a CUDA graph; ``compile_graph``: the compiled step in one;
   ``eager``, ``compile``; a ``:bf16`` suffix adds ``train.elementwise_dtype=bfloat16``), the
   rate of its last log window; the fastest mode runs every stage after;
4. rate: the headline row's model (schema relation net, g 4 x 256, f 256-256-256,
   concept_iid, hard negatives, episodes drawn on the device) at a constant learning rate for
   at least `--rate-seconds` of steady state: the log windows after the first (which holds
   compilation and capture). Episodes are counted only if Adam applied their gradients (its
   step count in the last checkpoint against the steps run); achieved TFLOP/s and GB/s follow
   from the roofline's FLOPs and bytes an episode (fused when compiled, unfused otherwise;
   float32 or bfloat16 element-wise work as the mode runs), beside the GPU's limit;
5. headline: `gpu_headline.headline` (the headline cell: relation net, concept_iid, hard
   negatives; warmup and cosine decay, 8 validations, the best checkpoint tested on
   `--test-episodes`) for at most `--headline-minutes` of training, at the rate measured in 4;
   its result is appended to `--results` as that cell's record;
6. table: `gpu_table`'s cells in its order, each `--cell-minutes` of training, while the
   budget has room for one more (and at most `--max-cells` of them).

On a CPU, ``--bank tiny --device cpu --minutes 1.5`` runs every stage at a tiny size (the CI
test: tests/test_gpu_targets.py); CUDA figures come only from a GPU.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gpu_headline
import gpu_table
from gpu_headline import GpuUtilisation, relation_net_run, short_run

HEADLINE = ("relation_net", "concept_iid", "hard")
STEP_MODES = ("eager", "compile", "graph", "compile_graph")  # curi.models.step.MODES
TEST_RESERVE_S = {"cuda": 60.0, "cpu": 15.0}  # a test of --test-episodes and its start-up
CHECKS_TIMEOUT_S = 300  # the CUDA-only tests, from the start (the bank build runs beside them)


class TargetsError(Exception):
    """Bad input: one line, exit 2, nothing run."""


def mode_settings(mode: str) -> dict:
    """The train settings of a step mode (``NAME`` or ``NAME:bf16``)."""
    name, _, dtype = mode.partition(":")
    if name not in STEP_MODES or dtype not in ("", "bf16"):
        raise TargetsError(f"--modes: {mode!r} is not one of {', '.join(STEP_MODES)} (+ :bf16)")
    out = {"compile": "compile" in name, "cuda_graph": "graph" in name}
    return out | ({"elementwise_dtype": "bfloat16"} if dtype else {})


def _train_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    return [r for r in rows if r["tag"] == "train"]


def _windows(run_dir: Path, batch: int) -> list[tuple[int, float]]:
    """(episodes, seconds) of every log window, from the steps between logged rows."""
    out, before = [], 0
    for r in _train_rows(run_dir):
        episodes = (r["step"] - before) * batch
        out.append((episodes, episodes / r["episodes_per_s"]))
        before = r["step"]
    return out


def _train(args, mode: str, steps: int, log_every: int, run_dir: Path, bank):
    from curi.models.train import train

    settings = short_run(steps, args.batch, log_every=log_every, num_workers=args.workers)
    run = relation_net_run(
        args.bank, args.device, args.data_dir, settings | mode_settings(mode), seed=0
    )
    return train(run, run_dir=run_dir, bank=bank, progress=False)


def calibrate(args, bank, out: Path) -> list[dict]:
    """Each mode's episodes/s in the last log window of a short run, and the run's seconds."""
    rows = []
    for mode in args.modes:
        t = time.perf_counter()
        steps = args.calibration_steps
        run_dir = out / "calibration" / mode.replace(":", "-")
        summary = _train(args, mode, steps, max(1, steps // 2), run_dir, bank)
        episodes, window_s = _windows(run_dir, args.batch)[-1]
        rows.append(
            {
                "mode": mode,
                "step_mode": summary["step_mode"],
                "episodes_per_s": episodes / window_s,
                "seconds": time.perf_counter() - t,
            }
        )
        print(f"calibration: {rows[-1]}", flush=True)
    return rows


def adam_steps(checkpoint: Path) -> int:
    """Adam's step count in a checkpoint: the steps whose gradients it applied."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["optimizer"]["state"]
    return int(float(next(iter(state.values()))["step"]))


def peaks(device_name: str) -> tuple[str, float, float] | None:
    """(name, FLOP/s, bytes/s) of a GPU the roofline knows (`flops_roofline.PEAKS`), from
    the device's name (``NVIDIA H200``, ``NVIDIA H100 80GB HBM3``: SXM; a PCIe H100 is not)."""
    from flops_roofline import PEAKS

    if "H200" in device_name:
        return "H200", *PEAKS["H200"]
    if "H100" in device_name and "PCIe" not in device_name:
        return "H100 SXM", *PEAKS["H100 SXM"]
    return None


def rate_stage(args, bank, mode: str, per_s: float, roof: dict, out: Path) -> dict:
    """At least `--rate-seconds` of steady training at `mode`; the achieved rates."""
    steps_per_s = per_s / args.batch
    log_every = max(4, round(steps_per_s * args.rate_seconds / 12))  # about 12 steady windows
    steps = log_every + max(log_every, math.ceil(steps_per_s * args.rate_seconds * 1.3))
    t = time.perf_counter()
    with GpuUtilisation() as gpu:
        summary = _train(args, mode, steps, log_every, out / "rate", bank)
    applied = adam_steps(out / "rate" / "checkpoints" / "last.pt")
    steady = _windows(out / "rate", args.batch)[1:]
    episodes = sum(e for e, _ in steady) * min(1.0, applied / summary["steps"])
    seconds = sum(s for _, s in steady)
    rate = episodes / seconds if seconds else 0.0
    kind = ("fused" if "compile" in mode else "unfused") + (" bf16" if ":bf16" in mode else " fp32")
    mb = roof[f"mb {kind}"]
    result = {
        "mode": mode,
        "step_mode": summary["step_mode"],
        "batch": args.batch,
        "steps": summary["steps"],
        "applied_steps": applied,
        "steady_s": seconds,
        "steady_episodes": episodes,
        "episodes_per_s": rate,
        "tflops": rate * roof["gflop"] / 1e3,
        "bytes_model": kind,
        "gbps": rate * mb / 1e3,
        "gpu_utilisation": gpu.summary(),
        "wall_s": time.perf_counter() - t,
    }
    peak = peaks(args.device_name)
    if peak is not None:
        name, flops, bandwidth = peak
        limit = min(flops / (roof["gflop"] * 1e9), bandwidth / (mb * 1e6))
        result |= {"gpu": name, "limit_episodes_per_s": limit, "share_of_limit": rate / limit}
    return result


def headline_stage(args, data_dir: Path, out: Path, t0: float, *, checks, rate, mode, seed):
    """The headline cell through `gpu_headline.headline`, for `args.headline_training_s`."""
    ns = argparse.Namespace(
        minutes=args.headline_training_s / 60, bank=args.bank, device=args.device,
        batch=args.batch, lr=None, warmup=None, seed=seed, workers=args.workers,
        test_episodes=args.test_episodes, val_episodes=args.val_episodes,
        calibration_steps=args.calibration_steps, **_step_args(mode),
    )  # fmt: skip
    t = time.perf_counter()
    report = gpu_headline.headline(
        ns, data_dir, out, t0, checks=checks, rate=(rate / args.batch, mode)
    )
    report["wall_s"] = time.perf_counter() - t
    return report


def _step_args(mode: str) -> dict:
    """`gpu_headline.step_settings`' arguments for `mode`."""
    s = mode_settings(mode)
    return {"compile": s["compile"], "elementwise_dtype": s.get("elementwise_dtype", "float32")}


def headline_record(report: dict, seed: int) -> dict:
    """`gpu_table`'s record of the headline cell from the headline's report."""
    s = report["seconds"]
    return {
        "pooler": HEADLINE[0], "split": HEADLINE[1], "negatives": HEADLINE[2], "seed": seed,
        "batch": report["batch"], "steps": report["steps"], "episodes": report["episodes"],
        "wall_s": round(report["wall_s"], 1), "train_s": s["training"], "test_s": s["test"],
        "val_curve": [list(v) for v in report["val"]], "checkpoint_step": report["best_step"],
        "test_map": report["test_map"], "test_cba": report["test_cba"],
        "test_episodes": report["test_episodes"], "source": "gpu_targets headline",
    }  # fmt: skip


def table_stage(args, bank, todo, per_s: float, deadline: float, base: dict, out: Path):
    """gpu_table's cells while the budget has room: (records, cells left)."""
    steps = max(2, int(per_s / args.batch * 60 * args.cell_minutes))
    targs = argparse.Namespace(
        batch=args.batch, val_episodes=args.val_episodes, test_episodes=args.test_episodes,
        device=args.device, data_dir=args.data_dir, **_step_args(args.mode),
    )  # fmt: skip
    done, spent = [], []
    for cell, seed in todo[: args.max_cells]:
        need = statistics.median(spent) if spent else args.first_cell_s
        if time.perf_counter() + need > deadline:
            break
        t = time.perf_counter()
        record = {**base, **gpu_table.run_cell(targs, bank, cell, seed, steps, out / "table")}
        record["source"] = "gpu_targets table"
        gpu_table.append_record(args.results, record)
        spent.append(time.perf_counter() - t)
        done.append(record)
        print(f"{gpu_table.cell_name(cell)} seed {seed}: {record['test_map']:.3f}", flush=True)
    return done, len(todo) - len(done)


def arguments(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=8.0, help="the whole call's budget")
    ap.add_argument("--bank", default="paper")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=None, help="episodes a step: 1,024 (CPU 8)")
    ap.add_argument("--modes", nargs="+", default=None, help="graph compile_graph (CPU eager)")
    ap.add_argument("--rate-seconds", type=float, default=None, help="steady state: 60 (CPU 3)")
    ap.add_argument("--headline-minutes", type=float, default=2.0, help="its training, at most")
    ap.add_argument("--cell-minutes", type=float, default=None, help="a cell's training: 1.5")
    ap.add_argument("--max-cells", type=int, default=None, help="at most this many table cells")
    ap.add_argument("--test-episodes", type=int, default=None, help="20,000 (CPU 100)")
    ap.add_argument("--val-episodes", type=int, default=None, help="1,000 (CPU 16)")
    ap.add_argument("--calibration-steps", type=int, default=None, help="60 (CPU 6)")
    ap.add_argument("--roofline-batch", type=int, default=None, help="64 (CPU 8)")
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--results", type=Path, default=gpu_table.RESULTS)
    ap.add_argument("--out", type=Path, default=None, help="run folders (default: temporary)")
    ap.add_argument("--data-dir", default=None, help="default: curi's data folder")
    ap.add_argument("--commit", default=None, help="the code's commit (default: git's HEAD)")
    ap.add_argument("--no-checks", action="store_true", help="skip the CUDA-only tests")
    args = ap.parse_args(argv)
    if not (math.isfinite(args.minutes) and args.minutes > 0):
        raise TargetsError(f"--minutes must be a positive number, got {args.minutes}")
    if args.max_cells is not None and args.max_cells < 0:
        raise TargetsError(f"--max-cells must be 0 or more, got {args.max_cells}")
    cuda = args.device.startswith("cuda")
    defaults = {
        "batch": (1024, 8), "modes": (["graph", "compile_graph"], ["eager"]),
        "rate_seconds": (60.0, 3.0), "cell_minutes": (1.5, 0.02),
        "test_episodes": (20_000, 100), "val_episodes": (1000, 16),
        "calibration_steps": (60, 6), "roofline_batch": (64, 8),
    }  # fmt: skip
    for key, (gpu, cpu) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, gpu if cuda else cpu)
    for mode in args.modes:
        mode_settings(mode)
    args.kind = "cuda" if cuda else "cpu"
    return args


def main(argv=None) -> int:
    t0 = time.perf_counter()
    try:
        args = arguments(argv)
        records = gpu_table.read_results(args.results)
        sha = gpu_table.commit(args.commit)
        if args.kind == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise TargetsError(f"--device {args.device} asked for, but torch sees no GPU")
    except (TargetsError, gpu_table.TableError) as e:
        print(f"gpu_targets.py: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    deadline = t0 + 60 * args.minutes
    out = args.out or Path(tempfile.mkdtemp(prefix="curi-targets-"))
    try:
        summary = run(args, records, sha, out, t0, deadline)
    except gpu_table.TableError as e:  # results of another bank with this bank's name
        print(f"gpu_targets.py: {e}", file=sys.stderr)
        return 2
    summary["seconds"]["total"] = time.perf_counter() - t0
    (out / "targets.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


def run(args, records, sha: str, out: Path, t0: float, deadline: float) -> dict:
    """Every stage; the summary."""
    cuda = args.kind == "cuda"
    checks = None
    if cuda and not args.no_checks:  # beside the bank build, in a process of its own
        cmd, pipe = gpu_headline.cuda_check_command(), subprocess.PIPE
        checks = subprocess.Popen(cmd, cwd=gpu_headline.ROOT, stdout=pipe, stderr=pipe, text=True)
    try:
        return stages(args, records, sha, out, t0, deadline, checks)
    finally:
        if checks is not None and checks.poll() is None:  # an error before they were read
            checks.kill()
            checks.wait()


def stages(args, records, sha: str, out: Path, t0: float, deadline: float, checks) -> dict:
    """Stages 1 to 6 (`checks`: the CUDA-only tests' process, or None); the summary."""
    import torch
    from _report import machine
    from flops_roofline import count, episode_batch, roofline

    from curi import BankConfig, build_bank, load_bank
    from curi.bank import default_data_dir

    cuda = args.kind == "cuda"
    seconds, skipped = {}, []
    args.data_dir = str(args.data_dir or default_data_dir())
    t = time.perf_counter()
    cfg = BankConfig.preset(args.bank, workers=os.cpu_count() or 1)
    bank = load_bank(build_bank(cfg, args.data_dir, progress=False))
    seconds["bank"] = time.perf_counter() - t
    digest = gpu_table.bank_sha256(bank)
    gpu_table.check_bank(records, args.bank, digest, args.results)
    line = "skipped (--no-checks)" if cuda else "n/a (no GPU)"
    if checks is not None:
        try:  # a hang guard far above their time, but within the budget
            stdout, stderr = checks.communicate(timeout=CHECKS_TIMEOUT_S)
            line = gpu_headline.check_summary(checks.returncode, stdout, stderr)
        except subprocess.TimeoutExpired:
            checks.kill()
            checks.communicate()
            line = f"stopped after {CHECKS_TIMEOUT_S} s (FAILED)"
    seconds["checks_waited"] = time.perf_counter() - t - seconds["bank"]
    t = time.perf_counter()
    roof = roofline(count(bank, "relation_net", episode_batch(bank, args.roofline_batch)),
                    args.roofline_batch)  # fmt: skip
    seconds["roofline"] = time.perf_counter() - t
    t = time.perf_counter()
    calibration = calibrate(args, bank, out)
    seconds["calibration"] = time.perf_counter() - t
    best = max(calibration, key=lambda r: r["episodes_per_s"])
    args.mode, per_s = best["mode"], best["episodes_per_s"]
    args.device_name = torch.cuda.get_device_name(args.device) if cuda else "cpu"
    summary = {
        "machine": machine(), "device": args.device_name, "torch": torch.__version__,
        "commit": sha, "bank": args.bank, "bank_sha256": digest, "budget_s": 60 * args.minutes,
        "batch": args.batch, "cuda_checks": line, "roofline": roof, "calibration": calibration,
        "mode": args.mode, "seconds": seconds, "skipped": skipped,
    }  # fmt: skip
    # 4. the rate: the first target, always run once calibration is done
    t = time.perf_counter()
    summary["rate"] = rate_stage(args, bank, args.mode, per_s, roof, out)
    seconds["rate"] = time.perf_counter() - t
    per_s = summary["rate"]["episodes_per_s"] or per_s
    # 5. the headline cell, if a test and a little training fit
    base = {"device": args.device_name, "torch": torch.__version__, "commit": sha,
            "bank": args.bank, "bank_sha256": digest}  # fmt: skip
    todo = gpu_table.next_cells(gpu_table.cells(), records, args.bank)
    seeds = [s for c, s in todo if c == HEADLINE]
    reserve = TEST_RESERVE_S[args.kind] + best["seconds"]  # its test, start-up and validations
    left = deadline - time.perf_counter() - reserve
    args.headline_training_s = min(60 * args.headline_minutes, left)
    if seeds and args.headline_training_s > 0:
        t = time.perf_counter()
        report = headline_stage(args, Path(args.data_dir), out / "headline", t0, checks=line,
                                rate=per_s, mode=args.mode, seed=seeds[0])  # fmt: skip
        seconds["headline"] = time.perf_counter() - t
        gpu_table.append_record(args.results, {**base, **headline_record(report, seeds[0])})
        summary["headline"] = report
        todo = [(c, s) for c, s in todo if (c, s) != (HEADLINE, seeds[0])]
    else:
        skipped.append("headline: " + ("recorded 3 times" if not seeds else "no time left"))
    # 6. the table's cells with what is left
    args.first_cell_s = 60 * args.cell_minutes + reserve
    t = time.perf_counter()
    cells, left_over = table_stage(args, bank, todo, per_s, deadline, base, out)
    seconds["table"] = time.perf_counter() - t
    summary["table"] = {
        "cells": [
            {k: r[k] for k in ("pooler", "split", "negatives", "seed", "steps", "test_map")}
            for r in cells
        ],
        "cells_left": left_over,
        "results": str(args.results),
    }
    if not cells:
        skipped.append("table: no time left for a cell")
    return summary


if __name__ == "__main__":
    sys.exit(main())

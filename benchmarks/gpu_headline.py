"""The paper's headline row in one short run on one GPU: the schema relation-net on the
`paper` bank's concept_iid split with hard negatives (CURI paper, Table 2: test mAP 0.607).

    python benchmarks/gpu_headline.py [--minutes 5] [--bank paper] [--device cuda]
        [--batch 256] [--compile] [--elementwise-dtype bfloat16] [--data-dir DIR] [--out DIR]
        [--doc]

0. on CUDA, runs the CUDA-only tests first (the step replayed from a CUDA graph against the
   eager one, the device sampler's episodes on the GPU), and reports their result;
1. builds the bank if it is missing (all cores) or reuses it;
2. times a few steps with the run's settings, to size the run to `--minutes` of training;
3. trains with the fastest settings: episodes drawn on the GPU (``train.sampler=device``), the
   step replayed from a CUDA graph (with `--compile`, the compiled step), a batch of
   `--batch` episodes at the square-root-scaled learning rate
   (`curi.models.schedule.scaled_lr`), warmup then cosine decay to 0 at the last step,
   validation on 1,000 episodes at 8 points of the run (the best checkpoint is kept);
4. tests the checkpoint of the best validation mAP on 20,000 test episodes (seed 0), the
   episodes `curi eval` and `curi gap` use;
5. prints one table: steps, episodes per second, GPU utilisation (``nvidia-smi`` once a second;
   n/a without it), the validation curve, the test mAP beside the paper's, the wall time of
   every stage; ``headline.json`` in `--out` holds the same, and `--doc` writes the table into
   docs/benchmarks.md.

The whole run, bank and test included, is meant to fit in 8 minutes on one H100 or H200. On
a CPU (``--bank tiny --device cpu --minutes 0.2``) the same path runs end to end in a CI test.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PAPER_MAP = 0.607  # the paper's schema relation-net, concept_iid, hard negatives (test mAP)
BASE_BATCH, BASE_LR = 64, 1e-3  # the paper's schema batch and rate (Appendix E)
VALIDATIONS = 8  # validation points of the run


class GpuUtilisation:
    """``nvidia-smi --query-gpu=utilization.gpu`` once a second in a thread, while it runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._proc = None
        self._thread = None

    def __enter__(self) -> GpuUtilisation:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            return self
        query = ["--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "1000"]
        self._proc = subprocess.Popen([exe, *query], stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                self.samples.append(float(line.split(",")[0]))
            except ValueError:
                pass

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)

    def summary(self) -> str:
        if not self.samples:
            return "n/a"
        s = self.samples
        return f"median {statistics.median(s):.0f} %, mean {statistics.fmean(s):.0f} % ({len(s)} s)"


def step_settings(args) -> dict:
    """The step's train settings `args` asks for: ``compile`` (the whole step compiled, in the
    CUDA graph on CUDA) and ``elementwise_dtype``, each only when not the default."""
    out = {"compile": True} if getattr(args, "compile", False) else {}
    dtype = getattr(args, "elementwise_dtype", "float32")
    return out | ({"elementwise_dtype": dtype} if dtype != "float32" else {})


def run_config(args, *, steps: int, every: int, val_episodes: int, data_dir: Path, log_every=None):
    from curi.models.schedule import scaled_lr

    lr = args.lr or scaled_lr(BASE_LR, args.batch, BASE_BATCH)
    warmup = args.warmup if args.warmup is not None else max(1, steps // 50)
    train = {
        "steps": steps,
        "batch_size": args.batch,
        "lr": lr,
        "lr_schedule": "cosine",
        "warmup_steps": min(warmup, steps - 1),
        "log_every": log_every or max(1, min(100, steps // 20)),
        "eval_every": every,
        "checkpoint_every": every,
        "val_episodes": val_episodes,
        "num_workers": args.workers,
        **step_settings(args),
    }
    return relation_net_run(args.bank, args.device, data_dir, train, seed=args.seed)


def relation_net_run(bank: str, device: str, data_dir: Path, train: dict, *, modality=None, seed=0):
    """A run of the headline row's model and task (relation-net, concept_iid, hard negatives)
    on `bank`, with `train`'s settings and `modality` (default: schema)."""
    from curi.models.config import RunConfig

    return RunConfig.from_mapping(
        {
            "bank": {"name": bank},
            "split": "concept_iid",
            "negatives": "hard",
            "modality": modality or {"name": "schema"},
            "pooling": {"name": "relation_net"},
            "device": device,
            "data_dir": str(data_dir),
            "seed": seed,
            "train": train,
        }
    )


def short_run(steps: int, batch: int, **train) -> dict:
    """`train` settings of a timing run: `steps` steps of `batch`, validated once at the end on
    8 episodes, no checkpoint before it."""
    return {
        "steps": steps,
        "batch_size": batch,
        "eval_every": 10 * steps,
        "checkpoint_every": 10 * steps,
        "val_episodes": 8,
        **train,
    }


ROOT = Path(__file__).resolve().parents[1]
CUDA_TESTS = ["tests/test_step.py", "tests/test_device_sampler.py", "tests/test_device_bits.py"]


def cuda_check_command() -> list[str]:
    """The command (run in the repository's root) of the CUDA-only tests."""
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-k", "cuda"]
    return [*cmd, *CUDA_TESTS]


def check_summary(returncode: int, stdout: str, stderr: str) -> str:
    """pytest's summary line of the CUDA-only tests (their output printed when they failed)."""
    lines = [x for x in stdout.splitlines() if x.strip()]
    if returncode:
        print(stdout[-4000:], stderr[-2000:])
    return (lines[-1] if lines else stderr.strip()[-200:]) + (
        "" if returncode == 0 else " (FAILED)"
    )


def cuda_checks() -> str:
    """The CUDA-only tests (skipped in CI, which has no GPU), run here: their summary line."""
    r = subprocess.run(cuda_check_command(), cwd=ROOT, capture_output=True, text=True, timeout=900)
    return check_summary(r.returncode, r.stdout, r.stderr)


def build(args, data_dir: Path):
    from curi import BankConfig, build_bank, load_bank

    t = time.perf_counter()
    cfg = BankConfig.preset(args.bank, workers=os.cpu_count() or 1)
    bank = load_bank(build_bank(cfg, data_dir, progress=True))
    return bank, time.perf_counter() - t


def calibrate(args, bank, data_dir: Path, out: Path) -> tuple[float, float, str]:
    """Steps per second of the run's settings, from the second half of a short run (its
    start-up, graph capture included, is not counted); the seconds it took; its step mode."""
    from curi.models.train import train

    t = time.perf_counter()
    steps = args.calibration_steps
    run = run_config(
        args, steps=steps, every=steps, val_episodes=8, data_dir=data_dir, log_every=steps // 2
    )
    summary = train(run, run_dir=out / "calibration", bank=bank, progress=False)
    rows = _rows(out / "calibration")
    rate = [r["episodes_per_s"] for r in rows if r["tag"] == "train"][-1]
    return rate / args.batch, time.perf_counter() - t, summary["step_mode"]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0, help="minutes of training")
    ap.add_argument("--bank", default="paper")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=None, help="episodes per step: 256 (16 on a CPU)")
    ap.add_argument("--lr", type=float, default=None, help="default: sqrt-scaled from 1e-3 at 64")
    ap.add_argument("--warmup", type=int, default=None, help="default: 2%% of the steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--test-episodes", type=int, default=None, help="20,000 (200 on a CPU)")
    ap.add_argument("--val-episodes", type=int, default=None, help="1,000 (32 on a CPU)")
    ap.add_argument("--calibration-steps", type=int, default=None, help="60 (6 on a CPU)")
    ap.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--compile", action="store_true", help="train.compile=true: the compiled step")
    ap.add_argument("--elementwise-dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--data-dir", type=Path, default=None, help="default: curi's data folder")
    ap.add_argument("--out", type=Path, default=None, help="default: a new temporary folder")
    ap.add_argument("--doc", action="store_true", help="write the table into docs/benchmarks.md")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    t0 = time.perf_counter()
    cuda = args.device.startswith("cuda")
    # a CPU runs the same path at a size that ends in a minute or two (the CI test)
    args.batch = args.batch or (256 if cuda else 16)
    args.test_episodes = args.test_episodes or (20_000 if cuda else 200)
    args.val_episodes = args.val_episodes or (1000 if cuda else 32)
    args.calibration_steps = args.calibration_steps or (60 if cuda else 6)
    out = args.out or Path(tempfile.mkdtemp(prefix="curi-headline-"))
    from curi.bank import default_data_dir

    data_dir = args.data_dir or default_data_dir()
    report = headline(args, data_dir, out, t0)
    (out / "headline.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    print(table)
    if args.doc:
        from _report import write_section

        write_section(f"gpu-headline-{args.device.split(':')[0]}", table)


def headline(
    args, data_dir: Path, out: Path, t0: float, *, checks: str | None = None, rate=None
) -> dict:
    """Every stage of the run; returns the report. `checks`: the CUDA-only tests' line if they
    ran already; `rate`: (steps per second, step mode) measured already (no calibration)."""
    from _report import machine

    from curi.models.evaluate import evaluate_checkpoint
    from curi.models.train import train

    if checks is None:
        checks = cuda_checks() if args.device.startswith("cuda") else "n/a (no GPU)"
    bank, bank_s = build(args, data_dir)
    if rate is None:
        rate, calib_s, mode = calibrate(args, bank, data_dir, out)
    else:
        (rate, mode), calib_s = rate, 0.0
    steps = max(2, int(rate * args.minutes * 60))
    every = -(-steps // VALIDATIONS)  # at most VALIDATIONS validations
    run = run_config(
        args, steps=steps, every=every, val_episodes=args.val_episodes, data_dir=data_dir
    )
    t = time.perf_counter()
    with GpuUtilisation() as gpu:
        summary = train(run, run_dir=out / "run", bank=bank, progress=False)
    train_s = time.perf_counter() - t
    t = time.perf_counter()
    test = evaluate_checkpoint(
        out / "run",
        episodes=args.test_episodes,
        seed=0,
        oracles=False,
        device=args.device,
        num_workers=args.workers,
        bank=bank,
        per_concept=False,
    )
    test_s = time.perf_counter() - t
    rows = _rows(out / "run")
    rates = [r["episodes_per_s"] for r in rows if r["tag"] == "train"][1:] or [0.0]
    return {
        "machine": machine(),
        "bank": args.bank,
        "device": summary["device"],
        "step_mode": summary["step_mode"],
        "sampler": summary["sampler"],
        "batch": args.batch,
        "lr": run.train.lr,
        "steps": summary["steps"],
        "episodes": summary["steps"] * args.batch,
        "episodes_per_s": statistics.median(rates),
        "gpu_utilisation": gpu.summary(),
        "val": [(r["step"], r["map"]) for r in rows if r["tag"] == "val"],
        "best_step": summary["best_step"],
        "test_map": test["model"]["map"],
        "test_cba": test["model"]["cba"],
        "test_episodes": args.test_episodes,
        "val_episodes": args.val_episodes,
        "seconds": {
            "bank": bank_s,
            "calibration": calib_s,
            "training": train_s,
            "test": test_s,
            "total": time.perf_counter() - t0,
        },
        "calibration_step_mode": mode,
        "cuda_checks": checks,
    }


def markdown(r: dict) -> str:
    s = r["seconds"]
    val = ", ".join(f"{step:,}: {m:.3f}" for step, m in r["val"])
    lines = [
        f"Headline row: schema relation-net, `{r['bank']}` bank, concept_iid, hard negatives "
        f"({r['machine']}; {r['device']})",
        "",
        "| what | value |",
        "|---|---|",
        f"| steps (batch {r['batch']}, lr {r['lr']:.2g}, cosine) | {r['steps']:,} "
        f"({r['episodes']:,} episodes) |",
        f"| training episodes / s (median of the log windows) | {r['episodes_per_s']:,.0f} |",
        f"| step; sampler | {r['step_mode']}; {r['sampler']} |",
        f"| GPU utilisation | {r['gpu_utilisation']} |",
        f"| CUDA-only tests (graph step, sampler on the GPU) | {r['cuda_checks']} |",
        f"| val mAP ({r['val_episodes']:,} episodes; step: mAP; best at {r['best_step']:,}) "
        f"| {val} |",
        f"| test mAP ({r['test_episodes']:,} episodes, seed 0) | **{r['test_map']:.3f}** "
        f"(paper {PAPER_MAP}); CBA {r['test_cba']:.3f} |",
        f"| wall time | {s['total'] / 60:.1f} min: bank {s['bank']:.0f} s, calibration "
        f"{s['calibration']:.0f} s, training {s['training']:.0f} s, test {s['test']:.0f} s |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

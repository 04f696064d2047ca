"""The schema third of the paper's baseline table, cell by cell within a time budget: each
cell (pooler x split x negatives) trained and tested by `curi.models.baselines` (its run
folders, resume and table), its record appended to a results file that accumulates across
calls, commits and machines.

    python benchmarks/gpu_table.py [--minutes 9] [--bank paper] [--device cuda]
        [--cell-minutes 1.5] [--batch 256] [--test-episodes 20000] [--cells P/SPLIT/NEG ...]
        [--results docs/results/baselines_measured.json] [--out DIR] [--commit SHA]
        [--data-dir DIR] [--compile] [--elementwise-dtype bfloat16] [--render]

Cells run in the table's order (`cells`): relation-net and transformer on the nine splits with
hard negatives, then avg and concat, then the easy-negative cells (relation-net, avg, concat;
the paper ran no easy transformer). A cell already in the results file for this bank and seed
is skipped; once every cell has seed 0 the next call adds seed 1, then 2 (the paper reports the
mean and std of 3). A cell starts only while the budget leaves room for its training and test
(estimated from the cells before it), so the command ends within `--minutes`, bank build
included, except that the first cell of a call always runs. Each cell trains `--cell-minutes`
of steps at the calibrated rate, batch `--batch` at the square-root-scaled rate with warmup
and cosine decay (the recipe of docs/benchmarks.md, "Training on the GPU"), validates at 8
points, and is tested on `--test-episodes` test episodes (seed 0, the episodes `curi gap`
scores). Each finished cell is appended atomically; a killed
call loses at most the cell it was running (its run folder under `--out` resumes it).

`--render` writes the block between ``<!-- table:baselines-measured -->`` markers in
docs/fidelity.md: every one of the paper's 153 cells, measured ones beside the paper's number
(mean over the records of the cell, their budget and commit), the others marked unmeasured.

On a CPU, ``--bank tiny --device cpu --minutes 0.3`` runs the same path end to end (the CI
test).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _report import git_commit, replace_block
from gpu_headline import BASE_BATCH, BASE_LR, step_settings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "baselines_measured.json"
FIDELITY = ROOT / "docs" / "fidelity.md"
MARK = "table:baselines-measured"
REQUIRED = (
    "device", "torch", "commit", "bank", "bank_sha256", "pooler", "split", "negatives", "seed",
    "batch", "steps", "episodes", "wall_s", "test_s", "val_curve", "test_map", "test_cba",
)  # fmt: skip
SEEDS = 3  # the paper's training runs per cell
VALIDATIONS = 8


class TableError(Exception):
    """Bad input to the script: one line, exit 2, nothing written."""


def cells() -> list[tuple[str, str, str]]:
    """The schema cells in the order they are filled: (pooler, split, negatives)."""
    from curi.oracles.paper import BASELINE_SPLITS, paper_baseline

    order = [(p, "hard") for p in ("relation_net", "transformer", "avg", "concat")] + [
        (p, "easy") for p in ("relation_net", "transformer", "avg", "concat")
    ]
    return [
        (p, s, n)
        for p, n in order
        for s in BASELINE_SPLITS
        if paper_baseline("schema", p, s, n) is not None
    ]


def cell_name(cell: tuple[str, str, str]) -> str:
    return "/".join(cell)


def parse_cells(names: list[str] | None) -> list[tuple[str, str, str]]:
    known = cells()
    if not names:
        return known
    by_name = {cell_name(c): c for c in known}
    bad = [n for n in names if n not in by_name]
    if bad:
        raise TableError(
            f"unknown cell(s) {bad}: a cell is POOLER/SPLIT/NEGATIVES, e.g. "
            f"{cell_name(known[0])} ({len(known)} cells)"
        )
    return [by_name[n] for n in dict.fromkeys(names)]


def read_results(path: Path) -> list[dict]:
    """The records of `path` ([] when it does not exist), each checked for the keys."""
    if not path.exists():
        return []
    if not path.is_file():
        raise TableError(f"results file {path} is not a regular file")
    try:
        records = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise TableError(f"results file {path} does not parse as JSON ({e})") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise TableError(f"results file {path} must be a JSON list of objects")
    for i, r in enumerate(records):
        missing = [k for k in REQUIRED if k not in r]
        if missing:
            raise TableError(f"results file {path}: record {i} lacks {', '.join(missing)}")
    return records


def bank_sha256(bank) -> str:
    """The bank's manifest digest (`curi.bank_format`): names what the cells trained on."""
    from curi.bank_format import MANIFEST

    return json.loads((Path(bank.path) / MANIFEST).read_text())["manifest_sha256"]


def check_bank(records: list[dict], bank_name: str, digest: str, path: Path) -> None:
    """Refuse records of this bank's name made on a bank with other contents."""
    bad = [
        i for i, r in enumerate(records) if r["bank"] == bank_name and r["bank_sha256"] != digest
    ]
    if bad:
        raise TableError(
            f"results file {path}: records {bad} name bank {bank_name!r} with digest "
            f"{records[bad[0]]['bank_sha256'][:12]}, but this {bank_name} bank is {digest[:12]}: "
            "another bank; give another --results"
        )


def commit(given: str | None) -> str:
    if given:
        return given
    found = git_commit(short=12)
    if found is None:
        raise TableError("no git history here: give the code's commit with --commit")
    return found


def next_cells(order, records: list[dict], bank: str) -> list[tuple[tuple[str, str, str], int]]:
    """(cell, seed) still to run: every cell's lowest seed not yet recorded, seed by seed."""
    done = {
        (r["pooler"], r["split"], r["negatives"], r["seed"]) for r in records if r["bank"] == bank
    }
    return [(c, seed) for seed in range(SEEDS) for c in order if (*c, seed) not in done]


def append_record(path: Path, record: dict) -> None:
    """Add `record` to the results file atomically (read, extend, write a temporary, rename)."""
    from curi.atomic import write_text

    records = read_results(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps([*records, record], indent=1) + "\n")


def train_settings(args, steps: int) -> dict:
    from curi.models.schedule import scaled_lr

    every = max(1, -(-steps // VALIDATIONS))
    return {
        "steps": steps,
        "batch_size": args.batch,
        "lr": scaled_lr(BASE_LR, args.batch, BASE_BATCH),
        "lr_schedule": "cosine",
        "warmup_steps": min(max(1, steps // 50), steps - 1),
        "log_every": max(1, min(100, steps // 20)),
        "eval_every": every,
        "checkpoint_every": every,
        "val_episodes": args.val_episodes,
        **step_settings(args),
    }


def run_cell(args, bank, cell, seed: int, steps: int, out: Path) -> dict:
    """Train and test one cell through `curi.models.baselines`; its record."""
    from curi.models.baselines import run_baselines
    from curi.models.sweep_plan import parse_baselines, plan_runs

    pooler, split, negatives = cell
    (baseline,) = parse_baselines([{"modality": "schema", "pooling": pooler, "splits": [split]}])
    runs = plan_runs(
        [baseline],
        bank=bank.config,
        train=train_settings(args, steps),
        out_dir=out / negatives,
        seeds=[seed],
        negatives=negatives,
        device=args.device,
        data_dir=args.data_dir,
    )
    t = time.perf_counter()
    table = run_baselines(
        runs,
        bank=bank,
        out_dir=out / negatives,
        episodes=args.test_episodes,
        oracles=False,
        progress=False,
    )
    wall = time.perf_counter() - t
    (result,) = table["runs"]
    rows = [
        json.loads(x)
        for x in (runs[0].dir / "train" / "metrics.jsonl").read_text().split("\n")
        if x
    ]
    return {
        "pooler": pooler,
        "split": split,
        "negatives": negatives,
        "seed": seed,
        "batch": args.batch,
        "steps": result["steps"],
        "episodes": result["steps"] * args.batch,
        "wall_s": round(wall, 1),
        "train_s": result["train_seconds"],
        "test_s": result["eval_seconds"],
        "val_curve": [[r["step"], r["map"]] for r in rows if r.get("tag") == "val"],
        "best_val_map": result["best_val_map"],
        "checkpoint_step": result["checkpoint_step"],
        "test_map": result["test_map"],
        "test_cba": result["test_cba"],
        "test_episodes": result["test_episodes"],
        "device_name": result["device"],
    }


def calibrate(args, bank, out: Path) -> float:
    """Steps per second of a relation-net cell's settings (the slowest pooler), from a short
    run's last log window."""
    from curi.models.config import RunConfig
    from curi.models.train import train

    steps = args.calibration_steps
    settings = {
        **train_settings(args, steps),
        "log_every": max(1, steps // 2),
        **dict.fromkeys(("eval_every", "checkpoint_every"), steps),
        "val_episodes": 8,
    }
    run = RunConfig.from_mapping(
        {
            "bank": dict(bank.config),
            "split": "concept_iid",
            "pooling": {"name": "relation_net"},
            "device": args.device,
            "data_dir": args.data_dir,
            "train": settings,
        }
    )
    train(run, run_dir=out / "calibration", bank=bank, progress=False)
    rows = [
        json.loads(x) for x in (out / "calibration" / "metrics.jsonl").read_text().split("\n") if x
    ]
    return [r["episodes_per_s"] for r in rows if r.get("tag") == "train"][-1] / args.batch


def fill(args, bank, todo, out: Path, t0: float, base: dict) -> list[dict]:
    """Run cells while the budget has room for one more (train + test, as measured so far)."""
    deadline = t0 + 60 * args.minutes
    rate = calibrate(args, bank, out)
    steps = max(2, int(rate * 60 * args.cell_minutes))
    print(f"calibrated: {rate:.2f} steps/s -> {steps} steps of {args.batch} a cell", flush=True)
    done, spent = [], []
    for cell, seed in todo:
        need = statistics.median(spent) if spent else 60 * args.cell_minutes * 1.5
        if done and time.perf_counter() + need > deadline:
            break  # the first cell always runs: a call that measures nothing is no use
        t = time.perf_counter()
        record = {**base, **run_cell(args, bank, cell, seed, steps, out)}
        append_record(args.results, record)
        spent.append(time.perf_counter() - t)
        done.append(record)
        print(
            f"{cell_name(cell)} seed {seed}: test mAP {record['test_map']:.3f} "
            f"({record['steps']} steps, {record['wall_s']:.0f} s)",
            flush=True,
        )
    return done


def render(records: list[dict], doc: Path = FIDELITY) -> None:
    """Replace the marked block of docs/fidelity.md with every paper cell, measured or not."""
    from curi.oracles.paper import PAPER_BASELINES

    lines = [
        "| modality | pooler | split | negatives | measured mAP (runs) | paper | difference "
        "| budget (episodes) | bank | commit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for neg, table in PAPER_BASELINES.items():
        for (modality, pooler), row in table.items():
            for split, (mean, std) in row.items():
                paper = f"{mean:.1f}" + (f" ± {std:.1f}" if std is not None else "")
                rs = [
                    r
                    for r in records
                    if modality == "schema"
                    and (r["pooler"], r["split"], r["negatives"]) == (pooler, split, neg)
                ]
                if not rs:
                    cell = f"| {modality} | {pooler} | {split} | {neg} | unmeasured | {paper} |"
                    lines.append(cell + " | | | |")
                    continue
                m = 100 * statistics.fmean(r["test_map"] for r in rs)
                budget = ", ".join(f"{r['episodes']:,}" for r in rs)
                banks = ", ".join(sorted({r["bank"] for r in rs}))
                commits = ", ".join(dict.fromkeys(r["commit"][:9] for r in rs))
                lines.append(
                    f"| {modality} | {pooler} | {split} | {neg} | {m:.1f} ({len(rs)}) | {paper} "
                    f"| {m - mean:+.1f} | {budget} | {banks} | {commits} |"
                )
    try:
        replace_block(doc, MARK, "\n".join(lines))
    except ValueError as e:
        raise TableError(str(e)) from None


def arguments(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=9.0, help="the whole call's budget")
    ap.add_argument(
        "--cell-minutes", type=float, default=None, help="training per cell (1.5; CPU 0.02)"
    )
    ap.add_argument("--bank", default="paper")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=None, help="episodes per step (256; CPU 8)")
    ap.add_argument("--test-episodes", type=int, default=None, help="20,000 on CUDA, 100 on a CPU")
    ap.add_argument("--val-episodes", type=int, default=None, help="1,000 on CUDA, 16 on a CPU")
    ap.add_argument("--calibration-steps", type=int, default=None, help="60 (4 on a CPU)")
    ap.add_argument("--cells", nargs="+", default=None, help="POOLER/SPLIT/NEGATIVES names")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, default=None, help="run folders (default: temporary)")
    ap.add_argument("--data-dir", default=None, help="default: curi's data folder")
    ap.add_argument("--commit", default=None, help="the code's commit (default: git's HEAD)")
    ap.add_argument("--render", action="store_true", help="write the table into docs/fidelity.md")
    ap.add_argument("--compile", action="store_true", help="train.compile=true: the compiled step")
    ap.add_argument("--elementwise-dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args(argv)
    if not (math.isfinite(args.minutes) and args.minutes > 0):
        raise TableError(f"--minutes must be a positive number of minutes, got {args.minutes}")
    cuda = args.device.startswith("cuda")
    args.cell_minutes = args.cell_minutes or (1.5 if cuda else 0.02)
    args.batch = args.batch or (256 if cuda else 8)
    args.test_episodes = args.test_episodes or (20_000 if cuda else 100)
    args.val_episodes = args.val_episodes or (1000 if cuda else 16)
    args.calibration_steps = args.calibration_steps or (60 if cuda else 4)
    return args


def main(argv=None) -> int:
    t0 = time.perf_counter()
    try:
        args = arguments(argv)
        order = parse_cells(args.cells)
        records = read_results(args.results)
        sha = commit(args.commit)
        if args.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise TableError(f"--device {args.device} asked for, but torch sees no GPU")
    except TableError as e:
        print(f"gpu_table.py: {e}", file=sys.stderr)
        return 2
    import torch

    from curi import BankConfig, build_bank, load_bank
    from curi.bank import default_data_dir

    args.data_dir = str(args.data_dir or default_data_dir())
    bank = load_bank(
        build_bank(BankConfig.preset(args.bank, workers=os.cpu_count() or 1), args.data_dir)
    )
    digest = bank_sha256(bank)
    try:
        check_bank(records, args.bank, digest, args.results)
    except TableError as e:
        print(f"gpu_table.py: {e}", file=sys.stderr)
        return 2
    print(f"bank {args.bank} ready after {time.perf_counter() - t0:.0f} s", flush=True)
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    base = {"device": device, "torch": torch.__version__, "commit": sha, "bank": args.bank,
            "bank_sha256": digest}  # fmt: skip
    out = args.out or Path(tempfile.mkdtemp(prefix="curi-table-"))
    todo = next_cells(order, records, args.bank)
    done = fill(args, bank, todo, out, t0, base) if todo else []
    print(
        f"{len(done)} cell(s) measured in {time.perf_counter() - t0:.0f} s; "
        f"{len(todo) - len(done)} of this seed order left; results in {args.results}"
    )
    if args.render:
        render(read_results(args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

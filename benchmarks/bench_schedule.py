"""Training recipes at a fixed budget of episodes, on the CPU: the schema relation-net (the
paper's model) on concept_iid with hard negatives, trained with each recipe of `RECIPES` for
`--episodes` episodes and validated at `--points` points of the run, for each seed.

    python benchmarks/bench_schedule.py [--recipes paper sqrt-256 ...] [--episodes 30000]
        [--seeds 0 1 2] [--bank default] [--val-episodes 500] [--results FILE]
    python benchmarks/bench_schedule.py --render [--results FILE]

A recipe is a batch, a peak learning rate, a schedule (`curi.models.schedule`) and a warm-up
as a share of the steps. The rates of batches other than the paper's 64 follow Adam's
square-root rule (`scaled_lr`) except in ``same-lr-256``, which keeps the paper's rate to test
that rule. Each finished run is added to `--results` at once (a JSON list, written atomically
under a lock, so two processes can share it); runs already there are skipped, so an
interrupted comparison resumes. ``--render`` writes the records' tables into
docs/benchmarks.md (section ``recipes-cpu``) and their curves into
docs/results/recipes_cpu.png.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _report import DOC, git_commit, machine, write_section
from gpu_headline import BASE_BATCH, BASE_LR

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results" / "recipes_cpu.json"
CHART = RESULTS.with_suffix(".png")

# name: (batch, square-root rule, schedule, warm-up share of the steps)
RECIPES = {
    "paper": (64, True, "constant", 0.0),
    "cosine-64": (64, True, "cosine", 0.02),
    "cosine-64-no-warmup": (64, True, "cosine", 0.0),
    "sqrt-16": (16, True, "cosine", 0.02),
    "sqrt-256": (256, True, "cosine", 0.02),  # gpu_headline.py's recipe
    "same-lr-256": (256, False, "cosine", 0.02),
}
KEYS = ("bank", "split", "recipe", "episodes", "seed", "val_episodes")
REQUIRED = (*KEYS, "batch", "lr", "schedule", "warmup_steps", "steps", "val_curve", "wall_s")


def recipe_train(name: str, episodes: int, points: int) -> dict:
    """The ``train`` settings of recipe `name` for a budget of `episodes` episodes, validated at
    `points` evenly spaced steps (the last one included)."""
    from curi.models.schedule import scaled_lr

    batch, sqrt_rule, schedule, warmup_share = RECIPES[name]
    steps = max(1, episodes // batch)
    every = max(1, steps // points)
    return {
        "steps": steps,
        "batch_size": batch,
        "lr": scaled_lr(BASE_LR, batch, BASE_BATCH) if sqrt_rule else BASE_LR,
        "lr_schedule": schedule,
        "warmup_steps": min(steps - 1, round(warmup_share * steps)) if warmup_share else 0,
        "log_every": every,
        "eval_every": every,
        "checkpoint_every": steps,
        "num_workers": 1,
        "sampler": "device",
    }


def one_run(bank, name: str, seed: int, args) -> dict:
    """Train recipe `name` with `seed` and return its record (the val curve by episodes)."""
    from curi.models.config import RunConfig
    from curi.models.train import train

    settings = recipe_train(name, args.episodes, args.points) | {"val_episodes": args.val_episodes}
    run = RunConfig.from_mapping(
        {
            "bank": dict(bank.config),
            "split": args.split,
            "negatives": "hard",
            "pooling": {"name": "relation_net"},
            "device": "cpu",
            "seed": seed,
            "train": settings,
        }
    )
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="curi-recipe-") as tmp:
        train(run, run_dir=Path(tmp) / "run", bank=bank, progress=False)
        rows = [json.loads(x) for x in (Path(tmp) / "run" / "metrics.jsonl").open()]
    batch = settings["batch_size"]
    return {
        "bank": bank.config["name"],
        "split": args.split,
        "recipe": name,
        "episodes": args.episodes,
        "seed": seed,
        "val_episodes": args.val_episodes,
        "batch": batch,
        "lr": settings["lr"],
        "schedule": settings["lr_schedule"],
        "warmup_steps": settings["warmup_steps"],
        "steps": settings["steps"],
        "val_curve": [[r["step"] * batch, r["map"]] for r in rows if r["tag"] == "val"],
        "wall_s": round(time.perf_counter() - t, 1),
        "commit": git_commit() or "unknown",
        "machine": machine(),
    }


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on `path`'s folder while the block runs (shared by processes)."""
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def read(path: Path) -> list[dict]:
    """The records at `path` ([] if there is no file).

    Raises:
        SystemExit: the file does not parse, is not a list, or a record lacks a key.
    """
    if not path.exists():
        return []
    try:
        rows = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path} is not JSON ({e}); nothing was written") from None
    if not isinstance(rows, list):
        raise SystemExit(f"{path} is not a JSON list; nothing was written")
    for i, r in enumerate(rows):
        missing = [k for k in REQUIRED if not isinstance(r, dict) or k not in r]
        if missing:
            raise SystemExit(f"{path}: record {i} lacks {', '.join(missing)}; nothing was written")
    return rows


def append(record: dict, path: Path) -> None:
    """Add `record` to the records at `path` (atomically, under a lock), replacing one with the
    same `KEYS`."""
    from curi.atomic import write_text

    key = tuple(record[k] for k in KEYS)
    with _locked(path):
        rows = [r for r in read(path) if tuple(r[k] for k in KEYS) != key] + [record]
        write_text(path, json.dumps(rows, indent=1) + "\n")


def _groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Records by (bank, split, episodes, val_episodes, recipe), in `RECIPES` order."""
    order = {name: i for i, name in enumerate(RECIPES)}
    out: dict[tuple, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["episodes"], order.get(r["recipe"], 99), r["seed"])):
        out.setdefault(
            (r["bank"], r["split"], r["episodes"], r["val_episodes"], r["recipe"]), []
        ).append(r)
    return out


def _mean_sd(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.3f}"
    return f"{statistics.fmean(xs):.3f} ± {statistics.stdev(xs):.3f}"


def _at(curve: list[list], share: float, episodes: int) -> float:
    """The val mAP of the last validation at or before `share` of the budget."""
    done = [m for e, m in curve if e <= share * episodes + 1e-9]
    return done[-1] if done else float("nan")


def tables(rows: list[dict]) -> str:
    """Two tables per (bank, split, budget): each recipe's val mAP at a quarter, half and the
    end of the budget (mean ± sd over its seeds), the best point and minutes per run; then its
    curve, the mean val mAP at each tenth of the budget."""
    budgets: dict[tuple, list[tuple]] = {}
    for key, runs in _groups(rows).items():
        budgets.setdefault(key[:4], []).append((key[4], runs))
    out = []
    for (bank, split, episodes, val_episodes), recipes in budgets.items():
        out += [
            f"**{episodes:,} episodes**, `{bank}` bank, {split}, hard negatives; val mAP on "
            f"{val_episodes:,} val episodes (mean ± sd over seeds):",
            "",
            "| recipe | batch | lr | schedule, warm-up | seeds | at 1/4 | at 1/2 | at the end "
            "| end, per seed | best point | min per run |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, runs in recipes:
            r0 = runs[0]
            warm = f"{r0['warmup_steps']} steps" if r0["warmup_steps"] else "none"
            at = [[_at(r["val_curve"], s, episodes) for r in runs] for s in (0.25, 0.5, 1.0)]
            best = [max(m for _, m in r["val_curve"]) for r in runs]
            minutes = statistics.median(r["wall_s"] for r in runs) / 60
            seeds = ", ".join(str(r["seed"]) for r in runs)
            out.append(
                f"| {name} | {r0['batch']} | {r0['lr']:.2g} | {r0['schedule']}, {warm} | {seeds} "
                f"| {_mean_sd(at[0])} | {_mean_sd(at[1])} | **{_mean_sd(at[2])}** "
                f"| {', '.join(f'{m:.3f}' for m in at[2])} | {_mean_sd(best)} | {minutes:.1f} |"
            )
        tenths = [k / 10 for k in range(1, 11)]
        out += [
            "",
            "| curve: mean val mAP at | "
            + " | ".join(f"{s * episodes:,.0f}" for s in tenths)
            + " |",
            "|---" * 11 + "|",
        ]
        for name, runs in recipes:
            means = [
                statistics.fmean(_at(r["val_curve"], s, episodes) for r in runs) for s in tenths
            ]
            out.append(f"| {name} | " + " | ".join(f"{m:.3f}" for m in means) + " |")
        out.append("")
    commits = sorted({r.get("commit", "unknown") for r in rows})
    machines = sorted({r.get("machine", "unknown") for r in rows})
    out.append(f"Measured at commit {', '.join(commits)} on {'; '.join(machines)}.")
    return "\n".join(out)


def chart(rows: list[dict], path: Path = CHART) -> None:
    """Mean val mAP against episodes, one panel per budget, one line per recipe."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(rows)
    budgets = sorted({key[2] for key in groups})
    fig, axes = plt.subplots(1, len(budgets), figsize=(5.5 * len(budgets), 4), squeeze=False)
    for ax, episodes in zip(axes[0], budgets, strict=True):
        for key, runs in groups.items():
            if key[2] != episodes:
                continue
            xs = [e for e, _ in runs[0]["val_curve"]]
            curves = [
                [m for _, m in r["val_curve"]] for r in runs if len(r["val_curve"]) == len(xs)
            ]
            ys = [statistics.fmean(c) for c in zip(*curves, strict=True)]
            seeds = f"{len(curves)} seed" + ("s" if len(curves) > 1 else "")
            ax.plot(xs, ys, "o-", ms=3, label=f"{key[4]} ({seeds})")
        ax.set_xlabel("training episodes")
        ax.set_ylabel("val mAP")
        ax.set_title(f"{episodes:,}-episode budget")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(rows: list[dict], doc: Path = DOC, chart_path: Path = CHART) -> None:
    if not rows:
        raise SystemExit("no records to render")
    write_section("recipes-cpu", tables(rows), doc)
    chart(rows, chart_path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--episodes", type=int, default=30_000, help="training episodes per run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--points", type=int, default=10, help="validations per run")
    ap.add_argument("--val-episodes", type=int, default=500)
    ap.add_argument("--bank", default="default", help="a preset name or a bank folder")
    ap.add_argument("--split", default="concept_iid")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--render", action="store_true", help="only render the records")
    args = ap.parse_args(argv)
    rows = read(args.results)  # refuse a broken file before any training
    if args.render:
        render(rows)
        return 0
    if not os.access(args.results.parent, os.W_OK | os.X_OK):
        raise SystemExit(f"{args.results.parent} is not a writable folder; nothing was trained")
    if args.episodes < 256 or args.points < 1 or args.val_episodes < 1:
        ap.error(
            "--episodes must be at least 256 (one step of the largest batch), "
            "--points and --val-episodes at least 1"
        )

    import torch

    import curi

    torch.set_num_threads(1)
    path = Path(args.bank)  # a bank folder, or a preset built if missing
    bank = curi.load_bank(path if path.is_dir() else curi.build_bank(args.bank, progress=False))
    for name in args.recipes:
        for seed in args.seeds:
            key = (bank.config["name"], args.split, name, args.episodes, seed, args.val_episodes)
            if any(tuple(r[k] for k in KEYS) == key for r in read(args.results)):
                print(f"{name} seed {seed}: recorded, skipped", flush=True)
                continue
            rec = one_run(bank, name, seed, args)
            append(rec, args.results)
            end = rec["val_curve"][-1][1]
            print(
                f"{name} seed {seed}: val mAP {end:.3f} at the end, {rec['wall_s']:.0f} s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The gap-versus-divergence study (the `curi curve` command of `curi.oracles.cli`): MCD splits
made to order at compound divergences from 0 to the highest the generator reaches, several
seeds each, the oracles' compositionality gap on each, and how well D_C predicts it (Pearson
and Spearman), with the paper's nine splits as labelled points. Writes curve.json, curve.md
and curve.png.

Models: `oracles` may not import `models` (docs/ARCHITECTURE), so a model's mAP enters as
results: every generated split is saved under ``output_dir/splits/`` (train and evaluate a
model on each with ``curi train split=FILE`` / ``curi eval``) and ``model_results`` names a
JSON file mapping split names to a model's mAP, plotted beside the oracles."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from curi.atomic import atomic_path, remove, write_text
from curi.errors import ConfigError, SplitError
from curi.jobs import Launcher
from curi.paths import read_text
from curi.schema import check_shape
from curi.splits import PAPER_SPLITS, make_split, save_split
from curi.validate import number

__all__ = [
    "MIN_STEP",
    "check_curve_folder",
    "check_step",
    "collect_curve",
    "correlations",
    "divergence_curve",
    "markdown",
    "point_job",
    "targets",
    "write_curve",
]

log = logging.getLogger("curi")
METRICS = ("map_gap", "cba_gap")
MIN_STEP = 0.005  # D_C lies in [0, 1]: at most 201 targets per seed


def check_step(step) -> float:
    """`step` as the spacing of the target D_C values: a finite number in [MIN_STEP, 1], so the
    number of targets (and of jobs) is bounded.

    Raises:
        ConfigError: naming the value, the range and the bound on the targets.
    """
    try:
        return number(step, "step", low=MIN_STEP, high=1.0)
    except ConfigError as e:
        most = round(1 / MIN_STEP) + 1
        raise ConfigError(f"{e} (D_C lies in [0, 1]: at most {most} targets)") from None


def targets(max_dc: float, step: float) -> list[float]:
    """0, step, 2 step, ... up to `max_dc` (rounded to 1e-9).

    Raises:
        ConfigError: a `step` that `check_step` refuses.
    """
    step = check_step(step)
    n = int(math.floor(max_dc / step + 1e-9))
    return [round(k * step, 6) for k in range(n + 1)]


def correlations(x: Sequence[float], y: Sequence[float]) -> dict[str, float | None]:
    """Pearson r and Spearman rho of two equal-length series (None with < 3 points or a
    constant series)."""
    from scipy import stats

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"pearson": None, "spearman": None, "n": int(len(x))}
    return {
        "pearson": float(stats.pearsonr(x, y)[0]),
        "spearman": float(stats.spearmanr(x, y)[0]),
        "n": int(len(x)),
    }


def divergence_curve(
    bank,
    *,
    mcd: Mapping | None = None,
    step: float = 0.1,
    seeds: Sequence[int] = (0, 1, 2),
    negatives: Sequence[str] = ("hard",),
    episodes: int = 2000,
    paper_splits: bool = True,
    split_dir: str | Path | None = None,
    model_results: Mapping[str, float] | None = None,
    workers: int = 0,
    progress: bool = True,
    out_dir: str | Path | None = None,
    launcher: Launcher | None = None,
) -> dict:
    """Generate the MCD splits of the study, run the oracles on them and correlate.

    The work is jobs (`curi.jobs`, run by `launcher`; None: in this process): first one per
    seed that generates the split of the highest D_C (it sets the range of targets), then one
    per (target, seed) and one for the paper's splits, each making its split and scoring the
    oracles on it. Each writes its point to ``<out_dir>/points/<name>.json`` with the settings
    it was made with, so a finished point is reused by the next invocation; the result is
    collected from the points (`collect_curve`). A job that failed is listed in ``failed``.

    Args:
        bank: a `ConceptBank`.
        mcd: options of rule ``mcd`` (defaults of `curi.splits.mcd.McdOptions` otherwise).
        step: spacing of the target D_C values.
        seeds: seeds of the MCD generator per target.
        negatives: types of negatives of the oracles' episodes.
        episodes: test episodes per (split, negatives).
        paper_splits: also measure the paper's nine splits (labelled points).
        split_dir: where to save every generated split (reusable with ``split=FILE``).
        model_results: split name -> a model's mAP on that split.
        workers: processes of the oracles within a job run in this process (0: one per core;
            a job in a process of its own uses one).
        progress: progress bars.
        out_dir: where the points are kept (None: a temporary folder).
        launcher: where the jobs run (`curi.jobs.Launcher`), each with one torch thread
            unless its ``threads`` says otherwise (`curi.jobs.Launcher.for_sweep`; recorded
            in ``points/plan.json``).

    Returns:
        ``rows`` (one per split and negatives, with D_A, D_C and the gaps), ``targets``,
        ``failed`` (targets the generator could not reach, and jobs that failed, with the
        message), ``max_dc`` per seed, ``correlations`` and ``seconds``.

    Raises:
        ConfigError: a `step` that `check_step` refuses (before any job runs).
    """
    step = check_step(step)
    with _points_folder(out_dir) as out:
        t0 = time.perf_counter()
        launcher = (launcher or Launcher()).for_sweep()
        where = bank if launcher.in_process else str(bank.path)
        common = _job_settings(mcd, negatives, episodes, workers, split_dir, launcher)
        first = {f"mcd_max_s{seed}": (seed, None) for seed in seeds}
        _run_points(where, first, common, out, launcher, progress)
        max_dc = _max_dcs(out, first, common)
        tgts, second = _target_points(max_dc, step, seeds, paper_splits)
        _run_points(where, second, common, out, launcher, progress)
        plan = {"settings": {**common, "split_dir": None}, "points": [*first, *second]}
        plan.update(targets=tgts, max_dc=max_dc, seconds=round(time.perf_counter() - t0, 1))
        plan["threads"] = launcher.threads
        write_text(out / "points" / "plan.json", json.dumps(plan, indent=2) + "\n")
        return collect_curve(out, model_results=model_results)


@contextlib.contextmanager
def _points_folder(out_dir: str | Path | None) -> Iterator[Path]:
    """`out_dir` as a path; None: a temporary folder, removed when the block ends."""
    if out_dir is not None:
        yield Path(out_dir)
        return
    tmp = Path(tempfile.mkdtemp(prefix="curi-curve-"))
    try:
        yield tmp
    finally:
        remove(tmp, root=tmp.parent)


def _job_settings(mcd, negatives, episodes, workers, split_dir, launcher: Launcher) -> dict:
    """The settings every job of the study gets: the MCD options (less ``target_dc``), the
    oracles' negatives and episodes, their workers (one in a process of its own), `split_dir`."""
    base = {"rule": "mcd", "progress": False, **dict(mcd or {})}
    base.pop("target_dc", None)
    return {
        "base": base,
        "negatives": list(negatives),
        "episodes": int(episodes),
        "workers": int(workers) if launcher.in_process else 1,
        "split_dir": None if split_dir is None else str(split_dir),
    }


def _max_dcs(out: Path, first: Mapping, common: Mapping) -> dict:
    """Seed -> the highest D_C its generator reached, from the points of `first` written."""
    max_dc = {}
    for name, (seed, _) in first.items():
        point = _read_point(out, name, common)
        if point is not None and "d_compound" in point:
            max_dc[seed] = point["d_compound"]
    return max_dc


def _target_points(max_dc: Mapping, step: float, seeds, paper_splits: bool) -> tuple[list, dict]:
    """The targets (up to the lowest maximum D_C) and the points of the second round: one per
    (target below that maximum, seed), and ``paper`` with `paper_splits`."""
    tgts = targets(min(max_dc.values()), step) if max_dc else []
    below = [t for t in tgts if t < min(max_dc.values()) - 1e-9] if max_dc else []
    second = {f"mcd_{t:.2f}_s{seed}": (seed, t) for t in below for seed in seeds}
    if paper_splits:
        second["paper"] = (None, None)
    return tgts, second


def _point_path(out: Path, name: str) -> Path:
    return out / "points" / f"{name}.json"


# The shapes of the files the study reads back (`curi.schema`): the plan, and a point that
# failed, did not reach its target or holds its gap rows.
_NUMBER = (float, None)
_PLAN = {
    "settings": {"negatives": [str]},
    "points": [str],
    "targets": [float],
    "max_dc": {int: float},
    "seconds": float,
}
_ROW = {"split": str, "negatives": str, "d_compound": float}
_ROW.update({f"{k}?": _NUMBER for k in ("d_atom", *METRICS)})
_WHERE = {"seed": (int, None), "target_dc": _NUMBER}
_POINTS = {
    "error": {"error": str},
    "unreached": {"unreached": str, **_WHERE},
    "rows": {"rows": [_ROW], "d_compound?": float, **_WHERE},
}
_REDO = "remove it to compute that point again"


def _read_point(out: Path, name: str, common: Mapping) -> dict | None:
    """A point written with the same settings, or None.

    Raises:
        ConfigError: the point's file is not a regular file (a FIFO), or has another shape
            than `point_job` writes (edited or damaged).
    """
    path = _point_path(out, name)
    text = read_text(path, "curve point", missing_ok=True)
    try:
        point = json.loads(text or "")
    except (ValueError, RecursionError):
        return None
    what = f"point file {str(path)!r}"
    check_shape(point, {"settings": dict}, what, fix=_REDO)
    mine = {k: v for k, v in common.items() if k not in ("workers", "split_dir")}
    if point["settings"] != mine:
        return None
    kind = next((k for k in ("error", "unreached") if k in point), "rows")
    return check_shape(point, _POINTS[kind], what, fix=_REDO)


def _run_points(where, points: Mapping, common: Mapping, out: Path, launcher, progress) -> None:
    """Run the jobs of the points not already written with the same settings."""
    from curi.jobs import Job, run_jobs

    jobs = [
        Job(name, point_job, (where, name, seed, target, dict(common), str(out)))
        for name, (seed, target) in points.items()
        if _read_point(out, name, common) is None
    ]
    for o in run_jobs(jobs, launcher, progress=progress and not launcher.in_process):
        if not o.ok:  # its point records the failure for the collect step
            mine = {k: v for k, v in common.items() if k not in ("workers", "split_dir")}
            body = {"name": o.name, "settings": mine, "error": o.error or "failed"}
            write_text(_point_path(out, o.name), json.dumps(body, indent=2) + "\n")


def point_job(bank, name: str, seed, target, common: Mapping, out_dir: str) -> dict:
    """A job: one point of the study (the split `name` of the MCD generator at `target` D_C
    with `seed`, its maximum when `target` is None; ``paper``: the paper's nine splits), the
    oracles' gap rows on it, written to ``<out_dir>/points/<name>.json``. A target the
    generator cannot reach is a point with its message, not an error. `bank`: a bank or its
    path (opened in the job's process)."""
    from curi.bank import load_bank
    from curi.oracles.gap import compositionality_gap

    bank = load_bank(bank) if isinstance(bank, str) else bank
    mine = {k: v for k, v in common.items() if k not in ("workers", "split_dir")}
    point = {"name": name, "settings": mine, "seed": seed, "target_dc": target}
    gap = {"episodes": common["episodes"], "workers": common["workers"], "progress": False}
    if name == "paper":
        point["rows"] = compositionality_gap(bank, list(PAPER_SPLITS), common["negatives"], **gap)
    else:
        spec = {**common["base"], "name": name, "seed": seed}
        if target is not None:
            spec["target_dc"] = target
        try:
            s = make_split(bank, spec)
        except SplitError as e:
            if target is None:
                raise
            point["unreached"] = str(e)
            log.warning("curve: %s", e)
        else:
            log.info("curve: %s D_C %.3f (%.0f s)", name, s.info["d_compound"], s.info["seconds"])
            if common.get("split_dir"):
                save_split(s, bank, Path(common["split_dir"]) / f"{name}.json")
            point["d_compound"] = s.info["d_compound"]
            point["rows"] = compositionality_gap(bank, [s], common["negatives"], **gap)
    write_text(_point_path(Path(out_dir), name), json.dumps(point, indent=2) + "\n")
    return point


def check_curve_folder(out_dir: str | Path) -> None:
    """Refuse a folder that holds no curve of `divergence_curve` (no ``points/plan.json``);
    cheap, so `curi curve collect` checks it first.

    Raises:
        ConfigError: naming the folder.
    """
    if not os.path.lexists(Path(out_dir) / "points" / "plan.json"):
        raise ConfigError(f"{out_dir} holds no divergence curve (no points/plan.json)")


def collect_curve(out_dir: str | Path, *, model_results: Mapping[str, float] | None = None) -> dict:
    """The study collected from the points of `divergence_curve` under `out_dir` (as it
    returns it); a point that is missing or failed is listed in ``failed``.

    Raises:
        ConfigError: `out_dir` holds no curve (no ``points/plan.json``), a file of it is not
            a regular file (a FIFO), or its plan or a point has another shape than the study
            writes (edited or damaged).
    """
    out = Path(out_dir)
    path = out / "points" / "plan.json"
    text = read_text(path, "curve plan", missing_ok=True)
    if text is None:
        check_curve_folder(out)
    try:
        plan = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"{out} holds no divergence curve (no points/plan.json)") from e
    fix = "run the curve's command again to write it anew"
    check_shape(plan, _PLAN, f"plan file {str(path)!r}", fix=fix)
    rows, failed = [], []
    for name in plan["points"]:
        point = _read_point(out, name, {**plan["settings"], "workers": None})
        if point is None or "error" in point:
            error = (
                "missing (not run, still running or killed)" if point is None else point["error"]
            )
            failed.append({"target_dc": None, "seed": None, "point": name, "error": error})
        elif "unreached" in point:
            failed.append(
                {
                    "target_dc": point["target_dc"],
                    "seed": point["seed"],
                    "error": point["unreached"],
                }
            )
        else:
            kind = "paper" if name == "paper" else "mcd"
            for r in point["rows"]:
                r.update(kind=kind, target_dc=point["target_dc"], seed=point["seed"])
                if model_results and r["split"] in model_results:
                    r["model_map"] = float(model_results[r["split"]])
                rows.append(r)
    corr = {}
    for neg in plan["settings"]["negatives"]:
        mcd_rows = [r for r in rows if r["negatives"] == neg and r["kind"] == "mcd"]
        all_rows = [r for r in rows if r["negatives"] == neg and r.get("d_compound") is not None]
        for metric in (*METRICS, "model_map"):
            for label, sub in (("mcd", mcd_rows), ("all", all_rows)):
                sub = [r for r in sub if r.get(metric) is not None]
                if sub:
                    corr[f"{neg}/{metric}/{label}"] = correlations(
                        [r["d_compound"] for r in sub], [r[metric] for r in sub]
                    )
    return {
        "rows": rows,
        "targets": plan["targets"],
        "max_dc": {int(k): v for k, v in plan["max_dc"].items()},
        "failed": failed,
        "correlations": corr,
        "seconds": plan["seconds"],
    }


def _binned(rows: list[dict], metric: str) -> list[tuple[float, float, float, float, int]]:
    """(mean D_C, sd D_C, mean metric, sd metric, n) of the MCD rows per target."""
    out = []
    for t in sorted({r["target_dc"] if r["target_dc"] is not None else 9.0 for r in rows}):
        sub = [r for r in rows if (r["target_dc"] if r["target_dc"] is not None else 9.0) == t]
        sub = [r for r in sub if r.get(metric) is not None]
        if not sub:
            continue
        x = np.array([r["d_compound"] for r in sub])
        y = np.array([r[metric] for r in sub])
        out.append((x.mean(), x.std(), y.mean(), y.std(), len(sub)))
    return out


def markdown(result: dict) -> str:
    """The study as Markdown: per target, mean +- sd over seeds; the paper's splits; the
    correlations."""
    lines = ["# Gap versus compound divergence\n"]
    for neg in sorted({r["negatives"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["negatives"] == neg]
        mcd = [r for r in rows if r["kind"] == "mcd"]
        lines += [
            f"\n## {neg} negatives\n",
            "| split | target D_C | D_C | D_A | mAP gap | CBA gap | model mAP |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in sorted(rows, key=lambda r: (r["kind"] != "mcd", r.get("d_compound") or 0)):
            cells = [
                r["split"],
                "max"
                if r["kind"] == "mcd" and r["target_dc"] is None
                else ("" if r["target_dc"] is None else f"{r['target_dc']:.1f}"),
            ]
            for k in ("d_compound", "d_atom", "map_gap", "cba_gap", "model_map"):
                cells.append("" if r.get(k) is None else f"{r[k]:.3f}")
            lines.append("| " + " | ".join(cells) + " |")
        lines += [
            "",
            "Per target (mean ± sd over seeds):",
            "",
            "| D_C | mAP gap | CBA gap | n |",
            "|---|---|---|---|",
        ]
        for (x, _, m, ms, n), (_, _, c, cs, _) in zip(
            _binned(mcd, "map_gap"), _binned(mcd, "cba_gap"), strict=False
        ):
            lines.append(f"| {x:.3f} | {m:.3f} ± {ms:.3f} | {c:.3f} ± {cs:.3f} | {n} |")
    lines += [
        "",
        "## Correlation with D_C",
        "",
        "| negatives/metric/points | Pearson r | Spearman rho | n |",
        "|---|---|---|---|",
    ]
    for key, c in result["correlations"].items():
        f = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
        lines.append(f"| {key} | {f(c['pearson'])} | {f(c['spearman'])} | {c['n']} |")
    unreached = [f for f in result["failed"] if not f.get("point")]
    if unreached:
        lines += ["", "## Targets not reached", ""]
        lines += [f"- {f['target_dc']} (seed {f['seed']}): {f['error']}" for f in unreached]
    broken = [f for f in result["failed"] if f.get("point")]
    if broken:
        lines += ["", "## Points that failed or are missing (run the command again)", ""]
        lines += [f"- {f['point']}: {f['error']}" for f in broken]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """Gaps (and a model's mAP) against D_C: MCD targets with error bars, paper splits
    labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    negs = sorted({r["negatives"] for r in rows})
    metrics = [*METRICS] + (["model_map"] if any("model_map" in r for r in rows) else [])
    fig, axes = plt.subplots(
        len(negs), len(metrics), figsize=(5.2 * len(metrics), 3.8 * len(negs)), squeeze=False
    )
    for i, neg in enumerate(negs):
        for j, metric in enumerate(metrics):
            ax = axes[i, j]
            sub = [r for r in rows if r["negatives"] == neg]
            b = _binned([r for r in sub if r["kind"] == "mcd"], metric)
            if b:
                x, xs, y, ys, _ = map(np.array, zip(*b, strict=True))
                ax.errorbar(x, y, xerr=xs, yerr=ys, fmt="o-", capsize=3, label="MCD (mean ± sd)")
            for r in sub:
                if (
                    r["kind"] == "paper"
                    and r.get(metric) is not None
                    and r.get("d_compound") is not None
                ):
                    ax.plot(r["d_compound"], r[metric], "s", color="#ef8636")
                    ax.annotate(
                        r["split"],
                        (r["d_compound"], r[metric]),
                        fontsize=7,
                        xytext=(3, 3),
                        textcoords="offset points",
                    )
            c = result["correlations"].get(f"{neg}/{metric}/mcd", {})
            if c.get("pearson") is not None:
                ax.set_title(
                    f"{metric}, {neg}: r={c['pearson']:.2f} rho={c['spearman']:.2f}", fontsize=9
                )
            else:
                ax.set_title(f"{metric}, {neg}", fontsize=9)
            ax.set_xlabel("compound divergence D_C (DBCA)")
            ax.set_xlim(-0.02, 1.02)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def write_curve(result: dict, out_dir: str | Path) -> dict[str, Path]:
    """Write curve.json, curve.md and curve.png under `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "curve.json", "md": out / "curve.md", "png": out / "curve.png"}
    write_text(paths["json"], json.dumps(result, indent=2, default=str) + "\n")
    write_text(paths["md"], markdown(result))
    plot(result, paths["png"])
    return paths

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

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from curi.atomic import atomic_path, write_text
from curi.errors import ConfigError, SplitError
from curi.splits import PAPER_SPLITS, make_split

__all__ = ["correlations", "divergence_curve", "markdown", "targets", "write_curve"]

log = logging.getLogger("curi")
METRICS = ("map_gap", "cba_gap")


def targets(max_dc: float, step: float) -> list[float]:
    """0, step, 2 step, ... up to `max_dc` (rounded to 1e-9)."""
    if step <= 0:
        raise ConfigError(f"curve: step must be > 0, got {step}")
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
) -> dict:
    """Generate the MCD splits of the study, run the oracles on them and correlate.

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
        workers: processes of the oracles (0: one per core).
        progress: progress bars.

    Returns:
        ``rows`` (one per split and negatives, with D_A, D_C and the gaps), ``targets``,
        ``failed`` (targets the generator could not reach, with its message), ``max_dc`` per
        seed, ``correlations`` and ``seconds``.
    """
    from curi.oracles.gap import compositionality_gap

    t0 = time.perf_counter()
    base = {"rule": "mcd", "progress": False, **dict(mcd or {})}
    base.pop("target_dc", None)
    splits, kinds, failed, max_dc = [], {}, [], {}
    for seed in seeds:  # the highest D_C reached sets the range of targets
        s = make_split(bank, {**base, "name": f"mcd_max_s{seed}", "seed": seed})
        max_dc[seed] = s.info["d_compound"]
        splits.append(s)
        kinds[s.name] = ("mcd", None, seed)
        log.info("curve: %s reached D_C %.3f (%.0f s)", s.name, max_dc[seed], s.info["seconds"])
    tgts = targets(min(max_dc.values()), step)
    for t in tgts:
        if t >= min(max_dc.values()) - 1e-9:
            continue
        for seed in seeds:
            name = f"mcd_{t:.2f}_s{seed}"
            try:
                s = make_split(bank, {**base, "name": name, "seed": seed, "target_dc": t})
            except SplitError as e:
                failed.append({"target_dc": t, "seed": seed, "error": str(e)})
                log.warning("curve: %s", e)
                continue
            splits.append(s)
            kinds[name] = ("mcd", t, seed)
            log.info("curve: %s D_C %.3f (%.0f s)", name, s.info["d_compound"], s.info["seconds"])
    if split_dir is not None:
        for s in splits:
            s.save(Path(split_dir) / f"{s.name}.json", bank)
    names = [s for s in PAPER_SPLITS if paper_splits]
    rows = compositionality_gap(
        bank, [*splits, *names], negatives, episodes=episodes, workers=workers, progress=progress
    )
    for r in rows:
        kind, t, seed = kinds.get(r["split"], ("paper", None, None))
        r.update(kind=kind, target_dc=t, seed=seed)
        if model_results and r["split"] in model_results:
            r["model_map"] = float(model_results[r["split"]])
    corr = {}
    for neg in negatives:
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
        "targets": tgts,
        "max_dc": max_dc,
        "failed": failed,
        "correlations": corr,
        "seconds": round(time.perf_counter() - t0, 1),
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
    if result["failed"]:
        lines += ["", "## Targets not reached", ""]
        lines += [f"- {f['target_dc']} (seed {f['seed']}): {f['error']}" for f in result["failed"]]
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

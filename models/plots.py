"""The plots `curi eval` and `curi baselines` write: per split, the model's mAP and
class-balanced accuracy beside the strong / weak / random oracles' on the same episodes (paper
Figure 5's comparison of models with the oracles), and the baseline table's test mAP beside the
paper's (Appendix G.7)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from curi.atomic import atomic_path

__all__ = ["plot_baselines", "plot_metrics"]

_BARS = (("model", "#2a9d55"), ("strong", "#3b75af"), ("weak", "#ef8636"), ("random", "#999999"))


def _values(m: Mapping, metric: str) -> dict[str, float | None]:
    oracles = m.get("oracles") or {}
    out = {"model": m["model"].get(metric)}
    for who in ("strong", "weak", "random"):
        out[who] = oracles.get(f"{metric}_{who}")
    return out


def plot_metrics(metrics: Sequence[Mapping], path: str | Path) -> Path:
    """Write a PNG of the model against the oracles, one group of bars per split.

    Args:
        metrics: results of `curi.models.evaluate.evaluate_checkpoint` (one per split); the
            oracles' bars are left out where a result has none (``oracles=false``).
        path: the PNG to write (atomically).

    Returns:
        The path written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    path = Path(path)
    n = len(metrics)
    fig, axes = plt.subplots(1, 2, figsize=(4 + 2.2 * n, 4.2), squeeze=False)
    x = np.arange(n)
    width = 0.8 / len(_BARS)
    panels = (("map", "mAP"), ("cba", "class-balanced accuracy"))
    for ax, (metric, name) in zip(axes[0], panels, strict=True):
        for k, (who, color) in enumerate(_BARS):
            ys = [_values(m, metric)[who] for m in metrics]
            if all(y is None for y in ys):
                continue
            xs = x + (k - (len(_BARS) - 1) / 2) * width
            vals = [np.nan if y is None else y for y in ys]
            label = "model" if who == "model" else f"{who} oracle"
            bars = ax.bar(xs, vals, width, label=label, color=color)
            ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
        ax.set_xticks(x, [f"{m['split']}\n{m['negatives']} neg." for m in metrics], fontsize=8)
        ax.set_xlabel("split")
        ax.set_ylabel(name)
        ax.set_ylim(0, 1.1)
        ax.set_title(name, fontsize=10)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    first = metrics[0]
    ckpt = Path(str(first.get("checkpoint", ""))).name
    bank = ((first.get("config") or {}).get("bank") or {}).get("name", "?")
    fig.suptitle(
        f"Model vs oracles: {ckpt} (step {first.get('step')}), bank {bank}, "
        f"{first.get('episodes'):,} {first.get('subset', 'test')} episodes per split",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path


def plot_baselines(table: Mapping, path: str | Path) -> Path:
    """Write a PNG of a `curi.models.baseline_table.baseline_table`: per split, one bar per
    configuration (our test mAP) with the paper's number as a black tick over it, and the
    strong and weak oracles as lines.

    Returns:
        The path written (atomically).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows, configs = table["rows"], table["configs"]
    splits = list(dict.fromkeys(r["split"] for r in rows))
    get = {(r["config"], r["split"]): r for r in rows}
    x, width = np.arange(len(splits)), 0.8 / max(len(configs), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(splits) * max(1, len(configs) / 2)), 4.5))
    for k, c in enumerate(configs):
        xs = x + (k - (len(configs) - 1) / 2) * width
        ours = [get[(c, s)]["test_map"] if (c, s) in get else np.nan for s in splits]
        paper = [(get.get((c, s)) or {}).get("paper_map") for s in splits]
        ax.bar(xs, ours, width, label=c)
        ax.scatter(
            xs,
            [np.nan if p is None else p for p in paper],
            marker="_",
            s=200,
            color="black",
            zorder=3,
            label="paper" if k == 0 else None,
        )
    for key, style in (("oracle_strong", "--"), ("oracle_weak", ":")):
        ys = [
            next((r[key] for r in rows if r["split"] == s and r[key] is not None), np.nan)
            for s in splits
        ]
        ax.hlines(
            ys, x - 0.45, x + 0.45, linestyles=style, color="gray", label=key.replace("_", " ")
        )
    ax.set_xticks(x, splits, fontsize=8, rotation=20)
    ax.set_ylabel("test mAP")
    ax.set_ylim(0, 1.2)  # room for the legend above a strong oracle at 1
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    st = table.get("settings", {})
    ax.set_title(
        f"Test mAP on bank {st.get('bank')!r} ({st.get('episodes')} episodes): ours "
        "(bars), the paper (black ticks)",
        fontsize=9,
    )
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path

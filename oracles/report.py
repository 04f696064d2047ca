"""Writing the gap table: `gap.json` (rows), `gap.md` (a table, and the paper's values beside
ours for the paper's splits) and `gap.png` (per split, the strong and weak oracles and the gap,
in the spirit of the paper's Figure 5, with the paper's oracles marked for hard negatives and
the prior-only oracle, which the paper does not have, as a triangle)."""

from __future__ import annotations

import json
from pathlib import Path

from curi.atomic import atomic_path, write_text
from curi.oracles.paper import PAPER_GAP, paper_comparison

__all__ = ["gap_figure", "markdown_table", "plot_title", "write_report"]

_COLUMNS = (
    ("split", "split", "{}"),
    ("negatives", "neg.", "{}"),
    ("n_train", "train", "{:,}"),
    ("n_test", "test", "{:,}"),
    ("map_strong", "mAP strong", "{:.3f}"),
    ("map_weak", "mAP weak", "{:.3f}"),
    ("map_random", "mAP random", "{:.3f}"),
    ("map_prior", "mAP prior", "{:.3f}"),
    ("map_gap", "mAP gap", "{:.3f}"),
    ("cba_strong", "CBA strong", "{:.3f}"),
    ("cba_weak", "CBA weak", "{:.3f}"),
    ("cba_random", "CBA random", "{:.3f}"),
    ("cba_prior", "CBA prior", "{:.3f}"),
    ("cba_gap", "CBA gap", "{:.3f}"),
    ("d_atom", "D_A", "{:.3f}"),
    ("d_compound", "D_C", "{:.3f}"),
)


def markdown_table(rows: list[dict]) -> str:
    """The rows as a Markdown table, sorted by negatives then decreasing mAP gap."""
    rows = sorted(rows, key=lambda r: (r["negatives"], -r["map_gap"]))
    head = "| " + " | ".join(title for _, title, _ in _COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in _COLUMNS) + "|"
    lines = [head, sep]
    for r in rows:
        cells = [fmt.format(r[k]) if r.get(k) is not None else "" for k, _, fmt in _COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def gap_figure(rows: list[dict], title: str | None = None):
    """The gap chart as a matplotlib figure: per negatives kind, mAP and class-balanced
    accuracy of the strong and weak oracles per split, the random oracle as a dash, the
    prior-only oracle (rows that have it) as a triangle, the gap printed above the highest mark
    (the paper's oracles, diamonds, never cover it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    negs = sorted({r["negatives"] for r in rows})
    fig, axes = plt.subplots(len(negs), 2, figsize=(12, 4.2 * len(negs)), squeeze=False)
    for i, neg in enumerate(negs):
        sub = sorted((r for r in rows if r["negatives"] == neg), key=lambda r: -r["map_gap"])
        x = np.arange(len(sub))
        for j, metric in enumerate(("map", "cba")):
            ax = axes[i, j]
            strong = [r[f"{metric}_strong"] for r in sub]
            weak = [r[f"{metric}_weak"] for r in sub]
            ax.bar(x - 0.2, strong, 0.4, label="strong oracle", color="#3b75af")
            ax.bar(x + 0.2, weak, 0.4, label="weak oracle", color="#ef8636")
            ax.plot(x, [r[f"{metric}_random"] for r in sub], "k_", ms=14, label="random")
            top = np.maximum(strong, weak)  # the gap's label goes above everything drawn
            has_prior = [k for k, r in enumerate(sub) if r.get(f"{metric}_prior") is not None]
            if has_prior:  # what any learner gets before it sees the episode
                ys = [sub[k][f"{metric}_prior"] for k in has_prior]
                ax.plot(
                    x[has_prior],
                    ys,
                    "^",
                    ms=7,
                    mfc="#4a9a4a",
                    mec="white",
                    ls="none",
                    label="prior-only oracle",
                )
                top[has_prior] = np.maximum(top[has_prior], ys)
            in_paper = [k for k, r in enumerate(sub) if r["split"] in PAPER_GAP]
            if neg == "hard" and in_paper:  # the paper's oracles (its section 5) on its splits
                cols = (0, 1) if metric == "map" else (3, 4)
                for dx, c, label in ((-0.2, cols[0], "paper's oracles"), (0.2, cols[1], None)):
                    ys = [PAPER_GAP[sub[k]["split"]][c] for k in in_paper]
                    ax.plot(
                        x[in_paper] + dx,
                        ys,
                        "D",
                        ms=5,
                        mfc="white",
                        mec="black",
                        ls="none",
                        label=label,
                    )
                    top[in_paper] = np.maximum(top[in_paper], ys)
            for xi, s, w, t in zip(x, strong, weak, top, strict=True):
                ax.annotate(
                    f"{s - w:.2f}",
                    (xi, t),
                    xytext=(0, 5),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
                )
            ax.set_xticks(x, [r["split"] for r in sub], rotation=35, ha="right", fontsize=8)
            ax.set_ylim(0, 1.2)
            name = "mAP" if metric == "map" else "class-balanced accuracy"
            ax.set_xlabel("split (by decreasing mAP gap)", fontsize=9)
            ax.set_ylabel(name, fontsize=9)
            ax.set_title(f"{name}, {neg} negatives (numbers: strong - weak gap)", fontsize=10)
    handles, labels = axes[-1, 0].get_legend_handles_labels()  # hard negatives sort last
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=9, frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def _plot(rows: list[dict], path: Path, title: str | None = None) -> None:
    import matplotlib.pyplot as plt

    fig = gap_figure(rows, title)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def plot_title(rows: list[dict], *, bank: str, episodes: int) -> str:
    """The gap chart's title: the bank, the episodes per split and the negatives."""
    negs = ", ".join(sorted({r["negatives"] for r in rows}))
    return (
        f"Compositionality gap: bank {bank}, {episodes:,} test episodes per split, {negs} negatives"
    )


def write_report(
    rows: list[dict], out_dir: str | Path, *, meta: dict | None = None, title: str | None = None
) -> dict:
    """Write gap.json, gap.md and gap.png under `out_dir` (the chart titled `title`, see
    `plot_title`); return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "gap.json", "md": out / "gap.md", "png": out / "gap.png"}
    write_text(paths["json"], json.dumps(rows, indent=2) + "\n")
    header = "# Compositionality gap\n\n"
    if meta:
        header += "".join(f"- {k}: {v}\n" for k, v in meta.items()) + "\n"
    beside = paper_comparison(rows)
    if beside:
        beside = (
            "\n## Beside the paper (hard negatives, its values in parentheses)\n\n"
            "The paper's values belong to its own splits and bank: a split of yours that reuses "
            "one of their names is compared all the same.\n\n" + beside
        )
    write_text(paths["md"], header + markdown_table(rows) + beside)
    _plot(rows, paths["png"], title)
    return paths

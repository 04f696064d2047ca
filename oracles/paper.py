"""The paper's published numbers as data: its oracle results (paper section 5, Appendix G.7) with
a Markdown comparison of a gap table, and its baseline models' test mAP (Appendix G.7-G.8), which
`curi baselines` and docs/fidelity.md show beside ours."""

from __future__ import annotations

import numpy as np

__all__ = [
    "BASELINE_SPLITS",
    "PAPER_BASELINES",
    "PAPER_EASY_SHRINK",
    "PAPER_GAP",
    "PAPER_LANGUAGE_GAIN",
    "agreement",
    "paper_baseline",
    "paper_comparison",
]

# Relation-net figure, hard negatives: values read off the figure (about +-0.03), except the
# gaps the text states (counting 34.4 mAP / 14.2 CBA, binding_color 86.5 / 34.0).
# split: (mAP strong, mAP weak, mAP gap, CBA strong, CBA weak, CBA gap)
PAPER_GAP = {
    "binding_color": (0.95, 0.06, 0.865, 0.98, 0.63, 0.340),
    "binding_shape": (0.95, 0.17, 0.78, 0.96, 0.66, 0.30),
    "intrinsic": (1.00, 0.35, 0.64, 0.985, 0.74, 0.24),
    "complexity": (0.95, 0.30, 0.65, 0.98, 0.73, 0.25),
    "boolean": (0.93, 0.35, 0.58, 0.98, 0.75, 0.23),
    "concept_iid": (0.95, 0.53, 0.42, 0.98, 0.79, 0.19),
    "extrinsic": (0.88, 0.49, 0.39, 0.98, 0.82, 0.16),
    "counting": (0.98, 0.62, 0.344, 1.00, 0.85, 0.142),
    "instance_iid": (0.95, 0.95, 0.0, 0.98, 0.98, 0.0),
}
PAPER_EASY_SHRINK = (0.055, 0.014)  # easy negatives: mAP gap smaller by 5.5 +- 1.4 points


# Baseline models (paper Appendix G.7, Tables 1-9: hard negatives; G.8, Tables 10-18: easy
# negatives, where the paper ran no transformer or sound model): test mAP in %, mean and standard
# deviation over 3 training runs (None where the paper prints NaN), without language (alpha = 0),
# each run's checkpoint chosen by val mAP after 1M steps (sound 500K). Columns in BASELINE_SPLITS
# order; keys (modality, pooling) as named in conf/modality and conf/pooling.
BASELINE_SPLITS = (
    "instance_iid",
    "concept_iid",
    "counting",
    "extrinsic",
    "intrinsic",
    "boolean",
    "complexity",
    "binding_color",
    "binding_shape",
)
_G7 = {  # hard negatives: (mean, std)
    ("schema", "relation_net"): (
        (63.9, 60.7, 57.4, 59.8, 55.1, 51.1, 52.8, 15.3, 30.4),
        (0.4, 0.3, 4.8, 0.4, 0.9, 1.4, 0.7, 0.9, 1.5),
    ),
    ("schema", "transformer"): (
        (59.8, 59.8, 40.7, 60.9, 57.9, 46.9, 49.7, 15.9, 30.9),
        (0.5, 0.2, 0.4, 0.6, 0.6, 1.1, 0.6, 0.9, 0.6),
    ),
    ("schema", "avg"): (
        (57.4, 54.6, 55.0, 53.4, 53.3, 48.0, 48.4, 14.4, 28.3),
        (0.9, 1.3, 6.4, 1.5, 3.0, 2.1, 1.0, 1.2, 1.9),
    ),
    ("schema", "concat"): (
        (57.1, 53.3, 50.0, 54.3, 52.2, 47.1, 48.0, 14.0, 27.0),
        (1.4, 0.9, 3.2, 2.3, 3.5, 2.1, 1.2, 0.7, 0.8),
    ),
    ("image", "relation_net"): (
        (58.6, 58.5, 40.3, 60.8, 47.6, 38.4, 45.4, 14.8, 29.1),
        (1.3, 0.7, 2.0, 1.1, 7.5, 1.0, 0.4, 0.7, 1.8),
    ),
    ("image", "transformer"): (
        (61.5, 60.8, 32.4, 62.1, 54.1, 44.0, 45.6, 14.2, 28.7),
        (0.9, 0.4, 1.4, 0.8, 3.0, 2.2, 0.2, 0.2, 0.1),
    ),
    ("image", "avg"): (
        (58.1, 56.7, 48.5, 59.4, 34.5, 36.3, 45.8, 15.1, 28.7),
        (0.7, 1.0, 1.3, 1.3, 0.4, 2.3, 0.4, 0.4, 1.0),
    ),
    ("image", "concat"): (
        (57.1, 53.0, 38.5, 60.8, 34.0, 29.6, 42.6, 13.5, 27.0),
        (0.9, 0.6, 2.8, 0.7, 1.0, 2.4, 3.4, 0.4, 0.8),
    ),
    ("sound", "relation_net"): (
        (22.3, 21.8, 13.0, 18.3, 24.3, 25.5, 23.3, 9.2, 17.5),
        (2.3, None, 1.7, 1.7, 2.4, 0.8, 1.0, 0.3, 0.4),
    ),
    ("sound", "avg"): (
        (23.5, 22.7, 13.4, 25.7, 26.5, 24.1, 23.0, 9.4, 16.2),
        (1.4, 2.3, 1.0, None, 2.3, 1.6, 1.7, 0.6, 1.6),
    ),
    ("sound", "concat"): (
        (21.7, 23.6, 13.8, 23.2, 29.4, 22.3, 26.0, 8.0, 17.4),
        (0.5, 2.7, 2.4, 1.4, 1.6, 1.1, None, 0.6, 1.3),
    ),
}
_G8 = {  # easy negatives: (mean, std)
    ("schema", "relation_net"): (
        (69.0, 68.2, 67.9, 63.7, 66.5, 58.1, 55.1, 18.6, 31.7),
        (3.6, 1.0, 8.5, 1.4, 4.8, 2.0, 1.8, 1.6, 1.6),
    ),
    ("schema", "avg"): (
        (63.5, 63.3, 64.4, 57.5, 63.1, 55.0, 51.9, 15.5, 32.1),
        (3.1, 0.4, 7.3, 1.2, 4.7, 2.1, 2.0, 0.5, 1.7),
    ),
    ("schema", "concat"): (
        (63.3, 61.9, 60.8, 57.2, 60.8, 54.7, 51.3, 15.5, 31.0),
        (3.1, 0.2, 6.7, 1.5, 4.6, 2.2, 1.9, 0.5, 1.5),
    ),
    ("image", "relation_net"): (
        (66.5, 65.8, 58.8, 62.9, 64.9, 50.7, 46.6, 16.3, 33.9),
        (3.2, 0.4, 5.7, 1.1, 5.3, 7.3, 1.5, 0.8, 2.4),
    ),
    ("image", "avg"): (
        (66.8, 65.1, 62.2, 61.5, 64.4, 42.9, 49.0, 16.3, 31.9),
        (3.3, 0.4, 6.6, 1.4, 4.5, 1.6, 1.6, 0.5, 1.8),
    ),
    ("image", "concat"): (
        (65.4, 64.7, 61.2, 61.8, 62.7, 40.9, 48.2, 15.6, 31.3),
        (3.4, 0.4, 6.9, 2.4, 4.5, 1.7, 1.7, 0.5, 1.7),
    ),
}
PAPER_BASELINES = {
    neg: {
        model: {s: (m, sd) for s, m, sd in zip(BASELINE_SPLITS, means, stds, strict=True)}
        for model, (means, stds) in table.items()
    }
    for neg, table in (("hard", _G7), ("easy", _G8))
}
# Concept supervision (alpha = 1) added 2.8 +- 0.6 mAP points on average (mean +- s.e.; paper
# section 5); the paper gives no per-split table for alpha = 1.
PAPER_LANGUAGE_GAIN = (2.8, 0.6)


def paper_baseline(
    modality: str, pooling: str, split: str, negatives: str = "hard"
) -> tuple[float, float | None] | None:
    """The paper's test mAP in % (mean, std over 3 runs) of a model without language on a split,
    or None where the paper has no such number (another split, pooling or modality; easy
    negatives for transformers and sound)."""
    return PAPER_BASELINES.get(negatives, {}).get((modality, pooling), {}).get(split)


def _ranks(x: list[float]) -> np.ndarray:
    """Ranks from 0, ties sharing their average rank."""
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.cumsum(counts) - (counts + 1) / 2)[inv]


def _correlation(a, b) -> float:
    """Pearson correlation; NaN when either side is constant or not finite."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()) or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def _hard_rows(rows: list[dict]) -> dict[str, dict]:
    """The hard-negative rows of the paper's splits, in the paper's order of decreasing gap."""
    hard = {r["split"]: r for r in rows if r["negatives"] == "hard" and r["split"] in PAPER_GAP}
    return {s: hard[s] for s in sorted(hard, key=lambda s: -PAPER_GAP[s][2])}


def agreement(rows: list[dict]) -> dict | None:
    """How a table's hard-negative rows agree with the paper: Pearson and Spearman correlation
    of the mAP gaps over the paper's splits present, and the mean absolute errors of the
    strong and weak mAP and of the gap. None with fewer than three such splits."""
    hard = _hard_rows(rows)
    if len(hard) < 3:
        return None
    ours = [r["map_gap"] for r in hard.values()]
    theirs = [PAPER_GAP[s][2] for s in hard]
    finite = bool(np.isfinite(ours).all())  # ranks of NaN would look like numbers
    out = {
        "splits": len(hard),
        "pearson": _correlation(ours, theirs),
        "spearman": _correlation(_ranks(ours), _ranks(theirs)) if finite else float("nan"),
    }
    for i, k in enumerate(("strong", "weak", "gap")):
        out[f"mae_{k}"] = float(
            np.mean([abs(r[f"map_{k}"] - PAPER_GAP[s][i]) for s, r in hard.items()])
        )
    return out


def paper_comparison(rows: list[dict]) -> str:
    """Markdown: our hard-negative rows of the paper's splits beside the paper's values, their
    `agreement` (with at least three such splits), and how much easy negatives shrink the mAP
    gap (when both kinds ran). Empty when no row is a paper split with hard negatives."""
    hard = _hard_rows(rows)
    if not hard:
        return ""
    keys = ("map_strong", "map_weak", "map_gap", "cba_strong", "cba_weak", "cba_gap")
    lines = [
        "| split | mAP strong | mAP weak | mAP gap | CBA strong | CBA weak | CBA gap |",
        "|---|---|---|---|---|---|---|",
    ]
    for s, r in hard.items():
        cells = [f"{r[k]:.3f} ({p:.2f})" for k, p in zip(keys, PAPER_GAP[s], strict=True)]
        cells[2] = f"**{cells[2]}**"
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    notes = []
    if agree := agreement(rows):
        notes.append(
            f"mAP gap vs the paper over {agree['splits']} splits: Pearson r "
            f"{agree['pearson']:.2f}, Spearman rho {agree['spearman']:.2f}; mean absolute error "
            f"strong {agree['mae_strong']:.3f}, weak {agree['mae_weak']:.3f}, "
            f"gap {agree['mae_gap']:.3f}."
        )
    easy = {r["split"]: r for r in rows if r["negatives"] == "easy"}
    shrink = [
        r["map_gap"] - easy[s]["map_gap"]
        for s, r in hard.items()
        if s in easy and s != "instance_iid"  # no gap there with either kind
    ]
    if len(shrink) >= 2:
        se = np.std(shrink, ddof=1) / np.sqrt(len(shrink))
        notes.append(
            f"Easy negatives shrink the mAP gap by {100 * np.mean(shrink):.1f} +- {100 * se:.1f} "
            f"points (mean +- s.e. over {len(shrink)} splits; paper: "
            f"{100 * PAPER_EASY_SHRINK[0]:.1f} +- {100 * PAPER_EASY_SHRINK[1]:.1f})."
        )
    return "\n".join(lines) + "\n" + "".join(f"\n{n}\n" for n in notes)


#: Concepts in the original release's bank (paper section 3).
RELEASE_CONCEPTS = 14_929
#: The original release's split sizes: (train, test, concepts a binding split drops)
#: (docs/fidelity.md sections 2 and 4).
RELEASE_SPLITS = {
    "binding_color": (12_152, 2_620, 157),
    "binding_shape": (13_421, 1_484, 24),
    "intrinsic": (14_646, 283, 0),
    "extrinsic": (14_179, 750, 0),
    "counting": (14_882, 47, 0),
    "boolean": (12_335, 2_594, 0),
    "complexity": (408, 14_521, 0),
}

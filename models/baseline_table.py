"""The table `curi baselines` writes: test mAP per split and configuration (mean over training
seeds) beside the paper's numbers (Appendix G.7-G.8) and the oracles on the same test episodes,
as JSON and Markdown."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from curi.atomic import write_text
from curi.oracles.paper import BASELINE_SPLITS, PAPER_LANGUAGE_GAIN, paper_baseline

__all__ = ["baseline_table", "table_markdown", "write_baseline_table"]


def _mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    if all(x is None for x in values):  # e.g. no best val mAP: a learner chosen without val
        return None, None
    v = np.asarray(values, np.float64)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else None


def _split_order(split: str) -> tuple[int, str]:
    return (BASELINE_SPLITS.index(split) if split in BASELINE_SPLITS else 99, split)


def baseline_table(
    results: Sequence[Mapping],
    oracle_rows: Mapping[tuple[str, str], Mapping] | None = None,
    *,
    settings: Mapping | None = None,
) -> dict:
    """One row per (configuration, split): test mAP and CBA averaged over the training seeds,
    the paper's test mAP of the same modality and pooling (its alpha = 0 number, in [0, 1];
    None for another learner than the protonet, which the paper has not), the difference, and
    the oracles' mAP on the same test episodes (strong, weak, random and prior-only: the prior
    predictive, what a learner has before it sees an episode).

    Args:
        results: per-run results (keys ``config``, ``split``, ``seed``, ``modality``,
            ``pooling``, ``alpha``, ``negatives``, ``test_map``, ``test_cba``, ``best_val_map``,
            ``checkpoint_step``, ``steps``, ``train_seconds``; ``learner`` when it is not
            ``protonet``).
        oracle_rows: (split, negatives) -> a `curi.oracles.gap` row (``map_strong``, ...).
        settings: written with the table (bank, episodes, seeds, ...).

    Returns:
        ``{"settings", "configs": [names in order], "rows": [...], "runs": results}``.
    """
    groups: dict[tuple[str, str], list[Mapping]] = {}
    for r in results:
        groups.setdefault((r["config"], r["split"]), []).append(r)
    configs = list(dict.fromkeys(r["config"] for r in results))
    rows = []
    for (config, split), rs in sorted(
        groups.items(), key=lambda kv: (configs.index(kv[0][0]), _split_order(kv[0][1]))
    ):
        first = rs[0]
        learner = first.get("learner", "protonet")
        mean, std = _mean_std([r["test_map"] for r in rs])
        paper = (
            paper_baseline(first["modality"], first["pooling"], split, first["negatives"])
            if learner == "protonet"
            else None
        )
        orc = (oracle_rows or {}).get((split, first["negatives"])) or {}
        rows.append(
            {
                "config": config,
                "split": split,
                "learner": learner,
                "modality": first["modality"],
                "pooling": first["pooling"],
                "alpha": first["alpha"],
                "negatives": first["negatives"],
                "seeds": [r["seed"] for r in rs],
                "test_map": mean,
                "test_map_std": std,
                "test_cba": _mean_std([r["test_cba"] for r in rs])[0],
                "best_val_map": _mean_std([r["best_val_map"] for r in rs])[0],
                "checkpoint_steps": [r["checkpoint_step"] for r in rs],
                "steps": max(r["steps"] for r in rs),
                "train_seconds": sum(r["train_seconds"] for r in rs),
                "paper_map": None if paper is None else paper[0] / 100,
                "paper_map_std": None if paper is None or paper[1] is None else paper[1] / 100,
                "diff": None if paper is None else mean - paper[0] / 100,
                "oracle_strong": orc.get("map_strong"),
                "oracle_weak": orc.get("map_weak"),
                "oracle_random": orc.get("map_random"),
                "oracle_prior": orc.get("map_prior"),
            }
        )
    return {
        "settings": dict(settings or {}),
        "configs": configs,
        "rows": rows,
        "runs": list(results),
    }


def _pct(x: float | None, std: float | None = None) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.1f}" + ("" if std is None else f" ± {100 * std:.1f}")


def _paper(r: Mapping, *, std: bool = True) -> str:
    """The paper's cell of a row: its number (with its std), ``n/a`` where the paper has no
    such protonet, or ``—`` for another learner (not a model of the paper)."""
    if r.get("learner", "protonet") != "protonet":
        return "—"
    return _pct(r["paper_map"], r["paper_map_std"] if std else None)


def table_markdown(table: Mapping) -> str:
    """The table as Markdown: test mAP % per split (rows) and configuration (columns), the
    paper's number in brackets, the oracles last; then one line per (configuration, split)."""
    rows, configs = table["rows"], table["configs"]
    get = {(r["config"], r["split"]): r for r in rows}
    splits = sorted({r["split"] for r in rows}, key=_split_order)
    alpha = {r["config"]: r["alpha"] for r in rows}
    head = [f"{c} (alpha={alpha[c]:g})" if alpha[c] else c for c in configs]
    lines = [
        "| split | " + " | ".join(head) + " | strong oracle | weak oracle | prior-only oracle |",
        "|---" * (len(configs) + 4) + "|",
    ]
    for s in splits:
        cells, orc = [], None
        for c in configs:
            r = get.get((c, s))
            if r is None:
                cells.append("–")
                continue
            orc = orc or r
            cells.append(f"{_pct(r['test_map'])} ({_paper(r, std=False)})")
        lines.append(
            f"| {s} | " + " | ".join(cells) + f" | {_pct(orc['oracle_strong'])} | "
            f"{_pct(orc['oracle_weak'])} | {_pct(orc.get('oracle_prior'))} |"
        )
    st = table.get("settings", {})
    lines += [
        "",
        "Test mAP % of the checkpoint with the best val mAP (mean over training seeds "
        f"{st.get('seeds')}), {st.get('episodes')} test episodes of seed "
        f"{st.get('eval_seed')} on bank {st.get('bank')!r}; in brackets the paper's "
        "(Appendix G.7: mean of 3 runs of 1M steps, without language); n/a: the paper has "
        "no such model"
        + (
            "; —: another learner than the paper's prototypical networks (docs/learners.md), "
            "its best val mAP n/a as it chooses on held-out training concepts."
            if any(r.get("learner", "protonet") != "protonet" for r in rows)
            else "."
        ),
        "",
    ]
    if any(alpha.values()):
        g, se = PAPER_LANGUAGE_GAIN
        lines += [
            f"The paper gives no per-split numbers with language (alpha > 0): its bracket "
            f"is the alpha = 0 number; language added {g} ± {se} mAP points on average "
            "(mean ± s.e.).",
            "",
        ]
    incomplete = table.get("incomplete") or []
    if incomplete:
        lines += [
            f"**{len(incomplete)} runs not finished** (not in the table above; run the command "
            "again to resume them, or `curi baselines collect` once they end):",
            "",
            "| run | status | error |",
            "|---|---|---|",
            *(f"| {r['run']} | {r['status']} | {r.get('error') or ''} |" for r in incomplete),
            "",
        ]
    lines += [
        "| configuration | split | test mAP % | paper % | diff | test CBA % | best val mAP "
        "% | checkpoint step / steps | train s |",
        "|---" * 9 + "|",
    ]
    for r in rows:
        diff = "n/a" if r["diff"] is None else f"{100 * r['diff']:+.1f}"
        diff = "—" if _paper(r) == "—" else diff
        lines.append(
            f"| {r['config']} | {r['split']} | {_pct(r['test_map'], r['test_map_std'])} | "
            f"{_paper(r)} | {diff} | {_pct(r['test_cba'])} | "
            f"{_pct(r['best_val_map'])} | {', '.join(map(str, r['checkpoint_steps']))} / "
            f"{r['steps']} | {r['train_seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def write_baseline_table(table: Mapping, out_dir: str | Path) -> list[Path]:
    """Write ``baselines.json`` and ``baselines.md`` under `out_dir` (atomically)."""
    out = Path(out_dir)
    return [
        write_text(out / "baselines.json", json.dumps(table, indent=2) + "\n"),
        write_text(out / "baselines.md", table_markdown(table)),
    ]

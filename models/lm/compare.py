"""A language model's lm-evaluation-harness results beside the oracles on the same documents
(CURI paper, section 3): strong, weak, prior-only and random oracles, scored directly from the
task folder's episode tables with the same per-episode metrics as the task, per split, as
`curi eval` does for a prototypical network."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from curi.errors import PredictionsError
from curi.models.lm.task import check_manifest, episode_metrics, read_manifest, read_table
from curi.paths import read_text
from curi.rng import derive_rng

__all__ = ["ORACLES", "compare", "format_table", "oracle_items", "read_results"]

ORACLES = ("strong", "weak", "prior", "random")
METRICS = ("cba", "ap", "eval_ap")


def _oracle(bank, folder: Path, info: dict, policy: str, options: dict):
    from curi.oracles.oracle import Oracle
    from curi.splits.saved import load_split

    kw = {**options, "negatives": info["negatives"]}
    if policy == "strong":
        return Oracle.strong(bank, **kw)
    if policy == "weak":
        if info["split_file"] is None:  # an episode file of a split this bank cannot make
            return None
        return Oracle.weak(bank, load_split(bank, folder / info["split_file"]), **kw)
    if policy == "prior":
        make = getattr(Oracle, "prior_only", None)
        return None if make is None else make(bank, **kw)
    raise ValueError(f"unknown oracle {policy!r}")


def oracle_items(
    bank, folder: str | Path, task: str, policy: str, *, seed: int = 0, **options
) -> list[tuple[int, str, int, float]] | None:
    """``(episode, set, label, p)`` of every document of a task, p the oracle's predictive
    probability computed from the episode table's scene ids (``random``: uniform scores drawn
    from (seed, task, episode)); None for an oracle this curi lacks, a weak oracle without
    the task's split, or episodes without scene ids."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    info = manifest["tasks"][task]
    episodes = read_table(folder / f"{task}.episodes.jsonl.gz")
    docs = read_table(folder / f"{task}.docs.jsonl.gz")
    eval_ids = np.asarray(manifest["eval_ids"], np.int64)
    oracle = None if policy == "random" else _oracle(bank, folder, info, policy, options)
    if policy != "random" and (oracle is None or episodes[0]["support_ids"] is None):
        return None
    by_episode: dict[int, list[dict]] = {}
    for d in docs:
        by_episode.setdefault(d["episode"], []).append(d)
    out = []
    for i, ds in sorted(by_episode.items()):
        e = episodes[i]
        ids = np.array(
            [
                e["query_ids"][d["position"]] if d["set"] == "query" else eval_ids[d["position"]]
                for d in ds
            ],
            np.int64,
        )
        if policy == "random":
            p = derive_rng(seed, f"lm-random-oracle:{task}", i).random(len(ids))
        else:
            p = oracle.predict(np.asarray(e["support_ids"]), np.asarray(e["support_labels"]), ids)
        out += [(i, d["set"], int(d["label"]), float(s)) for d, s in zip(ds, p, strict=True)]
    return out


def oracle_metrics(items) -> dict[str, float]:
    """Mean per-episode ``cba`` (p > 0.5), ``ap`` (query sets) and ``eval_ap`` (evaluation-set
    sample, when exported) of `oracle_items`."""
    query = [(e, y, p) for e, s, y, p in items if s == "query"]
    evals = [(e, y, p) for e, s, y, p in items if s == "eval"]
    out = {
        "cba": float(np.nanmean(episode_metrics(query, "cba", threshold=0.5))),
        "ap": float(np.nanmean(episode_metrics(query, "ap"))),
    }
    if evals:
        ap = episode_metrics(evals, "ap")
        out["eval_ap"] = float(np.nanmean(ap)) if (~np.isnan(ap)).any() else float("nan")
    return out


def read_results(path: str | Path) -> dict:
    """The newest lm-eval results file (``results_*.json``) at or under `path`.

    Raises:
        PredictionsError: none found, not a regular file (a FIFO), or not an lm-eval results
            file.
    """
    path = Path(path).expanduser()
    files = [path] if path.is_file() else sorted(path.rglob("results_*.json"), key=lambda p: p.name)
    if not files:
        raise PredictionsError(
            f"no lm-eval results (results_*.json) at {path}; run lm_eval with --output_path"
        )
    try:
        doc = json.loads(read_text(files[-1], "lm-eval results file", PredictionsError))
        if not isinstance(doc["results"], dict):
            raise TypeError("'results' is not a mapping")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PredictionsError(f"{files[-1]} is not an lm-eval results file: {e!r}") from None
    doc["_path"] = str(files[-1])
    return doc


def compare(bank, folder: str | Path, results: str | Path, *, seed: int = 0, **options) -> list:
    """One row per task of the results: the model's metrics beside the oracles'.

    Raises:
        PredictionsError: results without any task of the folder, or a task scored on another
            number of documents than the folder holds (another export, or lm_eval --limit).
        ConfigError, BankError: a task folder of another curi version or bank.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    check_manifest(manifest, folder, bank)
    res = read_results(results)
    names = [t for t in res["results"] if t in manifest["tasks"]]
    if not names:
        raise PredictionsError(
            f"the results {res['_path']} hold none of the tasks of {folder} "
            f"({', '.join(manifest['tasks'])}); run lm_eval with --include_path {folder}"
        )
    if (res.get("config") or {}).get("limit"):
        raise PredictionsError(
            f"the results {res['_path']} were run with lm_eval --limit: the oracles are compared "
            "on whole task folders (export fewer episodes instead: n=)"
        )
    rows = []
    for task in names:
        info = manifest["tasks"][task]
        n = res.get("n-samples", {}).get(task, {}).get("original")
        if n is not None and n != info["documents"]:
            raise PredictionsError(
                f"{task}: the results scored {n} documents, the task folder holds "
                f"{info['documents']}: results of another export"
            )
        model = {m: res["results"][task].get(f"{m},none") for m in METRICS}
        row = {"task": task, "split": info["split"], "negatives": info["negatives"]}
        row["episodes"] = info["episodes"]
        row.update({f"{m}_model": v for m, v in model.items() if v is not None})
        for policy in ORACLES:
            items = oracle_items(bank, folder, task, policy, seed=seed, **options)
            metrics = oracle_metrics(items) if items is not None else {}
            for m in METRICS:
                if m in model and model[m] is not None:
                    row[f"{m}_{policy}"] = metrics.get(m)
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows as a markdown table (n/a: an oracle this curi lacks)."""
    cols = list(dict.fromkeys(c for r in rows for c in r if c != "task"))
    head = "| task | " + " | ".join(cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append("n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v))
        lines.append(f"| {r['task']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

"""The difficulty report (the `curi difficulty` command of `curi.models.cli`): which test
concepts of a split are hard, predicted from unobserved local structures (Bogin, Gupta and
Berant 2022) and from the concepts' extensions (`curi.extension_predictors`), and checked
against what the weak oracle (`curi.oracles.difficulty_auc`) and, given a checkpoint, a trained
model actually do per concept: a per-concept table, the AUC table, the per-split correlations
and a plot."""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from curi import validate
from curi.atomic import atomic_path, write_text
from curi.concepts import parse
from curi.divergence import DivergenceIndex
from curi.episodes import EpisodeSampler, EpisodeSpec
from curi.errors import ConfigError, SplitError
from curi.models.checkpoint import check_checkpoint_bank, load_weights
from curi.oracles.difficulty_auc import (
    MAX_EPISODES_PER_CONCEPT,
    MIN_SPLITS,
    auc_table,
    concept_sample,
    oracle_outcomes,
    split_correlations,
)
from curi.oracles.eval_set import EvalSet
from curi.oracles.metrics import average_precision_batch
from curi.predictors import PREDICTOR_NAMES, predictor_scores
from curi.splits import Split, make_split

__all__ = [
    "PerConceptSampler",
    "check_checkpoint_bank",
    "check_options",
    "difficulty_report",
    "model_outcomes",
    "write_report",
]

log = logging.getLogger("curi")
EASY = "easiness_"  # prefix of the predictors' columns in the per-concept table
MIN_CONCEPTS = 2  # an AUC ranks easy against hard test concepts: a split needs two at least


def check_options(*, episodes, max_concepts) -> None:
    """The cheap checks of `difficulty_report`'s counts, made before a bank opens.

    Raises:
        ConfigError: naming the key, the value and the allowed range.
    """
    validate.integer(episodes, "episodes_per_concept", low=1, high=MAX_EPISODES_PER_CONCEPT)
    if max_concepts is not None:
        validate.integer(max_concepts, "max_concepts", low=MIN_CONCEPTS)


def _check_scorable(split: Split, sample: np.ndarray) -> None:
    """Refuse a split with too few test concepts to rank (none, or one).

    Raises:
        SplitError: naming the split and how many test concepts it has.
    """
    if len(sample) >= MIN_CONCEPTS:
        return
    has = "no test concepts" if len(split.test) == 0 else f"{len(split.test)} test concept"
    raise SplitError(
        f"split {split.name!r} has {has} in this bank; curi difficulty ranks easy against hard "
        f"test concepts (an AUC) and needs at least {MIN_CONCEPTS} per split: drop it from "
        "splits= or give it a larger test set"
    )


class PerConceptSampler:
    """``spec.size`` test episodes of each concept of `concepts`: item i is episode
    i % spec.size of concept concepts[i // spec.size] (the same episodes `oracle_outcomes`
    scores: `spec`'s, its split's test set cut to one concept, named ``<split>#<h>``)."""

    def __init__(self, bank, spec: EpisodeSpec, concepts):
        split = spec.check(bank).split
        self.bank, self.subset, self.split = bank, "test", split
        self.episodes = spec.size
        self._samplers = [
            EpisodeSampler.from_spec(
                bank,
                spec.replace(
                    split=dataclasses.replace(split, name=f"{split.name}#{h}", test=np.array([h])),
                    subset="test",
                ),
            )
            for h in np.asarray(concepts).tolist()
        ]

    def __len__(self) -> int:
        return len(self._samplers) * self.episodes

    def __getitem__(self, i: int):
        return self._samplers[i // self.episodes][i % self.episodes]


def model_outcomes(
    checkpoint,
    bank,
    spec: EpisodeSpec,
    concepts,
    *,
    batch_size: int = 64,
    device: str = "cpu",
) -> dict[str, np.ndarray]:
    """A checkpoint's mean AP per concept over ``spec.size`` test episodes of each (the
    oracle's episodes, with the checkpoint's kind of negatives), and, for a model trained
    with the concept loss, the share of episodes whose greedily decoded concept is exactly
    the concept (``exact``; None without a decoder).

    Raises:
        ConfigError: the checkpoint is for another bank.
    """
    import torch
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    from curi.models.checkpoint import load_checkpoint
    from curi.models.config import RunConfig, build_model
    from curi.models.data import EpisodeDataset, collate_episodes, eval_labels, make_renderer
    from curi.models.decoder import ConceptTokenizer
    from curi.models.evaluate import embed_eval_set, log_odds
    from curi.models.runtime import resolve_device, to_device

    with torch.inference_mode():  # no autograd graph: evaluation only
        ckpt, path = load_checkpoint(checkpoint)
        run = RunConfig.from_mapping(ckpt["config"])
        check_checkpoint_bank(run.bank, bank)
        dev = resolve_device(device)
        renderer = make_renderer(run.modality)
        model = build_model(run, renderer).to(dev)
        load_weights(model, ckpt, path)
        model.eval()
        ev = EvalSet.from_bank(bank)
        emb = embed_eval_set(model, bank, run.modality, device=dev)
        sampler = PerConceptSampler(bank, spec.replace(negatives=run.negatives), concepts)
        episodes = sampler.episodes
        ds = EpisodeDataset(sampler, run.modality, max_len=ckpt.get("max_len"))
        loader = DataLoader(
            ds,
            batch_sampler=BatchSampler(SequentialSampler(ds), batch_size, False),
            collate_fn=collate_episodes,
        )
        tok = ConceptTokenizer()
        aps, exact = [], []
        for batch in loader:
            out = model(to_device(batch, dev))
            scores = log_odds(out.prototypes, emb).double().cpu().numpy()  # (B, M)
            scores -= scores.min(axis=1, keepdims=True)
            truth = eval_labels(ev.rows, batch["concept"].cpu().numpy(), len(ev))  # (B, M)
            aps.append(average_precision_batch(scores, truth))
            if model.decoder is not None:
                ids = model.decoder.greedy(out.prototypes.flatten(1))  # (B, L)
                for row, h in zip(ids.cpu(), batch["concept"].tolist(), strict=True):
                    exact.append(tok.decode(row) == bank.concepts[h])
        n = len(sampler._samplers)
        ap = np.concatenate(aps).reshape(n, episodes).mean(1)
        ex = np.array(exact, float).reshape(n, episodes).mean(1) if exact else None
        log.info("model %s: per-concept mAP %.4f on %d concepts", path, ap.mean(), n)
        return {"concept": np.asarray(concepts), "ap": ap, "exact": ex, "split": run.split}


def difficulty_report(
    bank,
    splits: Sequence,
    *,
    checkpoints: Mapping[str, str] | None = None,
    predictors: Sequence[str] | None = None,
    episodes: int = 10,
    max_concepts: int | None = None,
    negatives: str = "hard",
    threshold: float | str = "median",
    prior: str = "log_linear",
    likelihood: str = "size_principle",
    seed: int = 0,
    device: str = "cpu",
    negative_sampler: str = "paper",
) -> dict:
    """Per-concept rows, AUC tables and per-split correlations for `splits` of `bank`.

    Args:
        splits: split names, rule mappings or `Split`s.
        checkpoints: split name -> checkpoint of a model trained on it.
        predictors: names of `curi.predictors.PREDICTORS` / `COMBINED` / `EXTENSIONS`
            (default: all).
        episodes: evaluation episodes per test concept.
        max_concepts: score a seeded sample of at most this many test concepts per split.
        threshold: easy = outcome >= threshold (``median``: the split's median).
        negatives, negative_sampler, seed: the episodes' (`curi.EpisodeSampler`).

    Returns:
        ``{"rows", "auc_oracle", "auc_model", "auc_exact", "splits", "correlations"}``.

    Raises:
        ConfigError: an unknown predictor name, bad counts, or checkpoints of splits not
            scored. SplitError: a split with fewer than two test concepts.
    """
    check_options(episodes=episodes, max_concepts=max_concepts)
    spec = EpisodeSpec(
        "-", "test", negatives, seed=seed, size=episodes, negative_sampler=negative_sampler
    )  # the split of each is set below
    names = list(predictors or PREDICTOR_NAMES)
    for name in names:
        validate.choice(name, "predictors", PREDICTOR_NAMES)
    resolved, checkpoints, samples = _checked_splits(
        bank, splits, checkpoints, max_concepts=max_concepts, seed=seed
    )
    scores = predictor_scores(
        bank.concepts,
        [(s.name, s.train, samples[s.name]) for s in resolved],
        predictors=names,
        seed=seed,
        bank=bank,
    )
    ev = EvalSet.from_bank(bank)
    div = DivergenceIndex(bank.concepts)
    rows, split_rows = [], []
    for s in resolved:
        te = samples[s.name]
        orc = oracle_outcomes(
            bank, spec.replace(split=s), te, prior=prior, likelihood=likelihood, eval_set=ev
        )
        mod = None
        if s.name in checkpoints:
            mod = model_outcomes(
                checkpoints[s.name], bank, spec.replace(split=s), te, device=device
            )
        rows += _concept_rows(bank, s.name, te, scores[s.name], names, orc, mod)
        split_rows.append(_split_row(s, te, scores[s.name], names, orc, mod, div))
    return _report(rows, split_rows, names, threshold)


def _checked_splits(bank, splits: Sequence, checkpoints, *, max_concepts, seed):
    """The splits made (`make_split`), the checkpoints by split name, and each split's test
    concepts to score (a seeded sample of at most `max_concepts`), checked.

    Raises:
        ConfigError: checkpoints of splits not scored. SplitError: a split with fewer than
            two test concepts.
    """
    resolved = [s if isinstance(s, Split) else make_split(bank, s) for s in splits]
    checkpoints = dict(checkpoints or {})
    unknown = set(checkpoints) - {s.name for s in resolved}
    if unknown:
        raise ConfigError(f"checkpoints for splits not in splits: {sorted(unknown)}")
    samples = {s.name: concept_sample(s, max_concepts, seed) for s in resolved}
    for s in resolved:
        _check_scorable(s, samples[s.name])
    return resolved, checkpoints, samples


def _concept_rows(bank, split: str, te, sc: Mapping, names, orc: Mapping, mod) -> list[dict]:
    """The per-concept rows of a split: each scored test concept (ids `te`) with its
    predictors' easiness (`sc`), the oracle's outcomes (`orc`) and the model's (`mod`, None
    without a checkpoint)."""
    rows = []
    first = names[0]
    for j, h in enumerate(te.tolist()):
        r = {
            "split": split,
            "concept": bank.concepts[h],
            "length": len(parse(bank.concepts[h])),
        }
        r.update({f"{EASY}{p}": float(sc[p].easiness[j]) for p in names})
        for p in ("2-LS", "cooc"):
            if p in sc:
                r[f"hard_{p}"] = sc[p].hardest[j]
        if "ext-nn" in sc:  # the training concept that agrees most with the concept
            near = sc["ext-nn"].hardest
            r["nearest_train"] = near[j] if near else ""
        if sc[first].unseen_symbols is not None:
            r["unseen_symbols"] = bool(sc[first].unseen_symbols[j])
        r["oracle_ap"], r["oracle_cba"] = float(orc["ap"][j]), float(orc["cba"][j])
        r["model_ap"] = None if mod is None else float(mod["ap"][j])
        r["model_exact"] = None if mod is None or mod["exact"] is None else float(mod["exact"][j])
        rows.append(r)
    return rows


def _split_row(s: Split, te, sc: Mapping, names, orc: Mapping, mod, div) -> dict:
    """A split's row: its sizes, mean outcomes, compound divergence, info and the mean
    easiness of each predictor."""
    d = div.divergences(s.train, s.test)
    srow = {
        "split": s.name,
        "n_test": len(s.test),
        "n_scored": len(te),
        "oracle_ap": float(orc["ap"].mean()),
        "d_compound": d.compound,
        "model_ap": None if mod is None else float(mod["ap"].mean()),
        **s.info,
    }
    srow.update({f"mean_{p}": float(sc[p].easiness.mean()) for p in names})
    return srow


def _report(rows: list[dict], split_rows: list[dict], names, threshold) -> dict:
    """The report of `difficulty_report` from its rows: the AUC tables of each outcome and
    the per-split correlations."""
    keys = [f"{EASY}{p}" for p in names]

    def table(outcome: str) -> list[dict]:
        t = auc_table(rows, keys, outcome, threshold=threshold)
        return [{**r, "predictor": r["predictor"].removeprefix(EASY)} for r in t]

    out = {
        "rows": rows,
        "auc_oracle": table("oracle_ap"),
        "auc_model": table("model_ap"),
        "auc_exact": table("model_exact"),
        "splits": split_rows,
        "correlations": split_correlations(split_rows, names, "oracle_ap"),
    }
    return out


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _md_auc(table: list[dict], title: str) -> list[str]:
    if not table:
        return []
    scopes = list(dict.fromkeys(r["scope"] for r in table))
    preds = list(dict.fromkeys(r["predictor"] for r in table))
    get = {(r["scope"], r["predictor"]): r for r in table}
    lines = [
        f"## {title}",
        "",
        "| predictor | " + " | ".join(scopes) + " | pooled, within length | pooled Spearman |",
        "|---" * (len(scopes) + 3) + "|",
    ]
    for p in preds:
        cells = [_fmt(get[(s, p)]["auc"]) if (s, p) in get else "" for s in scopes]
        pooled = get.get(("pooled", p), {})
        within, rho = pooled.get("auc_length_stratified"), pooled.get("spearman")
        lines.append(f"| {p} | " + " | ".join(cells) + f" | {_fmt(within)} | {_fmt(rho)} |")
    n = {s: get[(s, preds[0])]["n"] for s in scopes}
    lines += ["", "Concepts: " + ", ".join(f"{s} {n[s]}" for s in scopes), ""]
    return lines


def _md_correlations(report: dict) -> list[str]:
    """The per-split correlation table, or one line saying why there is none."""
    names = [r["split"] for r in report["splits"]]
    if len(names) < MIN_SPLITS:
        return [
            f"A correlation over splits needs at least {MIN_SPLITS} splits; this report has "
            f"{len(names)} ({', '.join(names)}): give more in splits= to see it."
        ]
    return ["| predictor | Pearson | Spearman | splits |", "|---|---|---|---|"] + [
        f"| {c['predictor']} | {_fmt(c['pearson'])} | {_fmt(c['spearman'])} | {c['splits']} |"
        for c in report["correlations"]
    ]


def write_report(
    report: dict, out_dir: str | Path, *, settings: Mapping | None = None
) -> list[Path]:
    """Write ``concepts.csv`` (per concept), ``auc.md`` / ``difficulty.json`` and
    ``difficulty.png`` (per-concept oracle AP against 2-LS and co-occurrence easiness)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = report["rows"]
    written = []
    if rows:
        import io

        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
        written.append(write_text(out / "concepts.csv", buf.getvalue()))
    md = ["# Difficulty: easiness predictors against per-concept outcomes", ""]
    if settings:
        md += ["Settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()), ""]
    md += _md_auc(report["auc_oracle"], "ROC AUC against the weak oracle's per-concept AP")
    md += _md_auc(report["auc_model"], "ROC AUC against the model's per-concept AP")
    md += _md_auc(report["auc_exact"], "ROC AUC against the decoded concept's exact match")
    md += ["## Per split: mean easiness against the weak oracle's mAP", ""]
    md += _md_correlations(report)
    written.append(write_text(out / "auc.md", "\n".join(md) + "\n"))
    slim = {k: v for k, v in report.items() if k != "rows"}
    written.append(write_text(out / "difficulty.json", json.dumps(slim, indent=2, default=str)))
    if rows:
        written.append(_plot(rows, out / "difficulty.png"))
    return written


def _plot(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in ("2-LS", "length", "ext-nn", "ext-neg") if f"{EASY}{k}" in rows[0]]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.5), squeeze=False)
    splits = sorted({r["split"] for r in rows})
    for ax, k in zip(axes[0], keys, strict=True):
        for s in splits:
            pts = [(r[f"{EASY}{k}"], r["oracle_ap"]) for r in rows if r["split"] == s]
            x, y = np.array(pts).T
            jitter = (np.random.default_rng(0).random(len(x)) - 0.5) * 0.02  # ties visible
            ax.scatter(x + jitter, y, s=6, alpha=0.5, label=s)
        ax.set_xlabel(f"easiness ({k})")
        ax.set_ylabel("weak oracle AP")
    axes[0][0].legend(fontsize=6, markerscale=2)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path

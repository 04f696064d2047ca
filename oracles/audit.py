"""The shortcut audit (docs/fidelity.md, "Shortcut audit"): can a learner that never sees the
support set nor the concept tell a query scene's label from the scene alone?

For each split and kind of negatives, a gradient-boosted tree classifier (scikit-learn's
`HistGradientBoostingClassifier`) learns P(positive | scene) from the scenes of the split's
training episodes (support and query sets alike: all are labelled scenes of training concepts),
one scene at a time, on the features of `curi.oracles.audit_features`. It is scored on the
query sets of the split's test episodes: per-episode ROC AUC, class-balanced accuracy (0.5 on
the predicted probability; the classes are weighted to balance in training, so 0.5 is the
balanced decision) and mAP, the benchmark's own metric, beside what chance gives. An AUC above
0.5 is a shortcut the negative sampling leaves: a model can score it without learning the
concept (as RAVEN's answer sets could be solved without the question; Hu et al. 2021, I-RAVEN).
Which features carry it: the drop in AUC when one feature group is permuted across the test
scenes (grouped permutation importance on the held-out test episodes)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from curi import validate
from curi.episodes import NEGATIVE_SAMPLERS, NEGATIVES, EpisodeSampler, EpisodeSpec
from curi.errors import ConfigError
from curi.oracles.audit_features import FEATURE_GROUPS, feature_groups, scene_features
from curi.oracles.metrics import (
    average_precision_batch,
    class_balanced_accuracy_batch,
    roc_auc,
)
from curi.rng import derive_rng
from curi.splits import Split, make_split

__all__ = ["MIN_EPISODES", "run_audit", "audit_split", "markdown"]

log = logging.getLogger("curi")

MIN_EPISODES = {"train": 20, "test": 10}  # fewer: a tree on a handful of concepts, a noisy AUC
MAX_AUDIT_EPISODES = 10**6


def _episode_arrays(sampler: EpisodeSampler, support: bool, desc: str, progress: bool):
    """(ids, labels), each (E, M): the query sets of the sampler's episodes, and the support
    sets beside them when `support`."""
    m = sampler.num_positives + sampler.num_negatives
    width = 2 * m if support else m
    ids = np.empty((len(sampler), width), np.int64)
    labels = np.empty((len(sampler), width), np.int8)
    for i in tqdm(range(len(sampler)), desc=desc, disable=not progress, leave=False):
        ep = sampler[i]
        ids[i, :m], labels[i, :m] = ep.query_ids, ep.query_labels
        if support:
            ids[i, m:], labels[i, m:] = ep.support_ids, ep.support_labels
    return ids, labels


def _features(bank, ids: np.ndarray) -> np.ndarray:
    """Features of scene ids (any shape) as rows, read from the bank's columns once each."""
    uniq, inverse = np.unique(ids.ravel(), return_inverse=True)
    sc = bank.scenes
    return scene_features(sc.n_objects[uniq], sc.props[uniq])[inverse]


def _scores(model, x: np.ndarray, shape) -> np.ndarray:
    return model.predict_proba(x)[:, 1].reshape(shape)


def _importance(model, x: np.ndarray, y: np.ndarray, auc: float, seed: int, tag: str) -> dict:
    """Feature group -> the drop in mean AUC when the group's columns are permuted together
    across the test scenes (grouped permutation importance, on held-out episodes)."""
    out = {}
    for g, cols in feature_groups().items():
        perm = derive_rng(seed, f"audit-permute:{tag}:{g}", 0).permutation(len(x))
        xp = x.copy()
        xp[:, cols] = x[perm][:, cols]
        out[g] = auc - float(np.nanmean(roc_auc(_scores(model, xp, y.shape), y)))
    return out


def _metrics(p: np.ndarray, y: np.ndarray) -> dict:
    return {
        "auc": float(np.nanmean(roc_auc(p, y))),
        "cba": float(np.nanmean(class_balanced_accuracy_batch(p, y, threshold=0.5))),
        "map": float(np.mean(average_precision_batch(p, y))),
    }


def audit_split(
    bank,
    train: EpisodeSpec,
    test: EpisodeSpec,
    *,
    support: bool = True,
    max_iter: int = 50,
    threads: int = 1,
    progress: bool = False,
) -> dict:
    """One row of the audit: the support-free learner of one (split, negatives), trained on
    the episodes of `train` (their query sets, and support sets when `support`) and scored on
    the query sets of the episodes of `test` (of the same split, negatives, negative sampler
    and seed); `threads`: OpenMP threads of the trees.

    Returns:
        The row: split, negatives, ``auc``, ``cba``, ``map`` (means over test episodes),
        ``map_random`` (chance mAP of the same episodes), ``importance`` (feature group -> drop
        in AUC when that group is permuted), ``top`` (the group of the largest drop), the
        numbers of training scenes and of test episodes, and seconds.
    """
    from sklearn.ensemble import HistGradientBoostingClassifier

    t0 = time.perf_counter()
    split, negatives, seed = test.split_name, test.negatives, test.seed
    tag = f"{split}/{negatives}"
    test_episodes = test.size
    train = EpisodeSampler.from_spec(bank, train)
    test = EpisodeSampler.from_spec(bank, test)
    tr_ids, tr_y = _episode_arrays(train, support, f"{tag} train", progress)
    te_ids, te_y = _episode_arrays(test, False, f"{tag} test", progress)
    x_tr, x_te = _features(bank, tr_ids), _features(bank, te_ids)
    rs = int(derive_rng(seed, f"audit:{tag}", 0).integers(2**31))
    model = HistGradientBoostingClassifier(
        max_iter=max_iter, class_weight="balanced", early_stopping=False, random_state=rs
    )
    with threadpool_limits(threads):  # (OpenMP on a busy 2-core host: 1 thread fits 8x faster)
        model.fit(x_tr, tr_y.ravel())
        p = _scores(model, x_te, te_y.shape)
        importance = _importance(model, x_te, te_y, float(np.nanmean(roc_auc(p, te_y))), seed, tag)
    row = {"split": split, "negatives": negatives, "negative_sampler": test.negative_sampler}
    row.update(_metrics(p, te_y))
    rng = derive_rng(seed, f"audit-chance:{tag}", 0)
    row["map_random"] = float(np.mean(average_precision_batch(rng.random(te_y.shape), te_y)))
    row["importance"] = importance
    row["top"] = max(importance, key=importance.get)
    row["train_scenes"] = int(tr_ids.size)
    row["test_episodes"] = int(test_episodes)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def check_audit_options(train_episodes, test_episodes, seed, max_iter) -> tuple[int, ...]:
    """The numbers of the audit as ints once in range (cheap: before a bank opens)."""
    return (
        validate.integer(
            train_episodes, "episodes.train", low=MIN_EPISODES["train"], high=MAX_AUDIT_EPISODES
        ),
        validate.integer(
            test_episodes, "episodes.test", low=MIN_EPISODES["test"], high=MAX_AUDIT_EPISODES
        ),
        validate.seed(seed),
        validate.integer(max_iter, "max_iter", low=1, high=10_000),
    )


def run_audit(
    bank,
    splits: Sequence,
    negatives: Sequence[str] = NEGATIVES,
    *,
    train_episodes: int = 1000,
    test_episodes: int = 1000,
    support: bool = True,
    negative_sampler: str = "paper",
    max_iter: int = 50,
    seed: int = 0,
    threads: int = 1,
    progress: bool = True,
) -> dict:
    """The audit of every (split, negatives): ``{"rows": [...], "importance": {negatives:
    {group: mean drop in AUC over splits}}, "strongest": {negatives: group}}``.

    Raises:
        ConfigError: an unknown split, kind of negatives or negative sampler, no split or no
            negatives, or episode counts out of range.
    """
    train_episodes, test_episodes, seed, max_iter = check_audit_options(
        train_episodes, test_episodes, seed, max_iter
    )
    if isinstance(splits, (str, Split)) or hasattr(splits, "keys"):
        splits = [splits]
    negatives = [negatives] if isinstance(negatives, str) else list(negatives)
    if not list(splits) or not negatives:
        raise ConfigError(
            f"give at least one split and one kind of negatives, got {splits} and {negatives}"
        )
    for neg in negatives:
        validate.choice(neg, "negatives", NEGATIVES)
    validate.choice(negative_sampler, "negative_sampler", NEGATIVE_SAMPLERS)
    resolved = [s if isinstance(s, Split) else make_split(bank, s) for s in splits]
    opts = {
        "train_episodes": train_episodes,
        "test_episodes": test_episodes,
        "support": bool(support),
        "negative_sampler": negative_sampler,
        "max_iter": max_iter,
        "seed": seed,
        "threads": validate.integer(threads, "threads", low=1, high=1024),
        "progress": progress,
    }
    learner = {k: opts[k] for k in ("support", "max_iter", "threads", "progress")}
    stream = {"seed": seed, "negative_sampler": negative_sampler}
    rows = []
    jobs = [(sp, neg) for neg in negatives for sp in resolved]
    for sp, neg in tqdm(jobs, desc="audit", unit="split", disable=not progress):
        train = EpisodeSpec(sp, "train", neg, size=train_episodes, **stream)
        test = EpisodeSpec(sp, "test", neg, size=test_episodes, **stream)
        rows.append(audit_split(bank, train, test, **learner))
        log.info("%s/%s: AUC %.3f (%.1f s)", sp.name, neg, rows[-1]["auc"], rows[-1]["seconds"])
    importance, strongest = {}, {}
    for neg in negatives:
        sub = [r for r in rows if r["negatives"] == neg]
        importance[neg] = {
            g: float(np.mean([r["importance"][g] for r in sub])) for g in FEATURE_GROUPS
        }
        strongest[neg] = max(importance[neg], key=importance[neg].get)
    return {"rows": rows, "importance": importance, "strongest": strongest, "options": opts}


def markdown(result: dict) -> str:
    """The audit as Markdown: one row per (split, negatives), then the mean importances."""
    lines = [
        "| split | neg. | AUC | CBA | mAP | chance mAP | top group (AUC drop) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(result["rows"], key=lambda r: (r["negatives"], r["split"])):
        lines.append(
            f"| {r['split']} | {r['negatives']} | {r['auc']:.3f} | {r['cba']:.3f} | "
            f"{r['map']:.3f} | {r['map_random']:.3f} | {r['top']} "
            f"({r['importance'][r['top']]:.3f}) |"
        )
    negs = list(result["importance"])
    lines += ["", "Drop in AUC when a feature group is permuted (mean over splits):", ""]
    lines += ["| group | " + " | ".join(negs) + " |", "|---|" + "---|" * len(negs)]
    for g in FEATURE_GROUPS:
        lines.append(
            f"| {g} | " + " | ".join(f"{result['importance'][n][g]:.3f}" for n in negs) + " |"
        )
    return "\n".join(lines)

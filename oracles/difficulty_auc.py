"""Difficulty evaluation (Bogin, Gupta and Berant 2022, sections 5.1-5.2): per-concept outcomes
of the weak oracle over a fixed number of episodes per test concept, a binary easy label, and
how well easiness predictors rank them: ROC AUC (pooled, per split, within length strata),
Spearman correlation, and per split the correlation of mean easiness with the split's metric."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from curi import validate
from curi.bits import unpack_rows
from curi.episodes import EpisodeSampler, EpisodeSpec
from curi.oracles.eval_set import EvalSet
from curi.oracles.metrics import (
    class_balanced_accuracy_batch,
    oracle_average_precision,
    roc_auc,
)
from curi.oracles.oracle import Oracle
from curi.posterior import predictive_on
from curi.predictors import THRESHOLDS
from curi.rng import derive_rng
from curi.splits import Split

MIN_SPLITS = 3  # a correlation over splits needs at least three of them
MAX_EPISODES_PER_CONCEPT = 10**6

__all__ = [
    "MAX_EPISODES_PER_CONCEPT",
    "MIN_SPLITS",
    "auc_table",
    "concept_sample",
    "easy_labels",
    "oracle_outcomes",
    "split_correlations",
    "stratified_auc",
]


def stratified_auc(scores, labels, strata) -> float:
    """AUC counting only (positive, negative) pairs within the same stratum (e.g. the same
    concept length): what a predictor ranks beyond the strata. NaN without such pairs."""
    s, y, g = np.asarray(scores, float), np.asarray(labels, bool), np.asarray(strata)
    num = den = 0.0
    for v in np.unique(g):
        m = g == v
        n1, n0 = int(y[m].sum()), int((~y[m]).sum())
        if n1 and n0:
            num += roc_auc(s[m], y[m]) * n1 * n0
            den += n1 * n0
    return num / den if den else float("nan")


def easy_labels(outcome: np.ndarray, threshold: float | str = "median") -> np.ndarray:
    """Binary easy labels: outcome >= threshold; ``median`` uses the outcomes' median (the
    split's, when called per split). A median tie puts the tied concepts on the easy side."""
    o = np.asarray(outcome, float)
    t = float(np.nanmedian(o)) if threshold == "median" else float(threshold)
    return o >= t


def concept_sample(split: Split, max_concepts: int | None, seed: int) -> np.ndarray:
    """The split's test concepts, or a seeded sample of `max_concepts` of them (sorted)."""
    te = np.asarray(split.test)
    if max_concepts is None or len(te) <= max_concepts:
        return te
    rng = derive_rng(seed, f"difficulty-sample:{split.name}")
    return np.sort(rng.choice(te, size=max_concepts, replace=False))


def oracle_outcomes(
    bank,
    spec: EpisodeSpec,
    concepts: np.ndarray | None = None,
    *,
    prior: str = "log_linear",
    likelihood: str = "size_principle",
    eval_set: EvalSet | None = None,
) -> dict[str, np.ndarray]:
    """The weak oracle's mean AP (on the evaluation set) and mean class-balanced accuracy (on
    the query set) over ``spec.size`` test episodes of each concept of `concepts` (default:
    the test concepts of ``spec.split``).

    Episode j of concept h is episode j of `spec`'s sampler whose test set is h alone, named
    ``<split>#<h>``, so it depends on (seed, split, h, j) only. The weak oracle's hypothesis
    space is the split's training concepts (the strong one when train is the whole bank).

    Returns:
        ``{"concept": (C,), "ap": (C,), "cba": (C,)}``.
    """
    episodes = validate.integer(
        spec.size, "episodes_per_concept", low=1, high=MAX_EPISODES_PER_CONCEPT
    )
    spec = spec.check(bank)
    split, negatives = spec.split, spec.negatives
    concepts = np.asarray(split.test if concepts is None else concepts, np.int64)
    ev = eval_set if eval_set is not None else EvalSet.from_bank(bank)
    kw = {"prior": prior, "likelihood": likelihood, "negatives": negatives}
    weak = (
        Oracle.strong(bank, **kw)
        if len(split.train) == len(bank)
        else Oracle.weak(bank, split, **kw)
    )
    groups = np.asarray(bank.groups)
    ap, cba = np.zeros(len(concepts)), np.zeros(len(concepts))
    for j, h in enumerate(concepts.tolist()):
        one = dataclasses.replace(split, name=f"{split.name}#{h}", test=np.array([h]))
        sampler = EpisodeSampler.from_spec(bank, spec.replace(split=one, subset="test"))
        aps, qs, ql = [], [], []
        label_words = ev.rows[h]
        label = unpack_rows(label_words, len(ev))
        for i in range(episodes):
            e = sampler[i]
            idx, w = weak.posterior(e.support_ids, e.support_labels)
            qs.append(predictive_on(bank, idx, w, e.query_ids))
            ql.append(e.query_labels)
            aps.append(oracle_average_precision(ev, label, idx, w, groups, label_words))
        ap[j] = float(np.mean(aps))
        cba[j] = float(np.mean(class_balanced_accuracy_batch(np.array(qs), np.array(ql))))
    return {"concept": concepts, "ap": ap, "cba": cba}


def auc_table(
    rows: Sequence[Mapping],
    predictors: Sequence[str],
    outcome: str,
    *,
    threshold: float | str = "median",
) -> list[dict]:
    """AUC of each predictor against easy labels of `outcome`, pooled and per split.

    Args:
        rows: per-concept rows with keys ``split``, ``length``, `outcome` and one per
            predictor (its easiness).
        predictors: the predictor keys.
        outcome: the outcome key (e.g. ``oracle_ap``, ``model_ap``).
        threshold: easy = outcome >= threshold; ``median``: each split's median;
            ``pooled_median``: the median of all rows (one threshold for every split).

    Returns:
        One row per (scope, predictor): ``scope`` (``pooled`` or a split), ``predictor``,
        ``n``, ``easy`` (share), ``auc``, ``auc_length_stratified``, ``spearman`` (with the
        continuous outcome).
    """
    from scipy import stats

    if isinstance(threshold, str):
        validate.choice(threshold, "threshold", THRESHOLDS)
    rows = [r for r in rows if r.get(outcome) is not None and np.isfinite(r[outcome])]
    splits = sorted({r["split"] for r in rows})
    labels = np.zeros(len(rows), bool)
    if threshold == "pooled_median":  # one threshold for all splits, like the paper's exact match
        labels = easy_labels(np.array([r[outcome] for r in rows], float), "median")
    for s in splits if threshold != "pooled_median" else []:
        m = np.array([r["split"] == s for r in rows])  # per split (its median), then pooled
        labels[m] = easy_labels(np.array([r[outcome] for r in rows])[m], threshold)
    out = []
    for scope in ["pooled", *splits]:
        m = np.array([scope == "pooled" or r["split"] == scope for r in rows], bool)
        if not m.any():
            continue
        y = labels[m]
        o = np.array([r[outcome] for r in rows])[m]
        length = np.array([r["length"] for r in rows])[m]
        for p in predictors:
            e = np.array([r[p] for r in rows])[m]
            rho = stats.spearmanr(e, o).statistic if np.ptp(e) > 0 and np.ptp(o) > 0 else np.nan
            out.append(
                {
                    "scope": scope,
                    "predictor": p,
                    "n": int(m.sum()),
                    "easy": float(y.mean()),
                    "auc": roc_auc(e, y),
                    "auc_length_stratified": stratified_auc(e, y, length),
                    "spearman": float(rho),
                }
            )
    return out


def split_correlations(split_rows: Sequence[Mapping], predictors: Sequence[str], metric: str):
    """Per-split correlation (Pearson and Spearman, over splits) of each predictor's mean
    easiness with the split's `metric`, beside ``-d_compound`` (the paper's Table 5). NaN with
    fewer than `MIN_SPLITS` splits, or when either side is constant.

    Args:
        split_rows: one mapping per split with `metric`, ``d_compound`` and ``mean_<p>`` keys.

    Returns:
        ``[{"predictor", "pearson", "spearman", "splits"}]``, ``-D_C`` last.
    """
    from scipy import stats

    y = np.array([r[metric] for r in split_rows], float)
    out = []
    cols = [(p, np.array([r[f"mean_{p}"] for r in split_rows], float)) for p in predictors]
    cols.append(("-D_C", -np.array([r["d_compound"] for r in split_rows], float)))
    for name, x in cols:
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.sum() < MIN_SPLITS or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
            pr = sr = float("nan")
        else:
            pr = float(stats.pearsonr(x[ok], y[ok]).statistic)
            sr = float(stats.spearmanr(x[ok], y[ok]).statistic)
        out.append({"predictor": name, "pearson": pr, "spearman": sr, "splits": int(ok.sum())})
    return out

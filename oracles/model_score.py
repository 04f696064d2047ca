"""Scoring any model with the benchmark's metrics (CURI paper, section 3): per-scene scores of
a model, given by a callable or read from a scores file, become mAP on the shared evaluation
set and class-balanced accuracy on the query set, per split and per concept, beside the strong,
weak, random and prior-only oracles of the same episodes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from curi import validate
from curi.bits import unpack_rows
from curi.episodes import EpisodeSampler, EpisodeSpec
from curi.errors import ConfigError
from curi.oracles.eval_set import EvalSet
from curi.oracles.gap import score_split
from curi.oracles.metrics import (
    average_precision_batch,
    class_balanced_accuracy_batch,
    pooled_class_balanced_accuracy,
)
from curi.paths import regular_file
from curi.splits import Split, make_split

__all__ = [
    "Predict",
    "TargetCache",
    "check_threshold",
    "model_predictions",
    "score_arrays",
    "score_file",
    "score_model",
]

Predict = Callable[[Any, np.ndarray, Any], Any]
"""``predict(support, support_labels, targets) -> (T,) scores``: the support inputs of one
episode (as `render` returns them for its records), their (S,) 0/1 labels, and T target inputs;
higher scores mean "more likely positive"."""


class TargetCache:
    """What a predict computes from a target set (its embeddings, its bit planes), kept for
    the last `size` target sets, known by identity: `model_predictions` hands the evaluation
    set as the same object to every episode, between the episodes' own query sets, so with
    two entries it is computed once.

    Args:
        make: targets -> what to keep.
        size: target sets kept.
    """

    def __init__(self, make: Callable[[Any], Any], size: int = 2) -> None:
        self.make, self.size = make, size
        self._kept: list[tuple[Any, Any]] = []  # (targets, value), the newest last

    def __call__(self, targets) -> Any:
        for i, (t, value) in enumerate(self._kept):
            if t is targets:
                self._kept.append(self._kept.pop(i))
                return value
        value = self.make(targets)
        self._kept = (self._kept + [(targets, value)])[-self.size :]
        return value


def _real(x, what: str) -> np.ndarray:
    """`x` (an array, a tensor or a list) as float64, once its values are real numbers: a
    complex score would lose its imaginary part without a word."""
    a = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x)
    if a.dtype.kind != "c":
        try:
            return a.astype(np.float64)
        except (TypeError, ValueError):  # an object array holding complex numbers or text
            pass
    raise ConfigError(f"{what} must be real numbers, got an array of {a.dtype}")


def check_threshold(threshold) -> float:
    """The decision threshold of the class-balanced accuracy, once it is a finite number.

    Raises:
        ConfigError: naming ``threshold`` and the value (NaN predicted no scene positive).
    """
    return validate.number(threshold, "threshold")


def _as_scores(x, n: int, what: str) -> np.ndarray:
    a = _real(x, f"the scores predict returned for {what} scenes").reshape(-1)
    if a.shape != (n,):
        raise ConfigError(f"predict returned {a.shape[0]} scores for {n} {what} scenes")
    return a


def model_predictions(
    predict: Predict,
    bank,
    split: Split | str | Mapping,
    *,
    subset: str = "test",
    negatives: str = "hard",
    episodes: int = 100,
    seed: int = 0,
    render: Callable[[list[dict]], Any] | None = None,
    render_ids: Callable[[np.ndarray], Any] | None = None,
    progress: bool = False,
    negative_sampler: str = "paper",
) -> dict[str, np.ndarray]:
    """Run `predict` on `episodes` episodes of (split, subset, negatives, seed) (their
    negatives drawn by `negative_sampler`, as `curi.EpisodeSampler` draws them).

    `render` turns scene records into model inputs (e.g. ``lambda r: renderer(r).data`` with
    a `curi.renderers` renderer); default: the records themselves. `render_ids` instead turns
    the bank's scene ids ((N,) int64) into inputs, without records (`curi.models.score_in_modality`
    renders a modality this way, as its episode dataset does). The evaluation set is rendered
    once; per episode, `predict` is called twice, with the query set and with the evaluation
    set as targets.

    Returns:
        ``query_scores`` (E, Q) and ``eval_scores`` (E, M) float64, and ``index`` (E,): the
        arrays `score_arrays` and `score_file` read.

    Raises:
        ConfigError: a bad split or option, or `predict` returning the wrong number of scores.
    """
    from tqdm import tqdm

    if render is not None and render_ids is not None:
        raise ConfigError("give render (records -> inputs) or render_ids (ids -> inputs), not both")
    if render_ids is None:
        by_records = render or (lambda records: records)
        render_ids = lambda ids: by_records(bank.scene_records(ids))  # noqa: E731
    spec = EpisodeSpec(
        split, subset, negatives, seed=seed, size=episodes, negative_sampler=negative_sampler
    )
    sampler = EpisodeSampler.from_spec(bank, spec)
    ev = EvalSet.from_bank(bank)
    eval_inputs = render_ids(ev.ids)
    q_scores = np.zeros((episodes, sampler.num_positives + sampler.num_negatives))
    e_scores = np.zeros((episodes, len(ev)))
    for i in tqdm(range(episodes), desc="score", disable=not progress):
        e = sampler[i]
        support, labels = render_ids(e.support_ids), e.support_labels.copy()
        q_scores[i] = _as_scores(
            predict(support, labels, render_ids(e.query_ids)), q_scores.shape[1], "query"
        )
        e_scores[i] = _as_scores(predict(support, labels, eval_inputs), len(ev), "evaluation")
    return {"query_scores": q_scores, "eval_scores": e_scores, "index": np.arange(episodes)}


def score_arrays(
    bank,
    split: Split | str | Mapping,
    *,
    query_scores: np.ndarray,
    eval_scores: np.ndarray,
    subset: str = "test",
    negatives: str = "hard",
    seed: int = 0,
    threshold: float = 0.5,
    oracles: bool = True,
    prior: str = "log_linear",
    likelihood: str = "size_principle",
    negative_sampler: str = "paper",
) -> dict[str, list[dict]]:
    """The benchmark's metrics of a model's scores, given as arrays, on episodes 0..E-1 of
    (split, subset, negatives, seed, negative_sampler).

    Args:
        bank: a `ConceptBank`.
        split: a `Split`, a split name or a split config.
        query_scores: (E, Q) scores of each episode's query set, in the episode's order.
        eval_scores: (E, M) scores of the evaluation set (``bank.eval_ids`` order).
        subset, negatives, seed, negative_sampler: which episodes were scored
            (`curi.EpisodeSampler`).
        threshold: a query scene is predicted positive iff its score > threshold (0.5 for
            probabilities, 0 for log-odds).
        oracles: add the strong / weak / random / prior-only oracles of the same episodes
            (test subset).
        prior, likelihood: the oracles' (see `curi.oracles.Oracle`).

    Returns:
        ``{"split": [one row], "concepts": [one row per concept]}``. The split row holds
        ``map`` (mean step-wise AP on the evaluation set), ``cba`` (mean class-balanced
        accuracy on the query set), ``cba_pooled``, and with `oracles` the gap report's
        ``map_strong``, ``map_weak``, ``map_random``, ``map_prior``, ``cba_strong``, ...,
        ``cba_prior``, ``cba_pooled_prior`` (the prior-only oracle). Each concept row
        holds its episodes' mean ``map`` and ``cba``.

    Raises:
        ConfigError: scores of the wrong shape or not real, a threshold that is not a finite
            number, or a bad split or option.
    """
    threshold = check_threshold(threshold)
    q, m = _score_matrices(query_scores, eval_scores)
    spec = EpisodeSpec(
        split, subset, negatives, seed=seed, size=len(q), negative_sampler=negative_sampler
    )
    sampler = EpisodeSampler.from_spec(bank, spec)
    sp = sampler.split
    ev = EvalSet.from_bank(bank)
    _check_fit(q, m, sampler, ev)
    eps = [sampler[i] for i in range(len(q))]
    concepts = np.array([e.concept for e in eps], np.int64)
    q_labels = np.stack([e.query_labels for e in eps])
    ap = average_precision_batch(m, unpack_rows(ev.rows[concepts], len(ev)))  # (E,)
    cba = class_balanced_accuracy_batch(q, q_labels, threshold=threshold)
    row = {
        "split": sp.name,
        "subset": subset,
        "negatives": negatives,
        "episodes": len(q),
        "map": float(np.nanmean(ap)),
        "cba": float(np.nanmean(cba)),
        "cba_pooled": pooled_class_balanced_accuracy(q, q_labels, threshold=threshold),
    }
    if oracles and subset == "test":
        orc = score_split(bank, sampler.spec, ev, prior=prior, likelihood=likelihood)
        row.update({k: v for k, v in orc.items() if k.startswith(("map_", "cba_"))})
    return {"split": [row], "concepts": _concept_rows(bank, sp.name, concepts, ap, cba)}


def _score_matrices(query_scores, eval_scores) -> tuple[np.ndarray, np.ndarray]:
    """`score_arrays`' scores as real (E, Q) and (E, M) arrays of the same E >= 1 episodes.

    Raises:
        ConfigError: scores not real, or of another shape.
    """
    q, m = _real(query_scores, "query_scores"), _real(eval_scores, "eval_scores")
    if q.ndim != 2 or m.ndim != 2 or len(q) != len(m) or len(q) == 0:
        raise ConfigError(
            f"expected query scores (E, Q) and eval scores (E, M) for the same E >= 1 episodes, "
            f"got {q.shape} and {m.shape}"
        )
    return q, m


def _check_fit(q: np.ndarray, m: np.ndarray, sampler: EpisodeSampler, ev: EvalSet) -> None:
    """Refuse scores whose query or eval width is not the episodes' (ConfigError)."""
    if m.shape[1] != len(ev) or q.shape[1] != sampler.num_positives + sampler.num_negatives:
        raise ConfigError(
            f"scores of shape {q.shape} (query) and {m.shape} (eval) do not fit these episodes: "
            f"{sampler.num_positives + sampler.num_negatives} query and {len(ev)} eval scenes"
        )


def _concept_rows(bank, split: str, concepts: np.ndarray, ap, cba) -> list[dict]:
    """One row per concept of the episodes: its episodes' mean AP and CBA."""
    per = []
    for h in np.unique(concepts):
        sel = concepts == h
        per.append(
            {
                "split": split,
                "concept": int(h),
                "concept_text": bank.concepts[h],
                "episodes": int(sel.sum()),
                "map": float(np.nanmean(ap[sel])),
                "cba": float(np.nanmean(cba[sel])),
            }
        )
    return per


def score_model(
    predict: Predict,
    bank,
    splits: Sequence[Split | str | Mapping] | Split | str,
    *,
    subset: str = "test",
    negatives: str = "hard",
    episodes: int = 100,
    seed: int = 0,
    render: Callable[[list[dict]], Any] | None = None,
    render_ids: Callable[[np.ndarray], Any] | None = None,
    threshold: float = 0.5,
    oracles: bool = True,
    progress: bool = False,
    negative_sampler: str = "paper",
) -> dict[str, list[dict]]:
    """Score a model given as a `Predict` callable on one or more splits: `model_predictions`
    (its inputs made by `render` or `render_ids`) then `score_arrays` per split; the rows
    of all splits together. For a model trained on `curi.models.data.episode_dataset`,
    `curi.models.score_in_modality` renders the same modality config instead.

    Returns:
        ``{"splits": [one row per split], "concepts": [one row per (split, concept)]}``.

    Raises:
        ConfigError: no split, a threshold that is not a finite number, or what
            `model_predictions` and `score_arrays` raise.
    """
    threshold = check_threshold(threshold)  # before the model runs
    if isinstance(splits, (str, Split)) or hasattr(splits, "keys"):
        splits = [splits]
    if not splits:
        raise ConfigError("splits must name at least one split")
    out: dict[str, list[dict]] = {"splits": [], "concepts": []}
    for s in splits:
        sp = s if isinstance(s, Split) else make_split(bank, s)
        kw = {"subset": subset, "negatives": negatives, "seed": seed}
        kw["negative_sampler"] = negative_sampler
        pred = model_predictions(
            predict,
            bank,
            sp,
            episodes=episodes,
            render=render,
            render_ids=render_ids,
            progress=progress,
            **kw,
        )
        got = score_arrays(
            bank,
            sp,
            query_scores=pred["query_scores"],
            eval_scores=pred["eval_scores"],
            threshold=threshold,
            oracles=oracles,
            **kw,
        )
        out["splits"] += got["split"]
        out["concepts"] += got["concepts"]
    return out


def score_file(path: str | Path, bank, split: Split | str | Mapping, **options) -> dict:
    """`score_arrays` of a scores file: an ``.npz`` with ``query_scores`` (E, Q) and
    ``eval_scores`` (E, M) (as `model_predictions` returns; ``np.savez(path, **pred)``).
    `options` are those of `score_arrays` (subset, negatives, seed, threshold, ...).

    Raises:
        ConfigError: the file is missing or lacks an array.
    """
    path = regular_file(path, "the scores file")
    names = ("query_scores", "eval_scores")
    try:
        f = np.load(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the scores file {path}: {e}") from None
    if not hasattr(f, "files"):  # an .npy: one array
        raise ConfigError(f"cannot read the scores file {path}: not an .npz (np.savez) archive")
    with f:
        missing = [k for k in names if k not in f.files]
        arrays = {k: f[k] for k in names if k not in missing}
    if missing:
        raise ConfigError(
            f"the scores file {path} lacks {', '.join(missing)}; it needs query_scores (E, Q) "
            "and eval_scores (E, M)"
        )
    return score_arrays(bank, split, **arrays, **options)

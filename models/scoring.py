"""Scoring one's own model on the inputs it was trained on (CURI paper, section 3: mAP on the
shared evaluation set, class-balanced accuracy on the query set, beside the oracles).

`curi.oracles.model_score` scores any callable on inputs made by a user's `render`; here the
inputs are rendered from a modality config exactly as `curi.models.data.episode_dataset`
renders them (the same renderer, `make_renderer`, and the same scene path, `LiveScenes`), so
a model trained on that dataset is scored on the same tensors. Two ways to give the model:

- ``predict(support, support_labels, targets) -> (T,) scores``, called per episode with the
  query set and with the whole evaluation set as targets;
- ``embed(inputs) -> (N, D)`` and ``compare(support_vectors, labels, target_vectors) ->
  scores`` for models that embed each scene independently of the episode (prototypical
  networks and the like): the evaluation set is then embedded once per call, in chunks, as
  `curi.models.evaluate` does for its own networks, and only the support and query sets per
  episode.

Inputs are what the dataset gives for one set of scenes: a tensor ``(N, *item)``, or a
``(features, mask)`` pair for per-object modalities (schema), unless the modality asks for
one tensor (schema with ``mask_channel: true``: ``(N, 5, 21)``, the mask as the last
feature)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from curi.errors import ConfigError
from curi.models.data import make_renderer
from curi.models.pipeline import LiveScenes
from curi.oracles import model_score
from curi.oracles.model_score import Predict
from curi.splits import Split

__all__ = ["Compare", "Embed", "model_predictions", "scene_inputs", "score_in_modality"]

Embed = Callable[[Any], Any]
"""``embed(inputs) -> (N, D)`` vectors of N rendered scenes (a tensor or an array)."""

Compare = Callable[[Any, np.ndarray, Any], Any]
"""``compare(support_vectors, support_labels, target_vectors) -> (T,) scores``: vectors as
`Embed` returns them, labels (S,) 0/1 (1 = positive); higher means "more likely positive"."""


def _concat(parts: list) -> Any:
    """Chunks of inputs or vectors joined along the scene axis (pairs joined member-wise)."""
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], tuple):
        return tuple(_concat(list(p)) for p in zip(*parts, strict=True))
    if isinstance(parts[0], torch.Tensor):
        return torch.cat(parts)
    return np.concatenate([np.asarray(p) for p in parts])


def scene_inputs(bank, modality: Mapping | str, *, chunk: int = 512) -> Callable:
    """Scene ids -> model inputs as `episode_dataset` renders them for `modality`: ``x``
    ``(N, *item)``, or ``(x, mask)`` with ``mask`` (N, 5) bool for per-object modalities
    (schema without ``mask_channel``);
    rendered `chunk` scenes at a time (the evaluation set is large).

    Raises:
        ConfigError: a bad modality or option, or ``chunk < 1``.
    """
    if chunk < 1:
        raise ConfigError(f"chunk must be >= 1, got {chunk}")
    source = LiveScenes(bank.scenes, make_renderer(modality))

    def inputs(ids: np.ndarray) -> Any:
        ids = np.asarray(ids, np.int64).reshape(-1)
        parts = []
        for start in range(0, max(len(ids), 1), chunk):
            x, mask = source(ids[start : start + chunk])
            parts.append(x if mask is None else (x, mask))
        return _concat(parts)

    return inputs


def _model(
    predict: Predict | None,
    embed: Embed | None,
    compare: Compare | None,
    bank,
    modality: Mapping | str,
    chunk: int,
) -> tuple[Predict, Callable]:
    """The per-episode `Predict` and the ids -> inputs function that `model_score` takes, for
    either way of giving the model."""
    if (predict is None) == (embed is None and compare is None):
        raise ConfigError("give either predict, or embed and compare (not both, not neither)")
    if predict is None and (embed is None or compare is None):
        raise ConfigError("the embedding path needs both embed and compare")
    inputs = scene_inputs(bank, modality, chunk=chunk)
    if predict is not None:
        return predict, inputs

    def vectors(ids: np.ndarray) -> Any:  # rendered and embedded, one chunk at a time
        ids = np.asarray(ids, np.int64).reshape(-1)
        return _concat(
            [embed(inputs(ids[s : s + chunk])) for s in range(0, max(len(ids), 1), chunk)]
        )

    return compare, vectors


def model_predictions(
    predict: Predict | None,
    bank,
    split: Split | str | Mapping,
    *,
    modality: Mapping | str = "schema",
    embed: Embed | None = None,
    compare: Compare | None = None,
    subset: str = "test",
    negatives: str = "hard",
    episodes: int = 100,
    seed: int = 0,
    chunk: int = 512,
    progress: bool = False,
    negative_sampler: str = "paper",
) -> dict[str, np.ndarray]:
    """A model's scores on `episodes` episodes, on the inputs of `modality` (see the module
    docstring): `curi.oracles.model_score.model_predictions` with the dataset's rendering.

    Returns:
        ``query_scores`` (E, Q), ``eval_scores`` (E, M) and ``index`` (E,).

    Raises:
        ConfigError: both or neither of `predict` and `embed`/`compare`, a bad split, modality
            or option, or the wrong number of scores.
    """
    predict, render_ids = _model(predict, embed, compare, bank, modality, chunk)
    with torch.no_grad():
        return model_score.model_predictions(
            predict,
            bank,
            split,
            subset=subset,
            negatives=negatives,
            episodes=episodes,
            seed=seed,
            render_ids=render_ids,
            progress=progress,
            negative_sampler=negative_sampler,
        )


def score_in_modality(
    predict: Predict | None,
    bank,
    splits: Sequence[Split | str | Mapping] | Split | str,
    *,
    modality: Mapping | str = "schema",
    threshold: float | None = None,
    embed: Embed | None = None,
    compare: Compare | None = None,
    subset: str = "test",
    negatives: str = "hard",
    episodes: int = 100,
    seed: int = 0,
    oracles: bool = True,
    chunk: int = 512,
    progress: bool = False,
    negative_sampler: str = "paper",
) -> dict[str, list[dict]]:
    """Score a model on one or more splits, on the inputs `episode_dataset` gives for
    `modality` (a name or a renderer config, as the dataset takes it).

    Args:
        predict: ``predict(support, support_labels, targets) -> scores``, or None with
            `embed` and `compare`.
        bank: a `ConceptBank`.
        splits: a split (name, config or `Split`) or a list of them.
        modality: the modality config the model was trained with.
        threshold: required: a query scene is predicted positive iff its score > threshold
            (0.5 for probabilities, 0 for logits or log-odds).
        embed, compare: the embedding path (see the module docstring).
        subset, negatives, episodes, seed, negative_sampler: which episodes
            (`curi.EpisodeSampler`).
        oracles: add the strong / weak / random / prior-only oracles of the same episodes.
        chunk: scenes rendered (and embedded) at a time.
        progress: show a progress bar.

    Returns:
        ``{"splits": [one row per split], "concepts": [one row per (split, concept)]}``, as
        `curi.oracles.model_score.score_model` returns.

    Raises:
        ConfigError: no `threshold` or one that is not a finite number, no split, both or
            neither of `predict` and `embed`/`compare`, or a bad split, modality or option.
    """
    if threshold is None:
        raise ConfigError(
            "score_in_modality needs threshold: 0.5 if the model returns probabilities, 0 for "
            "logits or log-odds"
        )
    threshold = model_score.check_threshold(threshold)
    predict, render_ids = _model(predict, embed, compare, bank, modality, chunk)
    with torch.no_grad():
        return model_score.score_model(
            predict,
            bank,
            splits,
            subset=subset,
            negatives=negatives,
            episodes=episodes,
            seed=seed,
            render_ids=render_ids,
            threshold=threshold,
            oracles=oracles,
            progress=progress,
            negative_sampler=negative_sampler,
        )

"""Evaluation of prototypical networks (paper section 4): embed the bank's mAP evaluation
set once, score every episode's prototypes against it (mAP) and its own query set (class-balanced
accuracy), and evaluate a saved checkpoint on test episodes beside the Bayesian oracles, per split
and per concept."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from curi import validate
from curi.atomic import atomic_path, write_text
from curi.episodes import EpisodeSampler, EpisodeSpec
from curi.errors import BankError, BankMismatchError, ConfigError
from curi.models.checkpoint import check_checkpoint_bank, load_weights
from curi.models.data import (
    EpisodeDataset,
    EvalSceneDataset,
    collate_episodes,
    eval_labels,
    make_renderer,
    renders_on_cuda,
)
from curi.models.protonet import ProtoNet
from curi.models.runtime import StopSignals, autocast, resolve_device, to_device
from curi.oracles.eval_set import EvalSet
from curi.oracles.gap import score_split
from curi.oracles.metrics import (
    average_precision_batch,
    class_balanced_accuracy_batch,
    pooled_class_balanced_accuracy,
)
from curi.paths import safe_name

__all__ = [
    "concept_table",
    "embed_eval_set",
    "evaluate_checkpoint",
    "evaluate_episodes",
    "log_odds",
    "write_concepts",
    "write_metrics",
]

log = logging.getLogger(__name__)


def log_odds(prototypes: Tensor, embeddings: Tensor) -> Tensor:
    """(B, N) ``log p(y=1|u) - log p(y=0|u) = ||u - c-||^2 - ||u - c+||^2`` of N scenes against
    B episodes' prototypes (B, 2, E).

    The ranking of `ProtoNet.score` (its sigmoid), without the sigmoid: in float32 it
    saturates to exactly 1.0 beyond a log-odds of about 17, and such ties would change AP.
    """
    prototypes, embeddings = prototypes.float(), embeddings.float()
    c_neg, c_pos = prototypes[:, 0], prototypes[:, 1]  # (B, E) each
    bias = (c_neg * c_neg).sum(-1) - (c_pos * c_pos).sum(-1)  # (B,)
    return 2.0 * (c_pos - c_neg) @ embeddings.T + bias[:, None]  # (B, N)


@torch.inference_mode()
def embed_eval_set(
    model: ProtoNet,
    bank,
    modality: Mapping,
    *,
    device: torch.device,
    chunk: int = 512,
    num_workers: int = 0,
    amp_dtype: torch.dtype | None = None,
) -> Tensor:
    """(M, E) float32 embeddings of the bank's mAP evaluation set (model in eval mode), rendered
    chunk by chunk in DataLoader workers and embedded once."""
    ds = EvalSceneDataset(bank, modality, chunk=chunk)
    on_gpu = renders_on_cuda(modality)
    loader = DataLoader(
        ds,
        batch_size=None,
        num_workers=0 if on_gpu else num_workers,
        pin_memory=device.type == "cuda" and not on_gpu,
        worker_init_fn=StopSignals.worker_init,  # validation during training: see there
    )
    parts = []
    for item in loader:
        x = item["x"].to(device, non_blocking=True)
        mask = item.get("mask")
        mask = None if mask is None else mask.to(device, non_blocking=True)
        with autocast(device, amp_dtype):
            parts.append(model.embed(x, mask).float())
    return torch.cat(parts)


@torch.inference_mode()
def evaluate_episodes(
    model: ProtoNet,
    sampler: EpisodeSampler,
    modality: Mapping,
    *,
    device: torch.device,
    batch_size: int = 64,
    num_workers: int = 0,
    chunk: int = 512,
    max_len: int | None = None,
    eval_set: EvalSet | None = None,
    amp_dtype: torch.dtype | None = None,
    progress: bool = False,
    keep_episodes: bool = False,
) -> dict:
    """mAP and class-balanced accuracy of `model` on every episode of `sampler`.

    mAP: each episode's prototypes score the whole evaluation set (`bank.eval_ids`, embedded
    once) by `log_odds`; AP against the concept's truth there, averaged over episodes. CBA: the
    query set classified by ``p(y=1|u) > 0.5``, per episode then averaged (``cba``) and pooled
    over all queries (``cba_pooled``), as the oracles report them.

    Returns:
        ``{"map", "cba", "cba_pooled", "query_loss", "concept_loss", "episodes",
        "eval_scenes", "seconds"}`` (``concept_loss`` None without a decoder); with
        `keep_episodes` also ``episode_concepts`` and ``episode_ap``, (n,) arrays of each
        episode's concept and AP, for per-concept results (`concept_table`).
    """
    from tqdm import tqdm

    t0 = time.perf_counter()
    was_training = model.training
    model.eval()
    bank = sampler.bank
    ev = eval_set if eval_set is not None else EvalSet.from_bank(bank)
    try:
        emb = embed_eval_set(
            model,
            bank,
            modality,
            device=device,
            chunk=chunk,
            num_workers=num_workers,
            amp_dtype=amp_dtype,
        )
        loader = _episode_loader(sampler, modality, device, batch_size, num_workers, max_len)
        tally = _Tally()
        for batch in tqdm(loader, desc=f"eval {sampler.subset}", disable=not progress):
            gpu = to_device(batch, device)
            with autocast(device, amp_dtype):
                out = model(gpu)
            tally.add(out, batch, emb, ev)
    finally:
        model.train(was_training)
    return tally.metrics(
        decoder=model.decoder is not None, eval_scenes=len(ev), t0=t0, keep_episodes=keep_episodes
    )


def _episode_loader(sampler, modality, device, batch_size: int, num_workers: int, max_len):
    """The DataLoader of `evaluate_episodes`: `sampler`'s episodes in order, rendered in
    `num_workers` workers (in this process when they render on CUDA)."""
    ds = EpisodeDataset(sampler, modality, max_len=max_len)
    on_gpu = renders_on_cuda(modality)
    return DataLoader(
        ds,
        batch_sampler=BatchSampler(SequentialSampler(ds), batch_size, drop_last=False),
        collate_fn=collate_episodes,
        num_workers=0 if on_gpu else num_workers,
        pin_memory=device.type == "cuda" and not on_gpu,
        worker_init_fn=StopSignals.worker_init,
    )


@dataclasses.dataclass
class _Tally:
    """What `evaluate_episodes` gathers batch by batch: each episode's AP, concept, query
    log-odds and labels, and the losses summed over episodes."""

    aps: list = dataclasses.field(default_factory=list)
    concepts: list = dataclasses.field(default_factory=list)
    q_scores: list = dataclasses.field(default_factory=list)
    q_labels: list = dataclasses.field(default_factory=list)
    q_loss: float = 0.0
    c_loss: float = 0.0

    def add(self, out, batch: Mapping, emb: Tensor, ev: EvalSet) -> None:
        """Add a batch: `out`, the model's output on `batch`; `emb`, the eval set's embeddings."""
        b = len(batch["concept"])
        self.q_loss += float(out.query_loss) * b
        if out.concept_loss is not None:
            self.c_loss += float(out.concept_loss) * b
        scores = log_odds(out.prototypes, emb).double().cpu().numpy()  # (B, M)
        # Shift each row to >= 0 (same order) for the metric's fast path.
        scores -= scores.min(axis=1, keepdims=True)
        self.concepts.append(batch["concept"].cpu().numpy())
        truth = eval_labels(ev.rows, self.concepts[-1], len(ev))  # (B, M)
        self.aps.append(average_precision_batch(scores, truth))
        logits = out.logits.float()
        self.q_scores.append((logits[..., 1] - logits[..., 0]).cpu().numpy())  # (B, Q) log-odds
        self.q_labels.append(batch["query_labels"].cpu().numpy())

    def metrics(self, *, decoder: bool, eval_scenes: int, t0: float, keep_episodes: bool) -> dict:
        """The result of `evaluate_episodes` (`t0`: its start, `time.perf_counter`)."""
        ap = np.concatenate(self.aps)
        qs, ql = np.concatenate(self.q_scores), np.concatenate(self.q_labels)
        n = len(ap)
        out = {
            "map": float(np.nanmean(ap)),
            "cba": float(np.nanmean(class_balanced_accuracy_batch(qs, ql, threshold=0.0))),
            "cba_pooled": float(pooled_class_balanced_accuracy(qs, ql, threshold=0.0)),
            "query_loss": self.q_loss / n,
            "concept_loss": self.c_loss / n if decoder else None,
            "episodes": n,
            "eval_scenes": eval_scenes,
            "seconds": round(time.perf_counter() - t0, 3),
        }
        if keep_episodes:
            out["episode_concepts"], out["episode_ap"] = np.concatenate(self.concepts), ap
        return out


def concept_table(
    bank,
    concepts: np.ndarray,
    ap: np.ndarray,
    *,
    split: str,
    oracle_ap: Mapping[str, np.ndarray] | None = None,
) -> list[dict]:
    """Per-concept results of an evaluation: one row per concept that has episodes, in concept
    order, with the mean AP over its episodes (the split's mAP is their episode-weighted mean).

    Args:
        bank: the bank the concept ids index.
        concepts: (n,) concept id of each episode.
        ap: (n,) the model's AP of each episode (NaN episodes are left out of the means).
        split: the split's name, written in every row.
        oracle_ap: optional ``{"strong": (n,), "weak": (n,), ...}`` APs of the oracles on the
            same episodes, averaged per concept into ``oracle_ap_<name>`` columns.

    Returns:
        Rows ``{"split", "concept_id", "concept", "group", "episodes", "model_ap",
        "model_ap_std", ["oracle_ap_<name>", ...]}``.
    """
    concepts = np.asarray(concepts, np.int64)
    ids, inv = np.unique(concepts, return_inverse=True)
    k = len(ids)
    columns = {"model_ap": np.asarray(ap, np.float64)}
    for name, values in (oracle_ap or {}).items():
        columns[f"oracle_ap_{name}"] = np.asarray(values, np.float64)
    if any(v.shape != concepts.shape for v in columns.values()):
        raise ConfigError("per-concept results need one AP per episode in every column")
    means = {}
    for name, v in columns.items():  # NaN-skipping means per concept, by bincount
        ok = np.isfinite(v)
        x = np.where(ok, v, 0.0)
        n = np.bincount(inv, weights=ok, minlength=k)
        with np.errstate(invalid="ignore", divide="ignore"):
            means[name] = np.bincount(inv, weights=x, minlength=k) / n
            if name == "model_ap":  # the spread over a concept's episodes
                sq = np.bincount(inv, weights=x * x, minlength=k) / n
                means["model_ap_std"] = np.sqrt(np.maximum(sq - means[name] ** 2, 0.0))
    counts = np.bincount(inv, minlength=k)
    rows = []
    for j, h in enumerate(ids.tolist()):
        row = {
            "split": split,
            "concept_id": h,
            "concept": bank.concepts[h],
            "group": bank.group(h),
            "episodes": int(counts[j]),
        }
        row.update({name: float(v[j]) for name, v in means.items()})
        rows.append(row)
    return rows


def write_concepts(rows: list[dict], path: str | Path) -> Path:
    """Write `concept_table` rows as a parquet table (atomically), one row per concept."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows) if rows else pa.table({})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def write_metrics(metrics: Mapping, path: str | Path) -> Path:
    """Write metrics as indented JSON (to a temporary name, then renamed into place); per-concept
    rows (``per_concept``) are left to `write_concepts`."""
    slim = {k: v for k, v in metrics.items() if k != "per_concept"}
    return write_text(path, json.dumps(slim, indent=2) + "\n")


def evaluate_checkpoint(
    checkpoint: str | Path,
    *,
    data_dir: str | Path | None = None,
    subset: str = "test",
    episodes: int = 20_000,
    seed: int = 0,
    split: str | Mapping | None = None,
    negatives: str | None = None,
    negative_sampler: str | None = None,
    device: str = "auto",
    render_device: str | None = None,
    batch_size: int | None = None,
    num_workers: int = 0,
    chunk: int = 512,
    oracles: bool = True,
    prior: str = "log_linear",
    likelihood: str = "size_principle",
    progress: bool = False,
    build: bool | None = None,
    bank=None,
    per_concept: bool = True,
) -> dict:
    """Evaluate a checkpoint of `curi.models.train.train` on `episodes` episodes of a subset.

    The model, bank, split and negatives are rebuilt from the config stored in the checkpoint
    (split and negatives may be overridden). With `oracles`, the strong / weak / random /
    prior-only oracles score the very same test episodes (`curi.oracles.gap.score_split`).

    Args:
        checkpoint: a ``.pt`` file, or a run directory (its ``checkpoints/best.pt``, else
            ``checkpoints/last.pt``).
        data_dir: where the bank lives (default: the checkpoint's, else the default folder);
            a missing bank is built from the stored bank config in the default folder, or
            anywhere with `build` (`curi.bank.open_bank`).
        subset, episodes, seed: ``test`` (default), ``val`` or ``train``; how many episodes
            (paper: 20,000 test episodes); their seed (the oracles' too).
        split, negatives, negative_sampler: override the checkpoint's (`curi.EpisodeSampler`;
            a checkpoint without a negative sampler drew ``paper`` negatives).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        render_device: where scenes are rendered (default: the checkpoint's modality.device).
        batch_size: episodes per batch (default: the training batch size).
        num_workers: DataLoader workers that render episodes.
        chunk: evaluation-set scenes rendered and embedded at once.
        oracles: also score the oracles (test subset only).
        prior, likelihood: the oracles' options (see `curi.oracles.Oracle`).
        progress: show progress bars.
        build: build a missing bank (None: only in the default data folder).
        bank: the checkpoint's bank, already loaded (default: opened as above).
        per_concept: also return per-concept rows (`concept_table`; `write_concepts`).

    Returns:
        ``{"checkpoint", "step", "best_step", "subset", "split", "negatives", "episodes",
        "seed", "device", "model": {map, cba, cba_pooled, ...}, "oracles": {map_strong,
        map_weak, map_random, map_prior, cba_*, ...} or None, "config"}``, and ``per_concept``
        rows with `per_concept` (``oracle_ap_strong``, ``..._weak``, ``..._random``, ``..._prior``).

    Raises:
        ConfigError: missing or unreadable checkpoint, weights that are damaged, not finite
            or of another model than its config, bad options, CUDA asked for but absent, or a
            `bank` other than the checkpoint's.
        BankError: the checkpoint's bank is missing, or another bank is in its place.
    """
    ckpt, path, run = _load_run(checkpoint)
    asked = {"subset": subset, "seed": seed, "episodes": episodes}
    spec = _spec_of(run, split, negatives, negative_sampler, oracles=oracles, **asked)
    dev = resolve_device(device)
    bank = _checkpoint_bank(run, ckpt, path, bank, data_dir, progress, build)
    spec = spec.check(bank)
    run, renderer, model = _load_model(run, ckpt, path, dev, render_device)
    sampler = EpisodeSampler.from_spec(bank, spec)
    ev = EvalSet.from_bank(bank)
    batch = batch_size or run.train.batch_for(renderer.name)
    metrics = _score_model(
        model, sampler, run, dev, ev, ckpt, batch, num_workers, chunk, progress, per_concept
    )
    oracle_row = _score_oracles(
        oracles, sampler, ev, episodes, seed, prior, likelihood, progress, per_concept
    )
    return _result(path, ckpt, sampler, episodes, seed, dev, metrics, oracle_row, per_concept)


def _spec_of(run, split, negatives, negative_sampler, *, oracles: bool, **fields) -> EpisodeSpec:
    """The `EpisodeSpec` of the episodes to score: `fields` (subset, seed, episodes) and the
    checkpoint's split, negatives and negative sampler, each unless given.

    Raises:
        ConfigError: oracles asked for on another subset than ``test``, or a bad field."""
    if oracles and fields["subset"] != "test":
        raise ConfigError("oracle numbers are computed on test episodes; use subset=test")
    count = validate.integer(fields.pop("episodes"), "episodes", low=1, high=validate.MAX_EPISODES)
    return EpisodeSpec(
        run.split if split is None else split,
        negatives=negatives or run.negatives,
        negative_sampler=negative_sampler or run.negative_sampler,
        size=count,
        **fields,
    )


def _load_run(checkpoint: str | Path):
    """The checkpoint (`curi.models.checkpoint.load_checkpoint`), its path and its run config,
    with a bank name that stays inside a data folder.

    Raises:
        ConfigError: a missing or unreadable checkpoint, or one that stores a bad bank name.
    """
    from curi.models.checkpoint import load_checkpoint
    from curi.models.config import RunConfig

    ckpt, path = load_checkpoint(checkpoint)
    run = RunConfig.from_mapping(ckpt["config"])
    try:  # a crafted or edited checkpoint must not place the bank outside data_dir
        safe_name(run.bank.get("name", "default"), "bank name")
    except ConfigError as e:
        raise ConfigError(f"checkpoint {path} stores a bad bank: {e}") from None
    return ckpt, path, run


def _checkpoint_bank(run, ckpt: Mapping, path: Path, bank, data_dir, progress, build):
    """The bank of the checkpoint: `bank` once checked to be it, else opened (or built) from
    the stored bank config (`curi.models.config.run_bank`).

    Raises:
        BankError: the checkpoint's bank is missing, or another bank is in its place.
        ConfigError: a given `bank` other than the checkpoint's.
    """
    from curi.models.config import run_bank

    if bank is not None:
        check_checkpoint_bank(run.bank, bank, path)
        return bank
    try:
        return run_bank(
            run,
            data_dir=data_dir,
            bank_path=ckpt.get("bank_path"),
            progress=progress,
            build=build,
        )
    except BankMismatchError as e:  # its advice, force=true, would replace that bank
        where, diff = e.args
        raise BankError(
            f"checkpoint {path} was trained on another bank than the one at {where} (they "
            f"differ in {diff}); give the data_dir that holds its bank, or a new data_dir "
            "with build=true to build that bank there"
        ) from None


def _load_model(run, ckpt: Mapping, path: Path, dev: torch.device, render_device: str | None):
    """The run config (its modality on `render_device` when given), its renderer and its
    model on `dev` with the checkpoint's weights."""
    from curi.models.config import build_model

    if render_device is not None:
        run = dataclasses.replace(run, modality={**run.modality, "device": render_device})
    renderer = make_renderer(run.modality)
    model = build_model(run, renderer).to(dev)
    load_weights(model, ckpt, path)
    return run, renderer, model


def _score_model(
    model: ProtoNet,
    sampler: EpisodeSampler,
    run,
    dev: torch.device,
    ev: EvalSet,
    ckpt: Mapping,
    batch_size: int,
    num_workers: int,
    chunk: int,
    progress: bool,
    per_concept: bool,
) -> dict:
    """The model's metrics on the sampler's episodes (`evaluate_episodes`), logged; with
    `per_concept` they keep each episode's concept and AP (``episode_concepts``,
    ``episode_ap``) for `_result`."""
    metrics = evaluate_episodes(
        model,
        sampler,
        run.modality,
        device=dev,
        batch_size=batch_size,
        num_workers=num_workers,
        chunk=chunk,
        max_len=ckpt.get("max_len"),
        eval_set=ev,
        amp_dtype=run.train.autocast_dtype(dev),
        progress=progress,
        keep_episodes=per_concept,
    )
    log.info(
        "model: mAP %.4f, CBA %.4f on %d %s episodes",
        metrics["map"],
        metrics["cba"],
        len(sampler),
        sampler.subset,
    )
    return metrics


def _score_oracles(
    oracles: bool, sampler, ev: EvalSet, episodes, seed, prior, likelihood, progress, per_episode
) -> dict | None:
    """With `oracles`, the oracles' row on the episodes the model was tested on (`score_split`:
    the sampler's split and negatives, the same count and seed), logged; with `per_episode`,
    each episode's AP too. None without `oracles`."""
    if not oracles:
        return None
    row = score_split(
        sampler.bank,
        sampler.spec,
        ev,
        prior=prior,
        likelihood=likelihood,
        progress=progress,
        per_episode=per_episode,
    )
    log.info(
        "oracles: mAP strong %.4f weak %.4f random %.4f prior-only %.4f",
        row["map_strong"],
        row["map_weak"],
        row["map_random"],
        row["map_prior"],
    )
    return row


def _sampler_key(sampler) -> dict:
    """``negative_sampler`` when it is not ``paper`` (a paper evaluation's record is what it
    was before the option reached `curi eval`)."""
    s = sampler.negative_sampler
    return {} if s == "paper" else {"negative_sampler": s}


def _result(path: Path, ckpt, sampler, episodes, seed, dev, metrics, oracle_row, per_concept):
    """What `evaluate_checkpoint` returns: the episodes scored (`episodes` and `seed` as
    given), the model's `metrics` (less the per-episode arrays) and the oracles' row; with
    `per_concept`, the per-concept rows (`concept_table`) of the model's and the oracles'
    per-episode APs."""
    concepts, ap = metrics.pop("episode_concepts", None), metrics.pop("episode_ap", None)
    out = {
        "checkpoint": str(path),
        "step": int(ckpt["step"]),
        "best_step": ckpt.get("best_step"),
        "subset": sampler.subset,
        "split": sampler.split.name,
        "negatives": sampler.negatives,
        **_sampler_key(sampler),
        "episodes": episodes,
        "seed": seed,
        "device": str(dev),
        "model": metrics,
        "oracles": oracle_row,
        "config": ckpt["config"],
    }
    if per_concept:
        # per-episode oracle APs, where the oracle row carries them (``episode_ap``)
        per_episode = (oracle_row or {}).pop("episode_ap", None)
        out["per_concept"] = concept_table(
            sampler.bank, concepts, ap, split=sampler.split.name, oracle_ap=per_episode
        )
    return out

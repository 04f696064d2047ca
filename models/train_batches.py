"""The training batches a run steps through, one per step: drawn on the training device
(``train.sampler=device``) or by DataLoader workers from the pool of training episodes
(``train.sampler=loader``), rendered where the modality's renderer runs."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from curi.bank import ConceptBank
from curi.episodes import EpisodeSampler
from curi.models.cache import CachedScenes, RenderCache, open_render_cache
from curi.models.config import RunConfig
from curi.models.data import EpisodeBatches, StepBatchSampler, renders_on_cuda
from curi.models.device_batches import DeviceScenes, device_batches
from curi.models.device_sampler import DeviceEpisodeSampler
from curi.models.pipeline import LiveScenes, RenderAhead, SceneSource, pass_batch
from curi.models.runtime import Runtime, StopSignals
from curi.renderers import Renderer
from curi.splits import Split

__all__ = ["resolve_sampler", "train_cache", "train_loader"]

log = logging.getLogger(__name__)


def resolve_sampler(sampler: str, device: torch.device) -> str:
    """``train.sampler`` made concrete: ``auto`` is ``device`` on CUDA, ``loader`` elsewhere."""
    if sampler == "auto":
        return "device" if device.type == "cuda" else "loader"
    return sampler


def train_cache(
    run: RunConfig,
    rt: Runtime,
    bank: ConceptBank,
    renderer: Renderer,
    *,
    start: int,
    progress: bool,
) -> RenderCache | None:
    """The render cache the run's batches read (``train.render_cache``), built by rank 0 when
    missing while the others wait; None without one, or when steps ``start..steps`` are none
    (a finished run renders nothing)."""
    s = run.train
    if s.render_cache is None or start >= s.steps:
        return None
    with rt.main_first():  # rank 0 builds a missing cache, the others then read it
        return open_render_cache(
            s.render_cache,
            bank,
            renderer,
            run.modality,
            rebuild=s.render_cache_rebuild and rt.is_main,
            progress=progress and rt.is_main,
        )


def train_loader(
    run: RunConfig,
    rt: Runtime,
    bank: ConceptBank,
    split: Split,
    batch: int,
    *,
    start: int,
    renderer: Renderer,
    max_len: int,
    cache: RenderCache | None = None,
    sampler: str = "loader",
) -> Iterable[dict[str, Tensor]]:
    """The training batches of steps ``start..steps`` for this process, one per step.

    ``sampler="device"``: each step's episodes are drawn on the training device
    (`curi.models.device_batches`); schema scenes are rendered once for the bank and held
    there, image and sound scenes rendered from the drawn ids (``modality.device``, or the
    render cache).

    ``sampler="loader"``: ``train.num_workers`` processes sample the episodes of the pool of
    ``train.train_episodes``. With a CPU renderer they also render them (a batch at once,
    `EpisodeBatches`); with a GPU renderer or a render cache they produce compact arrays
    (scene ids, labels, tokens) and this process renders (or reads) each batch while the
    previous step runs on the GPU (`RenderAhead`).

    Args:
        run: the run's config.
        rt: this process's runtime (rank, world size, device).
        bank: the run's bank.
        split: the run's split.
        batch: episodes per step and process.
        start: the first step.
        renderer: the modality's renderer.
        max_len: width of the concept tokens.
        cache: read scenes from this render cache instead of rendering them.
        sampler: ``loader`` or ``device`` (`resolve_sampler`).
    """
    if sampler == "device":
        return _device_loader(run, rt, bank, split, batch, start, renderer, max_len, cache)
    s = run.train
    pool = EpisodeSampler.from_spec(bank, run.episodes(split, "train", size=s.train_episodes))
    in_main = cache is not None or renders_on_cuda(run.modality)
    loader = DataLoader(
        EpisodeBatches(pool, run.modality, max_len=max_len, render=not in_main),
        batch_sampler=StepBatchSampler(
            len(pool),
            batch,
            seed=run.seed,
            start=start,
            stop=s.steps,
            rank=rt.rank,
            world=rt.world_size,
        ),
        collate_fn=pass_batch,
        num_workers=s.num_workers,
        pin_memory=rt.device.type == "cuda",
        worker_init_fn=StopSignals.worker_init,  # a stop signal to the group spares them
    )
    if not in_main:
        return loader
    return RenderAhead(loader, _scene_source(bank, renderer, rt, cache))


def _scene_source(bank, renderer: Renderer, rt: Runtime, cache) -> SceneSource:
    if cache is not None:
        return CachedScenes(cache, renderer, rt.device)
    return LiveScenes(bank.scenes, renderer)


def _device_loader(run, rt, bank, split, batch, start, renderer, max_len, cache):
    drawn = DeviceEpisodeSampler(bank, run.episodes(split, "train"), device=rt.device)
    if renderer.name == "schema":
        source = DeviceScenes(bank.scenes, renderer, rt.device)
    else:
        source = _scene_source(bank, renderer, rt, cache)
        if rt.device.type == "cuda" and source.device.type != "cuda":
            log.warning(
                "train.sampler=device: %s scenes render on the CPU in this process; "
                "modality.device=cuda or train.render_cache renders them faster",
                renderer.name,
            )
    return device_batches(
        drawn, source, batch, start=start, stop=run.train.steps, rank=rt.rank, max_len=max_len
    )

"""Thin entry points of `curi show` (one scene, or one episode as a sheet and a viewer page)
and `curi episodes render` (re-render an exported episode file in another modality)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curi import validate
from curi.core_cli import (
    check_bank_of,
    job_launcher,
    open_bank_from_config,
    required,
    split_from_config,
)
from curi.errors import ConfigError
from curi.export.parts import check_jobs, check_staging
from curi.paths import output_path

__all__ = ["render_episodes", "show"]

log = logging.getLogger("curi")


def _renderer(node: DictConfig):
    from curi.renderers import get_renderer

    opts = OmegaConf.to_container(node, resolve=True)
    return get_renderer(**opts)  # a bad name or option: ConfigError


def _check_threads(cfg: DictConfig) -> int | None:
    n = cfg.get("threads")
    return None if n is None else validate.integer(n, "threads", low=1, high=1024)


def _threads(cfg: DictConfig) -> None:
    """Apply ``threads`` (torch CPU threads) when set: with more threads than free cores,
    torch's small parallel regions stall (10x slower measured on a shared 2-core machine)."""
    n = _check_threads(cfg)
    if n is not None:
        import torch

        torch.set_num_threads(n)


def _check_show(cfg: DictConfig) -> None:
    """Refuse `curi show`'s numeric options of the wrong type or sign before the bank opens,
    and a scene past the bank's last (its config's count: no scene array is read); an
    episode's upper bound depends on the split and is checked once the bank is open."""
    _check_threads(cfg)
    if cfg.episode is None:
        validate.integer(cfg.scene, "scene", low=0)
    else:
        validate.integer(cfg.episode, "episode", low=0)
    validate.seed(cfg.seed)
    validate.number(cfg.sheet_scale, "sheet_scale", low=0, high=8, open_low=True)
    output_path(cfg.out, folder=True)
    bank = check_bank_of(cfg)
    if cfg.episode is None and cfg.scene >= bank.num_scenes:  # before the scenes are read
        raise ConfigError(_no_scene(cfg.scene, bank.num_scenes))


@validate.checked(_check_show)
def show(cfg: DictConfig) -> None:
    """Render one scene, or one episode (sheet + page), as image, sound and spectrogram."""
    from curi.renderers.viewer import write_scene_page

    _threads(cfg)
    bank = open_bank_from_config(cfg)
    if cfg.episode is not None:
        _show_episode(bank, cfg)
        return
    if not 0 <= cfg.scene < bank.num_scenes:
        raise ConfigError(_no_scene(cfg.scene, bank.num_scenes))
    record = bank.scene_records([int(cfg.scene)])[0]
    page = write_scene_page(
        record,
        Path(cfg.out),
        image=_renderer(cfg.image),
        sound=_renderer(cfg.sound),
        title=f"{bank.path.name}: scene {cfg.scene}",
    )
    print(page)


def _no_scene(scene: int, scenes: int) -> str:
    return (
        f"scene={scene} is out of range: the bank has {scenes:,} scenes, numbered 0 to "
        f"{scenes - 1:,}"
    )


def _show_episode(bank, cfg: DictConfig) -> None:
    """Episode `cfg.episode` of (split, subset, negatives, seed) as a PNG sheet (support and
    query grids, positives and negatives marked, the concept on top) and an HTML page."""
    from curi import EpisodeSampler, parse
    from curi.renderers.sheet import write_episode_page

    split = split_from_config(bank, cfg)
    sampler = EpisodeSampler(
        bank, split, cfg.subset, cfg.negatives, seed=cfg.seed, query_negatives=cfg.query_negatives
    )
    if not 0 <= cfg.episode < len(sampler):
        raise ConfigError(
            f"episode={cfg.episode} is out of range; {split.name}/{cfg.subset} has "
            f"{len(sampler)} episodes"
        )
    ep = sampler[int(cfg.episode)]
    title = (
        f"{bank.path.name} / {split.name} / {cfg.subset} / {cfg.negatives} negatives / "
        f"seed {cfg.seed} / episode {cfg.episode}"
    )
    page = write_episode_page(
        ep.to_dict(),
        Path(cfg.out),
        concept=parse(ep.concept_text).pretty(),
        title=title,
        image=_renderer(cfg.image),
        sound=_renderer(cfg.sound),
        scale=cfg.sheet_scale,
    )
    print(page)


def _check_render(cfg: DictConfig) -> None:
    from curi.export import check_episode_file

    example = "curi episodes render in=FILE modality=image out=DIR"
    required(cfg, "in", "the exported episode file", example)
    required(cfg, "out", "the output directory", example)
    output_path(cfg.out, folder=True)
    check_episode_file(cfg["in"])
    if cfg.limit is not None:
        validate.integer(cfg.limit, "limit", low=1, high=validate.MAX_EPISODES)
    _check_threads(cfg)
    if cfg.get("workers") is not None:  # None: one per core
        validate.integer(cfg.workers, "workers", low=1, high=1024)
    if check_jobs(cfg.get("jobs", 1)) > 1:
        job_launcher(check_staging(Path(cfg.out)))


@validate.checked(_check_render)
def render_episodes(cfg: DictConfig) -> None:
    """Re-render an exported episode file in one modality (image, sound or schema), or as
    text (``text=true``); with ``jobs=N`` in N jobs where ``hydra/launcher=NAME`` says
    (docs/cluster.md)."""
    from curi.renderers.rerender import default_workers, render_episode_file

    jobs = check_jobs(cfg.get("jobs", 1))
    if cfg.text:  # the text modality: rows for a sequence-to-sequence trainer, no arrays
        from curi.renderers.text_export import render_episodes_as_text

        paths = render_episodes_as_text(
            cfg["in"], Path(cfg.out), limit=cfg.limit, progress=cfg.progress
        )
        print(json.dumps({k: str(v) for k, v in paths.items()}, indent=1))
        return
    _threads(cfg)
    workers = cfg.get("workers")
    workers = default_workers() if workers is None else int(workers)
    opts = OmegaConf.to_container(cfg.modality, resolve=True)
    launcher = None
    if jobs > 1:  # ranges of episodes rendered by jobs where hydra/launcher=NAME says
        launcher = job_launcher(check_staging(Path(cfg.out)))
        if launcher.in_process:  # elsewhere each job has the threads of its cores
            launcher = dataclasses.replace(launcher, threads=cfg.get("threads"))
    index = render_episode_file(
        cfg["in"],
        Path(cfg.out),
        _renderer(cfg.modality),
        files=cfg.files,
        limit=cfg.limit,
        progress=cfg.progress,
        options=opts,
        workers=workers,
        jobs=jobs,
        launcher=launcher,
    )
    print(index)

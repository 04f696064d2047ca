"""Thin entry points of `curi show` (one scene, or one episode as a sheet and a viewer page)
and `curi episodes render` (re-render an exported episode file in another modality)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curi import validate
from curi.core_cli import job_launcher, open_bank_from_config, split_from_config
from curi.errors import ConfigError
from curi.export_parts import check_jobs, check_staging
from curi.paths import output_path
from curi.renderers import get_renderer
from curi.renderers.rerender import default_workers, render_episode_file
from curi.renderers.sheet import write_episode_page
from curi.renderers.viewer import write_scene_page

__all__ = ["render_episodes", "show"]

log = logging.getLogger("curi")


def _renderer(node: DictConfig):
    opts = OmegaConf.to_container(node, resolve=True)
    return get_renderer(**opts)  # a bad name or option: ConfigError


def _threads(cfg: DictConfig) -> None:
    """Apply ``threads`` (torch CPU threads) when set: with more threads than free cores,
    torch's small parallel regions stall (10x slower measured on a shared 2-core machine)."""
    n = cfg.get("threads")
    if n is not None:
        n = validate.integer(n, "threads", low=1, high=1024)
        import torch

        torch.set_num_threads(n)


def show(cfg: DictConfig) -> None:
    """Render one scene, or one episode (sheet + page), as image, sound and spectrogram."""
    _threads(cfg)
    _check_show(cfg)
    output_path(cfg.out, folder=True)
    bank = open_bank_from_config(cfg)
    if cfg.episode is not None:
        _show_episode(bank, cfg)
        return
    if not 0 <= cfg.scene < bank.num_scenes:
        raise ConfigError(f"scene={cfg.scene} is out of range; the bank has {bank.num_scenes}")
    record = bank.scene_records([int(cfg.scene)])[0]
    page = write_scene_page(
        record,
        Path(cfg.out),
        image=_renderer(cfg.image),
        sound=_renderer(cfg.sound),
        title=f"{bank.path.name}: scene {cfg.scene}",
    )
    print(page)


def _check_show(cfg: DictConfig) -> None:
    """Refuse `curi show`'s numeric options of the wrong type or sign before the bank opens
    (their upper bounds depend on the bank and are checked once it is open)."""
    if cfg.episode is None:
        validate.integer(cfg.scene, "scene", low=0)
    else:
        validate.integer(cfg.episode, "episode", low=0)
    validate.seed(cfg.seed)
    validate.number(cfg.sheet_scale, "sheet_scale", low=0, high=8, open_low=True)


def _show_episode(bank, cfg: DictConfig) -> None:
    """Episode `cfg.episode` of (split, subset, negatives, seed) as a PNG sheet (support and
    query grids, positives and negatives marked, the concept on top) and an HTML page."""
    from curi import EpisodeSampler, parse

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


def render_episodes(cfg: DictConfig) -> None:
    """Re-render an exported episode file in one modality (image, sound or schema), or as
    text (``text=true``); with ``jobs=N`` in N jobs where ``hydra/launcher=NAME`` says
    (docs/cluster.md)."""
    for key, what in (("in", "the exported episode file"), ("out", "the output directory")):
        if OmegaConf.is_missing(cfg, key):
            raise ConfigError(
                f"{key}= is required: {what} (`curi episodes render in=FILE "
                "modality=image out=DIR`)"
            )
    output_path(cfg.out, folder=True)
    if cfg.limit is not None:
        validate.integer(cfg.limit, "limit", low=1, high=validate.MAX_EPISODES)
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
    if workers is None:
        workers = default_workers()
    workers = validate.integer(workers, "workers", low=1, high=1024)
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

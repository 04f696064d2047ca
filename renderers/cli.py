"""Thin entry point of `curi show`: compose config -> build or reuse the bank -> render one
scene in every modality with an HTML viewer page (`renderers.viewer`)."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curi.bank import BankConfig, build_bank, load_bank
from curi.errors import ConfigError, CuriError
from renderers import get_renderer
from renderers.viewer import write_scene_page

__all__ = ["show"]

log = logging.getLogger("curi")


def _renderer(node: DictConfig):
    opts = OmegaConf.to_container(node, resolve=True)
    try:
        return get_renderer(**opts)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def show(cfg: DictConfig) -> None:
    """Render one scene (image, sound, spectrogram) and an HTML page to view them."""
    bank_cfg = BankConfig.from_mapping(OmegaConf.to_container(cfg.bank, resolve=True))
    bank = load_bank(build_bank(bank_cfg, cfg.data_dir, progress=cfg.progress), verify=False)
    if cfg.episode is not None:
        _show_episode(bank, cfg)
        return
    if not 0 <= cfg.scene < bank.num_scenes:
        raise ConfigError(f"scene={cfg.scene} is out of range; the bank has {bank.num_scenes}")
    record = bank.scene_records([cfg.scene])[0]
    page = write_scene_page(
        record,
        Path(cfg.out),
        image=_renderer(cfg.image),
        sound=_renderer(cfg.sound),
        title=f"{bank.path.name}: scene {cfg.scene}",
    )
    print(page)


def _show_episode(bank, cfg: DictConfig) -> None:
    """Hook for the episode sheet (support and query grids with positives and negatives
    marked, the concept's pretty form on top, audio players per scene).

    It needs `curi.EpisodeSampler` (being written in curi/episodes.py); once that exists,
    build ``EpisodeSampler(bank, split, subset, negatives, seed)[cfg.episode]`` and render
    its ``support_ids`` / ``query_ids`` with `write_scene_page`'s renderers into a grid.
    """
    try:
        from curi import EpisodeSampler  # noqa: F401
    except ImportError:
        raise CuriError(
            "episode sheets need curi.EpisodeSampler, which this version does not have yet; "
            "show a single scene with scene=<index> instead"
        ) from None
    raise CuriError("episode sheets are not implemented yet; use scene=<index>")

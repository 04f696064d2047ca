"""Thin entry point of `curi gap`: compose config -> bank -> gap table -> report files."""

from __future__ import annotations

import logging

from omegaconf import DictConfig, OmegaConf

from curi.core_cli import open_bank_from_config
from curi.oracles.gap import check_gap_options, compositionality_gap
from curi.oracles.report import markdown_table, plot_title, write_report

__all__ = ["gap"]

log = logging.getLogger("curi")


def gap(cfg: DictConfig) -> None:
    """Compositionality gap of every split (strong/weak/random oracles, D_A, D_C)."""
    check_gap_options(cfg.episodes.test, cfg.workers, cfg.seed)  # before building a bank
    bank = open_bank_from_config(cfg)
    one = cfg.get("split")  # split=NAME or split=FILE.json: that split instead of splits
    splits = [OmegaConf.to_container(one, resolve=True)] if one is not None else (
        OmegaConf.to_container(cfg.splits, resolve=True))  # fmt: skip
    negatives = OmegaConf.to_container(cfg.negatives, resolve=True)
    rows = compositionality_gap(
        bank,
        splits,
        negatives,
        episodes=cfg.episodes.test,
        prior=cfg.prior,
        likelihood=cfg.likelihood,
        seed=cfg.seed,
        workers=cfg.workers,
        progress=cfg.progress,
    )
    meta = {
        "bank": f"{bank.path} ({len(bank):,} concepts, {bank.num_scenes:,} scenes)",
        "test episodes per row": f"{cfg.episodes.test:,}",
        "prior": cfg.prior,
        "likelihood": cfg.likelihood,
        "seed": cfg.seed,
    }
    name = f"{bank.path.name} ({len(bank):,} concepts)"
    title = plot_title(rows, bank=name, episodes=cfg.episodes.test)
    paths = write_report(rows, cfg.output_dir, meta=meta, title=title)
    print(markdown_table(rows))
    log.info("wrote %s", ", ".join(str(p) for p in paths.values()))

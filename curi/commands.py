"""Thin entry points of the core subcommands: compose config -> plain library calls."""

from __future__ import annotations

import json
import logging

from omegaconf import DictConfig, OmegaConf

from curi.bank import BankConfig, build_bank, load_bank

__all__ = ["bank"]

log = logging.getLogger("curi")


def bank(cfg: DictConfig) -> None:
    """Build a concept bank (scenes, concepts, truth matrix, eval set) under data_dir."""
    bank_cfg = BankConfig.from_mapping(OmegaConf.to_container(cfg.bank, resolve=True))
    path = build_bank(bank_cfg, cfg.data_dir, progress=cfg.progress, force=cfg.force)
    b = load_bank(path, verify=False)
    log.info("bank ready at %s", path)
    print(json.dumps({"path": str(path), **b.manifest["counts"]}, indent=2))

"""Thin entry points of the core subcommands: compose config -> plain library calls; and
`open_bank`, the one way every command (and training, `curi.models.config.open_bank`) opens
the bank it is given."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curi.bank import BankConfig, ConceptBank, build_bank, load_bank

__all__ = ["bank", "split", "episodes", "open_bank", "open_bank_from_config"]

log = logging.getLogger("curi")


def open_bank(
    bank: BankConfig | Mapping | str,
    data_dir: str | Path | None = None,
    *,
    progress: bool = True,
    force: bool = False,
) -> ConceptBank:
    """The bank `bank` describes, ready to use: built under `data_dir`, or reused when the same
    bank is already there (`curi.build_bank`), then loaded without re-hashing its files (the
    build has just checked it is the bank asked for).

    Args:
        bank: a `BankConfig`, a mapping of its fields, or a preset name (``"tiny"``).
        data_dir: the data directory (default: `curi.bank.default_data_dir()`).
        progress: show progress bars while building.
        force: rebuild even if a bank is already there.

    Raises:
        ConfigError: a bad bank option.
        BankError: a different bank occupies the folder (and not `force`).
    """
    return load_bank(build_bank(bank, data_dir, progress=progress, force=force), verify=False)


def open_bank_from_config(cfg: DictConfig) -> ConceptBank:
    """The bank of a command's config (``bank`` group, ``data_dir``, ``progress`` and an
    optional ``force``; see `open_bank`)."""
    return open_bank(
        OmegaConf.to_container(cfg.bank, resolve=True),
        cfg.data_dir,
        progress=cfg.progress,
        force=bool(cfg.get("force", False)),
    )


def bank(cfg: DictConfig) -> None:
    """Build a concept bank (scenes, concepts, truth matrix, eval set) under data_dir."""
    b = open_bank_from_config(cfg)
    log.info("bank ready at %s", b.path)
    print(json.dumps({"path": str(b.path), **b.manifest["counts"]}, indent=2))


def split(cfg: DictConfig) -> None:
    """Split the bank's concepts; print the sizes and the checks (and save the split with
    ``save=FILE.json``)."""
    from curi.splits import make_split

    bank = open_bank_from_config(cfg)
    s = make_split(bank, OmegaConf.to_container(cfg.split, resolve=True))
    groups = bank.groups
    report = {
        "split": s.name,
        **s.sizes(),
        "train_test_overlap": int(len(set(s.train) & set(s.test))),
        "groups_across_train_test": int(len(set(groups[s.train]) & set(groups[s.test]))),
        "examples_test": [bank.concept(int(i)).pretty() for i in s.test[:3]],
    }
    if cfg.get("save"):  # reusable exactly, by this bank only: `split=path.json` or rule: file
        report["saved"] = str(s.save(cfg.save, bank))
    print(json.dumps(report, indent=2))


def episodes(cfg: DictConfig) -> None:
    """Export episodes with scene records (JSON lines or tar shards) and a dataset card."""
    from curi.export import check_export_options, export_episodes
    from curi.splits import make_split

    check_export_options(cfg.n, cfg.shard_size, cfg.seed)  # before building a bank
    bank = open_bank_from_config(cfg)
    s = make_split(bank, OmegaConf.to_container(cfg.split, resolve=True))
    out = export_episodes(
        bank,
        s,
        cfg.subset,
        cfg.out,
        n=cfg.n,
        negatives=cfg.negatives,
        query_negatives=cfg.query_negatives,
        seed=cfg.seed,
        shard_size=cfg.shard_size,
        progress=cfg.progress,
    )
    log.info("wrote %s and its dataset card %s", out["episodes"], out["card"])

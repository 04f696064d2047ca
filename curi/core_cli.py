"""The core's commands (`curi bank`, `curi split`, `curi episodes`): a composed Hydra config
turned into plain library calls; and the config helpers every layer's CLI uses to check and
open the command's bank (`curi.bank.check_bank`, `curi.bank.open_bank`) and make its split
(`curi.splits.make_split`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curi import validate
from curi.bank import BankConfig, ConceptBank, bank_concepts, check_bank, open_bank
from curi.errors import ConfigError
from curi.paths import output_path

__all__ = [
    "bank",
    "split",
    "episodes",
    "check_bank_of",
    "job_launcher",
    "open_bank_from_config",
    "required",
    "split_from_config",
]

log = logging.getLogger("curi")


def _bank_args(cfg: DictConfig, build: bool | None) -> tuple[dict, dict]:
    """The bank and the keyword arguments `check_bank` and `open_bank` take from a command's
    config (``bank`` group, ``data_dir`` and the optional ``force`` and ``build``)."""
    want = cfg.get("build") if build is None else build
    bank = OmegaConf.to_container(cfg.bank, resolve=True)
    kw = {"force": bool(cfg.get("force", False)), "build": True if want else None}
    return bank, kw


def check_bank_of(cfg: DictConfig, *, build: bool | None = None) -> BankConfig:
    """Refuse the bank of a command's config before any work: a bad option, or a bank that
    is missing where it may not be built (`curi.bank.check_bank`; `build` as in
    `open_bank_from_config`); and a split file of the config (``split``, ``splits``) saved for
    another bank than the one there, or naming concepts outside it (`curi.bank.bank_concepts`;
    a bank yet to be built is not read). Returns its config (sizes to check options against)."""
    bank, kw = _bank_args(cfg, build)
    checked = check_bank(bank, cfg.data_dir, **kw)
    files = [s for s in _specs(cfg, "split") + _specs(cfg, "splits") if validate.is_split_file(s)]
    if files:
        concepts = bank_concepts(checked, cfg.data_dir, force=kw["force"])
        if concepts is not None:
            validate.splits(files, concepts=concepts)
    return checked


def _specs(cfg: DictConfig, key: str) -> list:
    """The split specs the config's `key` holds (none, one, or a list)."""
    value = cfg.get(key)
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    return value if isinstance(value, list) else [] if value is None else [value]


def open_bank_from_config(cfg: DictConfig, *, build: bool | None = None) -> ConceptBank:
    """The bank of a command's config (``bank`` group, ``data_dir``, ``progress`` and the
    optional ``force`` and ``build``; see `curi.bank.open_bank`)."""
    bank, kw = _bank_args(cfg, build)
    return open_bank(bank, cfg.data_dir, progress=cfg.progress, **kw)


def required(cfg: DictConfig, key: str, what: str, example: str) -> None:
    """Refuse a command's config where `key` is missing (``???``) or empty.

    Raises:
        ConfigError: ``key= is required: what (`example`)``.
    """
    if OmegaConf.is_missing(cfg, key) or cfg[key] in (None, ""):
        raise ConfigError(f"{key}= is required: {what} (`{example}`)")


def split_from_config(bank: ConceptBank, cfg: DictConfig):
    """The split of a command's config (``split`` group) on `bank`; a generated split's own
    progress bars (rule ``mcd``) follow the command's ``progress``."""
    from curi.splits import make_split

    spec = OmegaConf.to_container(cfg.split, resolve=True)
    if isinstance(spec, dict) and "progress" in spec and not cfg.get("progress", True):
        spec["progress"] = False
    return make_split(bank, spec)


def job_launcher(folder, *, threads: int | None = None, wait: bool = True):
    """The `curi.jobs.Launcher` the user chose with ``hydra/launcher=NAME`` (default
    ``basic``) and its ``hydra.launcher.*`` options, its logs under `folder`; submitit's
    default folder (the Hydra sweep's) is replaced by ``<folder>/.submitit/%j``.

    Raises:
        ConfigError: an unknown launcher or option, a SLURM launcher without a partition,
            a launcher not installed (`curi.jobs.check_launcher`).
    """
    from hydra.core.hydra_config import HydraConfig

    from curi.jobs import Launcher, check_launcher

    if not HydraConfig.initialized():  # a config composed by hand (tests, notebooks)
        return Launcher("basic", folder=Path(folder), threads=threads, wait=wait)
    hc = HydraConfig.get()
    name = hc.runtime.choices.get("hydra/launcher") or "basic"
    check_launcher(name)  # known and installed before its config is read; the rest by Launcher
    raw = OmegaConf.to_container(hc.launcher, resolve=False)
    if str(raw.get("submitit_folder", "")).startswith("${hydra.sweep.dir}"):
        raw.pop("submitit_folder")  # the plugin's default: under the command's own folder
    resolved = OmegaConf.to_container(hc.launcher, resolve=True)
    options = {k: v for k, v in resolved.items() if k in raw and k != "_target_"}
    return Launcher(name, options, folder=Path(folder), threads=threads, wait=wait)


def _check_bank(cfg: DictConfig) -> None:
    check_bank_of(cfg, build=True)


@validate.checked(_check_bank)
def bank(cfg: DictConfig) -> None:
    """Build a concept bank (scenes, concepts, truth matrix, eval set) under data_dir."""
    b = open_bank_from_config(cfg, build=True)
    log.info("bank ready at %s", b.path)
    print(json.dumps({"path": str(b.path), **b.manifest["counts"]}, indent=2))


def _check_split(cfg: DictConfig) -> None:
    check_bank_of(cfg)
    if cfg.get("save"):
        output_path(cfg.save, folder=False, key="save")
        if not str(cfg.save).endswith(".json"):  # split=FILE reads only a FILE.json back
            raise ConfigError(f"save={cfg.save} does not end in .json; give save=FILE.json")


@validate.checked(_check_split)
def split(cfg: DictConfig) -> None:
    """Split the bank's concepts; print the sizes and the checks (and save the split with
    ``save=FILE.json``)."""
    from curi.divergence import split_divergences
    from curi.predictors import split_easiness
    from curi.splits import save_split

    bank = open_bank_from_config(cfg)
    s = split_from_config(bank, cfg)
    groups = bank.groups
    report = {
        "split": s.name,
        **s.sizes(),
        "train_test_overlap": int(len(set(s.train) & set(s.test))),
        "groups_across_train_test": int(len(set(groups[s.train]) & set(groups[s.test]))),
        "examples_test": [bank.concept(int(i)).pretty() for i in s.test[:3]],
        **split_easiness(bank, s),
        **s.info,
    }
    if "d_compound" not in report:  # generated splits (mcd) already measured theirs
        report.update({k: round(v, 4) for k, v in split_divergences(bank, s).items()})
    if cfg.get("save"):  # reusable exactly, by this bank only: `split=path.json` or rule: file
        report["saved"] = str(save_split(s, bank, cfg.save))
    print(json.dumps(report, indent=2))


def _check_episodes(cfg: DictConfig) -> None:
    from curi.export import (
        check_export_options,
        check_export_path,
        check_media,
        check_render_options,
    )
    from curi.export.parts import check_jobs, check_staging

    check_export_options(cfg.n, cfg.shard_size, cfg.seed)
    out = check_export_path(cfg.out)
    check_render_options(cfg.workers, cfg.threads)
    if cfg.media is not None:
        check_media(cfg.media, cfg.out)
    if check_jobs(cfg.get("jobs", 1)) > 1:
        job_launcher(check_staging(out))
    check_bank_of(cfg)


@validate.checked(_check_episodes)
def episodes(cfg: DictConfig) -> None:
    """Export episodes with scene records (JSON lines, parquet or WebDataset tar shards,
    optionally with each scene's rendered file: ``media=image|sound``) and a dataset card;
    with ``jobs=N`` written by N jobs where ``hydra/launcher=NAME`` says (docs/cluster.md)."""
    import dataclasses

    from curi.export import check_export_path, check_render_options, export_episodes, get_media
    from curi.export.parts import check_jobs, check_staging

    out_path = check_export_path(cfg.out)
    workers, threads = check_render_options(cfg.workers, cfg.threads)
    jobs = check_jobs(cfg.get("jobs", 1))
    media = None if cfg.media is None else get_media(cfg.media, cfg.out)
    launcher = None
    if jobs > 1:  # the export's ranges written by jobs where hydra/launcher=NAME says
        launcher = job_launcher(check_staging(out_path))
        if launcher.in_process:  # elsewhere each job has the threads of its cores
            launcher = dataclasses.replace(launcher, threads=threads)
    bank = open_bank_from_config(cfg)
    s = split_from_config(bank, cfg)
    out = export_episodes(
        bank,
        s,
        cfg.subset,
        cfg.out,
        n=cfg.n,
        negatives=cfg.negatives,
        query_negatives=cfg.query_negatives,
        negative_sampler=cfg.negative_sampler,
        seed=cfg.seed,
        shard_size=cfg.shard_size,
        progress=cfg.progress,
        media=media,
        workers=workers,
        threads=threads,
        jobs=jobs,
        launcher=launcher,
    )
    log.info("wrote %s and its dataset card %s", out["episodes"], out["card"])

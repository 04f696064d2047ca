"""A command's config composed as Hydra composes it, before Hydra runs the command: every job's
config (one, or one per combination of a sweep), with the run folder Hydra would make for it.
`curi.cli` checks them all first, so a refused command has imported no torch, opened no bank
and left no run folder behind."""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator

from hydra import compose, initialize_config_module
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from curi.errors import ConfigError
from curi.presets import CONF_PACKAGE

__all__ = ["MULTIRUN", "composable", "composing", "job_configs", "resolved", "run_folder"]

MULTIRUN = ("-m", "--multirun")


def composable(overrides: list[str]) -> bool:
    """Whether the command line holds only overrides (and ``-m``): Hydra's other flags
    (``--cfg``, ``--info``, ``--config-dir`` ...) change what runs, so such a run is checked
    when its task starts instead."""
    return all(not text.startswith("-") or text in MULTIRUN for text in overrides)


@contextlib.contextmanager
def composing() -> Iterator[None]:
    """Hydra's and OmegaConf's errors of composition as one-line `ConfigError` s."""
    try:
        yield
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(str(e).strip().splitlines()[0]) from None


def _jobs(overrides: list[str]) -> list[list[str]]:
    """The overrides of each job of a sweep (``-m``): every combination of the values of
    ``key=a,b``, as Hydra's basic sweeper makes them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _task_config(cfg: DictConfig, num: int | None) -> DictConfig:
    """`cfg` without its hydra node, once `HydraConfig` holds that node with the job's run
    folder (``hydra.runtime.output_dir``), as Hydra's `run_job` sets them."""
    hydra = cfg.hydra
    with read_write(hydra), open_dict(hydra):
        if num is not None:
            hydra.job.num = num
    HydraConfig.instance().set_config(cfg)  # the run folder may name hydra:runtime.cwd
    with read_write(hydra), open_dict(hydra):
        if num is None:
            out = str(hydra.run.dir)
        else:
            out = os.path.join(str(hydra.sweep.dir), str(hydra.sweep.subdir))
        hydra.runtime.output_dir = os.path.abspath(out)
    HydraConfig.instance().set_config(cfg)
    task = copy.deepcopy(cfg)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task


def job_configs(config_name: str, overrides: list[str]) -> Iterator[DictConfig]:
    """The config each job of the command line gets (a sweep's jobs in Hydra's order), while
    `HydraConfig` holds that job's hydra node; cleared once done.

    Raises:
        ConfigError: a config that Hydra cannot compose, or a value that cannot be resolved
            (the first line of Hydra's or OmegaConf's message).
    """
    sweep = any(text in MULTIRUN for text in overrides)
    plain = [text for text in overrides if text not in MULTIRUN]
    try:
        with composing(), initialize_config_module(CONF_PACKAGE, version_base="1.3"):
            for num, job in enumerate(_jobs(plain) if sweep else [plain]):
                cfg = compose(config_name, overrides=job, return_hydra_config=True)
                yield _task_config(cfg, num if sweep else None)
    finally:
        HydraConfig.instance().cfg = None


def run_folder() -> str | None:
    """The folder Hydra makes for the job whose config `HydraConfig` holds, with its config
    (``.hydra/``) and log in it, or None when it keeps none there (``output_subdir`` null)."""
    hydra = HydraConfig.get()
    return None if hydra.output_subdir is None else str(hydra.runtime.output_dir)


def resolved(cfg: DictConfig) -> dict:
    """`cfg` as plain containers, every interpolation resolved.

    Raises:
        ConfigError: a value that cannot be resolved.
    """
    with composing():
        return OmegaConf.to_container(cfg, resolve=True)

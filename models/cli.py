"""Thin entry points of `curi train` and `curi eval`: composed Hydra config -> plain library
calls (`curi.models.train.train`, `curi.models.evaluate.evaluate_checkpoint`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curi.commands import open_bank
from curi.errors import ConfigError
from curi.models.config import RunConfig, check_eval_options
from curi.models.evaluate import evaluate_checkpoint, write_metrics
from curi.models.plots import plot_metrics
from curi.models.train import train as train_run
from curi.paths import inside

__all__ = ["train", "evaluate"]

log = logging.getLogger("curi")

RUN_KEYS = ("bank", "split", "negatives", "modality", "pooling", "train", "embed_dim", "seed",
            "device", "data_dir")  # fmt: skip


def run_config(cfg: DictConfig) -> RunConfig:
    """The `RunConfig` of a composed `curi train` config."""
    c = OmegaConf.to_container(cfg, resolve=True)
    return RunConfig.from_mapping({k: c[k] for k in RUN_KEYS if k in c})


def train(cfg: DictConfig) -> None:
    """Train a prototypical network; checkpoints, metrics and TensorBoard logs."""
    run = run_config(cfg)
    if cfg.get("build"):  # asked for: build a missing bank first (else training refuses it)
        open_bank(run.bank, run.data_dir, progress=cfg.progress, build=True)
    summary = train_run(run, run_dir=Path(cfg.output_dir), resume=cfg.resume, progress=cfg.progress)
    print(json.dumps(summary, indent=2))


def evaluate(cfg: DictConfig) -> None:
    """Evaluate a checkpoint on test episodes, with the oracles on the same episodes."""
    if OmegaConf.is_missing(cfg, "checkpoint"):
        raise ConfigError("give the checkpoint to evaluate: checkpoint=<run dir or .pt file>")
    check_eval_options(
        episodes=cfg.episodes, seed=cfg.seed, batch_size=cfg.batch_size,
        num_workers=cfg.num_workers, chunk=cfg.chunk,
    )  # fmt: skip
    out = inside(
        cfg.output_dir, cfg.out, what="eval out", hint="; set output_dir= to write elsewhere"
    )
    split = cfg.split
    if split is not None and not isinstance(split, str):
        split = OmegaConf.to_container(split, resolve=True)
    metrics = evaluate_checkpoint(
        cfg.checkpoint,
        data_dir=cfg.data_dir,
        subset=cfg.subset,
        episodes=cfg.episodes,
        seed=cfg.seed,
        split=split,
        negatives=cfg.negatives,
        device=cfg.device,
        render_device=cfg.render_device,
        batch_size=cfg.batch_size,
        num_workers=cfg.num_workers,
        chunk=cfg.chunk,
        oracles=cfg.oracles,
        prior=cfg.prior,
        likelihood=cfg.likelihood,
        progress=cfg.progress,
        build=True if cfg.get("build") else None,
    )
    path = write_metrics(metrics, out)
    plot = plot_metrics([metrics], out.with_name("eval.png"))
    log.info("wrote %s and %s", path, plot)
    brief = {k: metrics[k] for k in ("checkpoint", "step", "split", "negatives", "episodes")}
    print(json.dumps({**brief, "model": metrics["model"], "oracles": metrics["oracles"],
                      "metrics": str(path)}, indent=2))  # fmt: skip

"""`learner=` of `curi train` and `curi eval` (docs/learners.md): the composed config's learner
group checked and, for a learner other than the prototypical networks, trained or evaluated by
plain library calls (`curi.models.propose_verify_train`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curi.errors import ConfigError

__all__ = ["check_learner", "eval_learner", "learner_of", "train_learner"]

log = logging.getLogger("curi")
# what only a prototypical network reads: refused with another learner
_PROTONET_ONLY = ("pooling", "train.alpha")


def _options(cfg: DictConfig) -> tuple[str, dict]:
    node = cfg.get("learner")
    opts = {"name": "protonet"} if node is None else OmegaConf.to_container(node, resolve=True)
    opts = dict(opts)
    return str(opts.pop("name", "protonet")), opts


def _given() -> list[str]:
    """The keys the command line set (Hydra's task overrides), without ``+``/``~``."""
    from hydra.core.hydra_config import HydraConfig

    try:
        task = list(HydraConfig.get().overrides.task)
    except ValueError:  # no Hydra run (a library call)
        return []
    return [t.lstrip("+~").split("=", 1)[0] for t in task]


def learner_of(cfg: DictConfig) -> str:
    """The name of the config's learner (``protonet`` when it has no learner group)."""
    return _options(cfg)[0]


def check_learner(cfg: DictConfig) -> dict:
    """The learner's checked options; for a learner other than ``protonet``, also refuse
    what only a protonet reads (``pooling=``, ``train.alpha``, ``resume=``, a
    ``negative_sampler`` other than ``paper``) and a modality other than ``schema``, before
    any heavy work.

    Raises:
        OptionError: an unknown learner or option (``learner.k`` with ``learner=protonet``).
        ConfigError: a value out of range, or an option this learner cannot take.
    """
    from curi.models.learners import learner_options

    name, opts = _options(cfg)
    out = learner_options(name, opts)
    if name == "protonet":
        return out
    for key in _given():
        if key in _PROTONET_ONLY or key.startswith("pooling."):
            raise ConfigError(
                f"{key} is an option of learner=protonet, not of learner={name}; drop it"
            )
    for key, plain in (("resume", None), ("negative_sampler", "paper")):
        if cfg.get(key, plain) != plain:
            raise ConfigError(f"learner={name} does not take {key}={cfg.get(key)}; drop it")
    modality = cfg.get("modality")
    if modality is not None and modality.get("name") != "schema":
        raise ConfigError(
            f"learner={name} reads the scenes' object arrays (modality=schema), not "
            f"modality={modality.get('name')}; drop modality= or use learner=protonet"
        )
    return out


def train_learner(cfg: DictConfig) -> dict:
    """Train a learner other than the protonet on the config's bank and split."""
    from curi.bank import open_bank
    from curi.models.propose_verify_train import train_run

    opts = check_learner(cfg)
    c = OmegaConf.to_container(cfg, resolve=True)
    bank = open_bank(c["bank"], c.get("data_dir"), progress=cfg.progress, build=cfg.get("build"))
    summary = train_run(
        bank, c["split"], opts, negatives=c["negatives"], seed=c["seed"], out_dir=cfg.output_dir
    )
    print(json.dumps({k: v for k, v in summary.items() if k != "history"}, indent=2))
    return summary


def eval_learner(cfg: DictConfig, checkpoint: Path, out: Path) -> bool:
    """Evaluate `checkpoint` when it is a propose_verify checkpoint (False: it is not; the
    protonet's evaluation goes on)."""
    from curi.atomic import atomic_path
    from curi.episodes import EpisodeSpec
    from curi.models.propose_verify_train import evaluate_run, is_checkpoint, load_checkpoint

    if not is_checkpoint(checkpoint):
        return False
    from curi.bank import open_bank

    ckpt = load_checkpoint(checkpoint)
    build = True if cfg.get("build") else None
    data_dir = cfg.data_dir
    if data_dir is None and Path(ckpt.get("bank_path", "")).joinpath("manifest.json").is_file():
        data_dir = Path(ckpt["bank_path"]).parent  # where the checkpoint's bank was
    bank = open_bank(ckpt["bank"], data_dir, progress=cfg.progress, build=build)
    split = cfg.split
    if split is not None and not isinstance(split, str):
        split = OmegaConf.to_container(split, resolve=True)
    spec = EpisodeSpec(  # the checkpoint's split and negatives unless given
        ckpt["split"] if split is None else split,
        cfg.subset,
        cfg.negatives or ckpt["negatives"],
        seed=cfg.seed,
        size=cfg.episodes,
        negative_sampler=cfg.get("negative_sampler") or "paper",
    )
    metrics = evaluate_run(checkpoint, bank, spec, oracles=cfg.oracles, progress=cfg.progress)
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(metrics, indent=2), encoding="utf-8")
    log.info("wrote %s", out)
    print(json.dumps(metrics, indent=2))
    return True

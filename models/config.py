"""The configuration of a training run: the ``train`` settings, the whole-run config a
checkpoint stores to rebuild itself, the bank and the model it names (the device is
`curi.models.runtime`'s)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import torch

from curi.commands import open_bank as open_bank_at
from curi.errors import ConfigError, known_options
from curi.models.data import (
    encoder_options,
)
from curi.models.protonet import ProtoNet, build_protonet
from curi.renderers import Renderer

__all__ = [
    "RunConfig",
    "TrainSettings",
    "build_model",
    "check_resumable",
    "open_bank",
]

_AMP_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# Settings that may change when a run is resumed (they do not change what a step computes).
_RESUMABLE = {
    "steps", "eval_every", "checkpoint_every", "log_every", "num_workers", "val_episodes",
    "eval_chunk", "eval_batch_size",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """The ``train`` config group (``conf/train/*.yaml``).

    Attributes:
        steps: optimisation steps (paper: 1M; sound 500K).
        batch_size: episodes per step and process; None: `batch_size_by_modality`.
        batch_size_by_modality: paper batch sizes (schema 64, image and sound 8).
        lr: Adam learning rate; None: `lr_by_modality`.
        lr_by_modality: paper rates (schema 1e-3, image 1e-4, sound 5e-4).
        alpha: weight of the concept-decoding loss (0 or 1 in the paper).
        grad_clip: max global gradient norm (None: no clipping).
        amp: mixed precision on CUDA (ignored on CPU).
        amp_dtype: ``bfloat16`` or ``float16`` (float16 adds a gradient scaler).
        log_every, eval_every, checkpoint_every: in steps.
        val_episodes: validation episodes per evaluation (paper: 5,000).
        train_episodes: size of the training episode pool (paper: 500,000), cycled in seeded
            per-epoch orders.
        eval_batch_size: episodes per evaluation batch (None: `batch_size`).
        eval_chunk: evaluation-set scenes rendered and embedded at once.
        num_workers: DataLoader worker processes that render episodes.
    """

    steps: int = 1000
    batch_size: int | None = None
    batch_size_by_modality: Mapping[str, int] = dataclasses.field(
        default_factory=lambda: {"schema": 64, "image": 8, "sound": 8}
    )
    lr: float | None = None
    lr_by_modality: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: {"schema": 1e-3, "image": 1e-4, "sound": 5e-4}
    )
    alpha: float = 0.0
    grad_clip: float | None = 5.0
    amp: bool = True
    amp_dtype: str = "bfloat16"
    log_every: int = 50
    eval_every: int = 1000
    checkpoint_every: int = 1000
    val_episodes: int = 1000
    train_episodes: int = 500_000
    eval_batch_size: int | None = None
    eval_chunk: int = 512
    num_workers: int = 2

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> TrainSettings:
        """Build and check from a mapping; unknown keys are an error.

        Raises:
            ConfigError: unknown keys or values out of range.
        """
        out = cls(**known_options(cls, cfg, "train"))
        out.check()
        return out

    def check(self) -> None:
        """Raise ConfigError for values out of range."""
        for k in ("steps", "log_every", "eval_every", "checkpoint_every", "val_episodes",
                  "train_episodes", "eval_chunk"):  # fmt: skip
            if int(getattr(self, k)) < 1:
                raise ConfigError(f"train.{k} must be >= 1, got {getattr(self, k)}")
        if self.num_workers < 0:
            raise ConfigError(f"train.num_workers must be >= 0, got {self.num_workers}")
        if self.alpha < 0:
            raise ConfigError(f"train.alpha must be >= 0, got {self.alpha}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ConfigError("train.grad_clip must be > 0, or null to disable clipping")
        if self.amp_dtype not in _AMP_DTYPES:
            raise ConfigError(f"train.amp_dtype must be one of {sorted(_AMP_DTYPES)}")

    def batch_for(self, modality: str) -> int:
        """Episodes per step for `modality`."""
        b = self.batch_size or self.batch_size_by_modality.get(modality)
        if not b or b < 1:
            raise ConfigError(f"no batch size for modality {modality!r}; set train.batch_size")
        return int(b)

    def lr_for(self, modality: str) -> float:
        """Adam learning rate for `modality`."""
        lr = self.lr if self.lr is not None else self.lr_by_modality.get(modality)
        if lr is None or lr <= 0:
            raise ConfigError(f"no learning rate for modality {modality!r}; set train.lr")
        return float(lr)

    def autocast_dtype(self, device: torch.device) -> torch.dtype | None:
        """The autocast dtype on `device`, or None (no AMP: CPU, or amp off)."""
        return _AMP_DTYPES[self.amp_dtype] if self.amp and device.type == "cuda" else None


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything that defines a training run; a checkpoint stores it to rebuild itself.

    Attributes:
        bank: `curi.BankConfig` fields of the bank.
        split: a split name (``conf/split``) or a split rule mapping.
        negatives: ``hard`` or ``easy``.
        modality: renderer config (``name`` and options, ``conf/modality``).
        pooling: pooler config (``name`` and options, ``conf/pooling``).
        train: the `TrainSettings`.
        embed_dim: scene embedding size (256).
        seed: seed of the model's initialisation, the episodes and their order.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        data_dir: where the bank lives (None: the default data folder).
    """

    bank: Mapping
    split: str | Mapping = "concept_iid"
    negatives: str = "hard"
    modality: Mapping = dataclasses.field(default_factory=lambda: {"name": "schema"})
    pooling: Mapping = dataclasses.field(default_factory=lambda: {"name": "relation_net"})
    train: TrainSettings = dataclasses.field(default_factory=TrainSettings)
    embed_dim: int = 256
    seed: int = 0
    device: str = "auto"
    data_dir: str | None = None

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> RunConfig:
        """Build from a plain mapping (a composed config's relevant keys, or `to_dict`).

        Raises:
            ConfigError: unknown keys or bad values.
        """
        d = known_options(cls, cfg, "run")
        if not isinstance(d.get("train", {}), TrainSettings):
            d["train"] = TrainSettings.from_mapping(d.get("train") or {})
        for k in ("bank", "modality", "pooling"):
            if k in d:
                d[k] = dict(d[k])
        if "name" not in d.get("pooling", {"name": 1}):
            raise ConfigError("pooling needs a name: avg, concat, relation_net or transformer")
        return cls(**d)

    def to_dict(self) -> dict:
        """Plain JSON-ready form (what checkpoints store)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


def open_bank(run: RunConfig, *, data_dir=None, bank_path=None, progress: bool = False):
    """The run's bank (`curi.commands.open_bank`) under `data_dir`, else the folder of
    `bank_path` (the one a checkpoint recorded) when it still holds the bank, else
    ``run.data_dir`` or the default."""
    if data_dir is None and bank_path is not None and (Path(bank_path) / "manifest.json").is_file():
        data_dir = Path(bank_path).parent
    return open_bank_at(run.bank, run.data_dir if data_dir is None else data_dir, progress=progress)


def build_model(run: RunConfig, renderer: Renderer) -> ProtoNet:
    """The run's `ProtoNet`, initialised from ``run.seed`` (without touching the global RNG),
    its encoder sized from `renderer`.

    Raises:
        ConfigError: unknown pooler or bad options.
    """
    pool = dict(run.pooling)
    name = pool.pop("name")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(run.seed)
        try:
            return build_protonet(
                encoder=renderer.name,
                pooler=str(name),
                embed_dim=run.embed_dim,
                alpha=run.train.alpha,
                encoder_kw=encoder_options(renderer),
                pooler_kw=pool,
            )
        except TypeError as e:  # an option the pooler does not take
            raise ConfigError(f"bad pooling option for {name!r}: {e}") from None


def check_resumable(saved: RunConfig, now: RunConfig, path: Path) -> None:
    """Refuse to resume a checkpoint made by a config that computes different steps."""
    a, b = saved.to_dict(), now.to_dict()
    for d in (a, b):
        for k in ("device", "data_dir"):
            d.pop(k)
        for k in _RESUMABLE:
            d["train"].pop(k)
    diff = sorted(
        [f"train.{k}" for k in a["train"] if a["train"][k] != b["train"].get(k)]
        + [k for k in a if k != "train" and a[k] != b.get(k)]
    )
    if diff:
        raise ConfigError(
            f"cannot resume from {path}: it was made with a different config ({', '.join(diff)}); "
            "use the same overrides, or start a new run"
        )

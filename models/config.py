"""The configuration of a training run: the ``train`` settings, the whole-run config a
checkpoint stores to rebuild itself, the bank and the model it names (the device is
`curi.models.runtime`'s)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from curi import validate
from curi.bank import open_bank
from curi.episodes import NEGATIVE_SAMPLERS, EpisodeSpec
from curi.errors import ConfigError, known_options
from curi.models.schedule import SCHEDULES
from curi.posterior import NEGATIVES

if TYPE_CHECKING:  # torch is imported where a run needs it: a config is checked without it
    import torch

    from curi.models.protonet import ProtoNet
    from curi.renderers import Renderer

__all__ = [
    "ELEMENTWISE_DTYPES",
    "SAMPLERS",
    "RunConfig",
    "TrainSettings",
    "build_model",
    "check_eval_options",
    "check_resumable",
    "run_bank",
]

_AMP_DTYPES = ("bfloat16", "float16")  # names of torch dtypes
#: ``train.elementwise_dtype``: the relation net's masked BatchNorms' per-row dtype.
ELEMENTWISE_DTYPES = ("float32", "bfloat16")
_MAX_BATCH = 100_000  # episodes per batch
# integer train settings and their ranges (the upper bounds keep a run's arrays in memory)
_TRAIN_INTS = {
    "steps": (1, 10**9),
    "batch_size": (1, _MAX_BATCH),
    "log_every": (1, 10**9),
    "eval_every": (1, 10**9),
    "checkpoint_every": (1, 10**9),
    "val_episodes": (1, validate.MAX_EPISODES),
    "train_episodes": (1, validate.MAX_EPISODES),
    "eval_batch_size": (1, _MAX_BATCH),
    "eval_chunk": (1, 10**6),
    "num_workers": (0, 256),
    "warmup_steps": (0, 10**9),
}
# Settings that may change when a run is resumed (they do not change what a step computes).
_RESUMABLE = {
    "steps",
    "eval_every",
    "checkpoint_every",
    "log_every",
    "num_workers",
    "val_episodes",
    "eval_chunk",
    "eval_batch_size",
    "render_cache_rebuild",
    "channels_last",
    "fused_adam",
    "compile",
    "cuda_graph",
}
#: Where training episodes are drawn (``train.sampler``): ``auto`` (the device on CUDA, the
#: DataLoader on a CPU), ``loader`` (CPU workers, `EpisodeSampler`) or ``device``
#: (`curi.models.device_sampler`, on the training device).
SAMPLERS = ("auto", "loader", "device")


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
        num_workers: DataLoader worker processes that sample (and, with a CPU renderer,
            render) the training episodes.
        render_cache: a folder of render caches (`curi.models.cache`): training reads its
            scenes from a uint8 cache of the bank rendered once (image and sound), built there
            when missing. None: render every batch.
        render_cache_rebuild: rebuild a cache that was made for another bank or other
            renderer settings (else such a cache is an error).
        channels_last: keep image encoders' weights in channels-last memory order (faster
            convolutions on tensor cores; image modality only).
        fused_adam: the fused CUDA kernel of Adam (CUDA only; ignored on the CPU).
        compile: `torch.compile` the whole step: the model (Inductor fuses the relation net's
            masked BatchNorm and ReLU chains), gradient clipping and Adam; with a CUDA graph
            (`cuda_graph`) the compiled step is captured and replayed. Slow first steps, then
            faster; off by default.
        elementwise_dtype: the dtype of the per-row work of the relation net's masked
            BatchNorms (`ELEMENTWISE_DTYPES`): ``float32`` (the default, the numbers as
            before) or ``bfloat16`` (half the memory traffic of an unfused step; the
            statistics are still summed in float32). Not ``float32``: the relation net takes
            its masked path on a CPU too. Part of what a step computes.
        sampler: where training episodes are drawn (`SAMPLERS`): ``auto`` is ``device`` on
            CUDA and ``loader`` on a CPU. The two draw different episodes from the same
            distribution, so it is part of a run's identity.
        lr_schedule: ``constant`` (the paper's), ``cosine`` or ``linear`` decay to 0 at
            `steps` (`curi.models.schedule`).
        warmup_steps: steps of linear warmup to `lr` (0: none).
        cuda_graph: capture the whole step in a CUDA graph and replay it (`auto`: on CUDA,
            for the schema modality, whose shapes are fixed, in one process); true or false.
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
    render_cache: str | None = None
    render_cache_rebuild: bool = False
    channels_last: bool = False
    fused_adam: bool = True
    compile: bool = False
    sampler: str = "auto"
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    cuda_graph: bool | str = "auto"
    elementwise_dtype: str = "float32"

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
        """Raise ConfigError for values out of range (one message naming the key, the value
        and the allowed range); store integral values as ints. A batch size, step count or
        learning rate of 0 is refused, never replaced by a default."""
        for key, (low, high) in _TRAIN_INTS.items():
            value = getattr(self, key)
            if value is None and key in ("batch_size", "eval_batch_size"):
                continue
            object.__setattr__(
                self, key, validate.integer(value, f"train.{key}", low=low, high=high)
            )
        for key in ("batch_size_by_modality", "lr_by_modality"):
            if not isinstance(getattr(self, key), Mapping):
                raise ConfigError(f"train.{key} must be a mapping modality -> value")
        for m, b in self.batch_size_by_modality.items():
            validate.integer(b, f"train.batch_size_by_modality.{m}", low=1, high=_MAX_BATCH)
        rates = dict(self.lr_by_modality, **({} if self.lr is None else {"": self.lr}))
        for m, lr in rates.items():
            name = f"train.lr_by_modality.{m}" if m else "train.lr"
            validate.number(lr, name, low=0, high=10, open_low=True)
        validate.number(self.alpha, "train.alpha", low=0, high=1e6)
        if self.grad_clip is not None:
            validate.number(self.grad_clip, "train.grad_clip", low=0, open_low=True)
        for key in ("amp", "render_cache_rebuild", "channels_last", "fused_adam", "compile"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"train.{key} must be true or false, got {getattr(self, key)!r}")
        if self.render_cache is not None and not isinstance(self.render_cache, str | Path):
            raise ConfigError(
                f"train.render_cache must be a folder or null, got {self.render_cache!r}"
            )
        if self.warmup_steps > self.steps:  # the rate would never reach train.lr
            raise ConfigError(
                f"train.warmup_steps={self.warmup_steps} is more than train.steps={self.steps}: "
                "the learning rate would still be warming up when training ends; give "
                "train.warmup_steps <= train.steps"
            )
        validate.choice(self.amp_dtype, "train.amp_dtype", sorted(_AMP_DTYPES))
        validate.choice(self.sampler, "train.sampler", SAMPLERS)
        validate.choice(self.lr_schedule, "train.lr_schedule", SCHEDULES)
        validate.choice(self.elementwise_dtype, "train.elementwise_dtype", ELEMENTWISE_DTYPES)
        if self.cuda_graph not in (True, False, "auto"):
            raise ConfigError(
                f"train.cuda_graph must be auto, true or false, got {self.cuda_graph!r}"
            )

    def batch_for(self, modality: str) -> int:
        """Episodes per step for `modality`."""
        b = (
            self.batch_size
            if self.batch_size is not None
            else self.batch_size_by_modality.get(modality)
        )
        if b is None:
            raise ConfigError(f"no batch size for modality {modality!r}; set train.batch_size")
        return validate.integer(b, "train.batch_size", low=1, high=_MAX_BATCH)

    def lr_for(self, modality: str) -> float:
        """Adam learning rate for `modality`."""
        lr = self.lr if self.lr is not None else self.lr_by_modality.get(modality)
        if lr is None:
            raise ConfigError(f"no learning rate for modality {modality!r}; set train.lr")
        return validate.number(lr, "train.lr", low=0, high=10, open_low=True)

    def autocast_dtype(self, device: torch.device) -> torch.dtype | None:
        """The autocast dtype on `device`, or None (no AMP: CPU, or amp off)."""
        import torch

        return getattr(torch, self.amp_dtype) if self.amp and device.type == "cuda" else None


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
        negative_sampler: ``paper`` or ``matched`` (`curi.episodes.NEGATIVE_SAMPLERS`); a run
            recorded before the key existed drew ``paper`` ones, and ``paper`` is not recorded
            (`to_dict`), so such runs keep their records.
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
    negative_sampler: str = "paper"
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

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ConfigError for values out of range: a zero embedding (which trained at loss
        ln 2), a negative or non-integer seed, an unknown negatives kind, bad train settings."""
        object.__setattr__(
            self, "embed_dim", validate.integer(self.embed_dim, "embed_dim", low=1, high=65536)
        )
        object.__setattr__(self, "seed", validate.seed(self.seed))
        validate.choice(self.negatives, "negatives", NEGATIVES)
        if not isinstance(self.train, TrainSettings):
            raise ConfigError(
                "train must be TrainSettings; build a run with RunConfig.from_mapping"
            )
        self.train.check()

        validate.choice(self.negative_sampler, "negative_sampler", NEGATIVE_SAMPLERS)
        validate.device(self.device)

    def to_dict(self) -> dict:
        """Plain JSON-ready form (what checkpoints store); ``negative_sampler`` only when it
        is not ``paper``, so a run's record (and a sweep's run key) is what it was before."""
        d = json.loads(json.dumps(dataclasses.asdict(self)))
        if d["negative_sampler"] == "paper":
            del d["negative_sampler"]
        return d

    def episodes(self, split, subset: str, *, size: int | None = None, seed=None) -> EpisodeSpec:
        """The `EpisodeSpec` of this run's episodes of `subset` of `split` (a `Split` or
        name), seeded with ``run.seed`` unless `seed` is given."""
        return EpisodeSpec(
            split,
            subset,
            self.negatives,
            seed=self.seed if seed is None else seed,
            negative_sampler=self.negative_sampler,
            size=size,
        )


def check_eval_options(*, episodes, seed, batch_size, num_workers, chunk) -> None:
    """Refuse `curi eval`'s numeric options out of range before a checkpoint is loaded: a
    batch size of 0 is refused, not replaced by the training batch size.

    Raises:
        ConfigError: naming the key, the value and the allowed range.
    """
    validate.integer(episodes, "episodes", low=1, high=validate.MAX_EPISODES)
    validate.seed(seed)
    if batch_size is not None:
        validate.integer(batch_size, "batch_size", low=1, high=_MAX_BATCH)
    validate.integer(num_workers, "num_workers", low=0, high=256)
    validate.integer(chunk, "chunk", low=1, high=10**6)


def run_bank(run: RunConfig, *, data_dir=None, bank_path=None, progress: bool = False, build=None):
    """The run's bank (`curi.bank.open_bank`) under `data_dir`, else the folder of
    `bank_path` (the one a checkpoint recorded) when it still holds that bank (its folder is
    named for it: never a sibling of some other folder a crafted checkpoint names), else
    ``run.data_dir`` or the default. A missing bank is built only with `build`, or in the
    default data folder when `build` is None."""
    path = Path(bank_path) if bank_path is not None else None
    name = run.bank.get("name", "default")
    if data_dir is None and path is not None and path.name == name:
        if (path / "manifest.json").is_file():
            data_dir = path.parent
    where = run.data_dir if data_dir is None else data_dir
    return open_bank(run.bank, where, progress=progress, build=build)


def build_model(run: RunConfig, renderer: Renderer) -> ProtoNet:
    """The run's `ProtoNet`, initialised from ``run.seed`` (without touching the global RNG),
    its encoder sized from `renderer`.

    Raises:
        OptionError: (a `ConfigError`) an unknown pooler or a bad pooling option, named by
            the pooler registry (`curi.registry.Registry.build`).
    """
    import torch

    from curi.models.data import encoder_options
    from curi.models.poolers import set_elementwise_dtype
    from curi.models.protonet import build_protonet

    pool = dict(run.pooling)
    name = pool.pop("name")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(run.seed)
        model = build_protonet(
            encoder=renderer.name,
            pooler=str(name),
            embed_dim=run.embed_dim,
            alpha=run.train.alpha,
            encoder_kw=encoder_options(renderer),
            pooler_kw=pool,
        )
    if run.train.elementwise_dtype != "float32":
        set_elementwise_dtype(model, getattr(torch, run.train.elementwise_dtype))
    return model


def with_new_defaults(saved: Mapping, now: Mapping) -> dict:
    """`saved` (a run config's ``to_dict``, written by an older curi) with the options its
    modality, pooling and train settings lacked added at the value `now` gives them, where
    that is the preset's (or `TrainSettings`') default: an option added later
    (``mask_channel``, ``train.sampler``) does not make an older run look like one made with
    other settings."""
    from curi.errors import CuriError
    from curi.presets import load_preset

    out = json.loads(json.dumps(saved))
    old_train, new_train = out.get("train"), now.get("train")
    if isinstance(old_train, dict) and isinstance(new_train, Mapping):
        defaults = dataclasses.asdict(TrainSettings())
        for key, value in new_train.items():  # a train setting added later, at its default
            if key not in old_train and key in defaults and defaults[key] == value:
                old_train[key] = value
    for group in ("modality", "pooling"):
        old, new = out.get(group), now.get(group)
        if (
            not isinstance(old, dict)
            or not isinstance(new, dict)
            or old.get("name") != new.get("name")
        ):
            continue
        try:
            preset = load_preset(group, str(new["name"]))
        except CuriError:
            continue
        for key, value in new.items():
            if key not in old and key in preset and preset[key] == value:
                old[key] = value
    return out


def check_resumable(saved: RunConfig, now: RunConfig, path: Path) -> None:
    """Refuse to resume a checkpoint made by a config that computes different steps."""
    b = now.to_dict()
    a = with_new_defaults(saved.to_dict(), b)
    for d in (a, b):
        for k in ("device", "data_dir"):
            d.pop(k)
        resumable = (
            _RESUMABLE
            if d["train"].get("lr_schedule", "constant") == "constant"
            else (
                _RESUMABLE - {"steps"}  # a decaying rate is a function of the number of steps
            )
        )
        for k in resumable:
            d["train"].pop(k, None)
    diff = sorted(
        [f"train.{k}" for k in a["train"] if a["train"][k] != b["train"].get(k)]
        + [k for k in a if k != "train" and a[k] != b.get(k)]
    )
    if diff:
        raise ConfigError(
            f"cannot resume from {path}: it was made with a different config ({', '.join(diff)}); "
            "use the same overrides, or start a new run"
        )

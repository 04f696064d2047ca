"""Training of the prototypical-network baselines (spec section 8, paper Appendix E): Adam with
the modality's learning rate, AMP on CUDA, gradient clipping, checkpoints that hold the config
that made them, exact resume, validation mAP / CBA with the best checkpoint kept, and DDP under
``torchrun``. Plain arguments only: the command line lives in `models.cli`."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from curi.bank import BankConfig, build_bank, load_bank
from curi.episodes import EpisodeSampler
from curi.errors import ConfigError
from curi.rng import derive_rng
from curi.splits import make_split
from models.data import (
    EpisodeDataset,
    StepBatchSampler,
    collate_episodes,
    concept_max_len,
    encoder_options,
    make_renderer,
    renders_on_cuda,
)
from models.evaluate import autocast, evaluate_episodes, to_device
from models.protonet import ProtoNet, build_protonet
from oracles.gap import EvalSet
from renderers import Renderer

__all__ = [
    "CHECKPOINT_FORMAT",
    "MetricLogger",
    "RunConfig",
    "TrainSettings",
    "build_model",
    "load_checkpoint",
    "open_bank",
    "resolve_device",
    "train",
]

log = logging.getLogger(__name__)
CHECKPOINT_FORMAT = 1
_AMP_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# Settings that may change when a run is resumed (they do not change what a step computes).
_RESUMABLE = {
    "steps", "eval_every", "checkpoint_every", "log_every", "num_workers", "val_episodes",
    "eval_chunk", "eval_batch_size",
}  # fmt: skip


def _fields(cls, cfg: Mapping, what: str) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(cfg) - names
    if unknown:
        raise ConfigError(f"unknown {what} option(s) {sorted(unknown)}; valid: {sorted(names)}")
    return dict(cfg)


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
        out = cls(**_fields(cls, cfg, "train"))
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
        d = _fields(cls, cfg, "run")
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


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA if available else CPU; otherwise the named device, checked.

    Raises:
        ConfigError: an unknown device, or CUDA asked for but not available.
    """
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device={name} was asked for but CUDA is not available on this machine "
                "(torch.cuda.is_available() is False); use device=cpu or device=auto"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device={name}: only {torch.cuda.device_count()} GPU(s) here")
    elif dev.type != "cpu":
        raise ConfigError(f"device {name!r} is not supported; use auto, cpu, cuda or cuda:N")
    return dev


def open_bank(run: RunConfig, *, data_dir=None, bank_path=None, progress: bool = False):
    """The run's bank: built (or reused) under `data_dir`, else the folder of `bank_path` (the
    one a checkpoint recorded) when it holds the bank, else ``run.data_dir`` or the default."""
    cfg = BankConfig.from_mapping(run.bank)
    root = data_dir
    if root is None and bank_path is not None and (Path(bank_path) / "manifest.json").is_file():
        root = Path(bank_path).parent
    if root is None:
        root = run.data_dir
    return load_bank(build_bank(cfg, root, progress=progress), verify=False)


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


def load_checkpoint(path: str | Path) -> tuple[dict, Path]:
    """Load a checkpoint file, or a run directory's ``checkpoints/best.pt`` (else ``last.pt``).

    Returns:
        ``(payload, file)``, tensors on the CPU.

    Raises:
        ConfigError: nothing there, or not a checkpoint of this format.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        for name in ("best.pt", "last.pt"):
            if (p / "checkpoints" / name).is_file():
                p = p / "checkpoints" / name
                break
    if not p.is_file():
        raise ConfigError(f"checkpoint not found at {path}; give a .pt file or a run directory")
    try:
        payload = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means an unusable file
        raise ConfigError(f"cannot read checkpoint {p}: {type(e).__name__}: {e}") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{p} is not a curi checkpoint (format {CHECKPOINT_FORMAT})")
    return payload, p


def _save(payload: dict, path: Path) -> None:
    """torch.save to a temporary name, then rename into place (never a half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def _alias(src: Path, dst: Path) -> None:
    """Make `dst` the same file as `src` (hard link, else a copy), atomically."""
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


class MetricLogger:
    """Scalars to ``metrics.jsonl`` (always; one JSON object per line) and to TensorBoard under
    ``tb/`` when `torch.utils.tensorboard` imports. Disabled on non-zero DDP ranks."""

    def __init__(self, run_dir: Path, *, enabled: bool = True) -> None:
        self.enabled, self.tb, self._file = enabled, None, None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        self._file = (run_dir / "metrics.jsonl").open("a")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tb"))
        except ImportError:
            log.info("tensorboard is not installed: metrics go to metrics.jsonl only")

    def log(self, step: int, tag: str, values: Mapping[str, float | None]) -> None:
        """Record `values` under `tag` (``train``, ``val``) at `step`."""
        if not self.enabled:
            return
        clean = {k: v for k, v in values.items() if isinstance(v, (int, float))}
        self._file.write(json.dumps({"step": step, "tag": tag, **clean}) + "\n")
        self._file.flush()
        if self.tb is not None:
            for k, v in clean.items():
                self.tb.add_scalar(f"{tag}/{k}", v, step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self.tb is not None:
            self.tb.close()


def _distributed(device: str) -> tuple[int, int, torch.device, bool]:
    """(rank, world, device, initialised_here) under ``torchrun`` (WORLD_SIZE > 1) or not."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, resolve_device(device), False
    base = resolve_device(device)
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if base.type == "cuda":
        torch.cuda.set_device(local)
        base = torch.device("cuda", local)
    initialised = not dist.is_initialized()
    if initialised:
        dist.init_process_group("nccl" if base.type == "cuda" else "gloo")
    return rank, world, base, initialised


def _step_seed(seed: int, step: int) -> int:
    """Torch seed of one step (dropout): a pure function of (seed, step), so resume is exact."""
    return int(derive_rng(seed, "torch-step", step).integers(2**62))


def train(
    run: RunConfig,
    *,
    run_dir: str | Path,
    bank=None,
    resume: str | Path | None = None,
    progress: bool = True,
) -> dict:
    """Train a prototypical network.

    Step t (0-based) trains on the episodes `StepBatchSampler` gives for t with dropout seeded
    from (seed, t), so a run resumed from the checkpoint of step t continues exactly like the
    uninterrupted run. Validation (every ``eval_every`` steps and at the end) measures mAP on
    the bank's evaluation set and CBA on ``val_episodes`` val episodes; the best checkpoint by
    val mAP is ``checkpoints/best.pt``. Checkpoints ``checkpoints/step_XXXXXXX.pt`` (and
    ``last.pt``) every ``checkpoint_every`` steps and at the end hold the model, optimizer,
    step and ``run.to_dict()``. Under ``torchrun`` (WORLD_SIZE > 1) the model is wrapped in
    DDP, each process takes its own episodes, rank 0 writes.

    Args:
        run: the run's config.
        run_dir: output folder (checkpoints, ``metrics.jsonl``, ``tb/``, ``summary.json``).
        bank: the loaded bank (default: built or reused from ``run.bank``).
        resume: a checkpoint file or run directory (its ``last.pt``) to continue from.
        progress: show a progress bar.

    Returns:
        The summary (also written to ``summary.json``): steps, best val mAP and step, last val
        metrics, paths of the checkpoints, parameter counts, training episodes per second.

    Raises:
        ConfigError: bad config, CUDA asked for but absent, or a resume checkpoint made by a
            different config.
    """
    from tqdm import tqdm

    rank, world, device, own_pg = _distributed(run.device)
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / "checkpoints"
    s = run.train
    renderer = make_renderer(run.modality)
    modality = renderer.name
    batch, lr = s.batch_for(modality), s.lr_for(modality)
    amp_dtype = s.autocast_dtype(device)
    if bank is None:
        if rank != 0:
            dist.barrier()  # rank 0 builds a missing bank first
        bank = open_bank(run, progress=progress and rank == 0)
        if rank == 0 and world > 1:
            dist.barrier()
    run = dataclasses.replace(run, bank=dict(bank.config))
    split = make_split(bank, run.split)
    model = build_model(run, renderer).to(device)
    counts = model.parameter_counts()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)
    start, best_map, best_step, last_val = 0, -math.inf, None, None
    if resume is not None:
        ckpt, path = load_checkpoint(Path(resume) / "checkpoints" / "last.pt"
                                     if Path(resume).is_dir() else resume)  # fmt: skip
        _check_resumable(RunConfig.from_mapping(ckpt["config"]), run, path)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        if ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
        start, best_map = int(ckpt["step"]), float(ckpt.get("best_map", -math.inf))
        best_step, last_val = ckpt.get("best_step"), ckpt.get("val")
        log.info("resumed from %s at step %d", path, start)
    raw = model
    if world > 1:
        ids = [device.index] if device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    max_len = concept_max_len(bank)
    pool = EpisodeSampler(bank, split, "train", run.negatives, seed=run.seed,
                          size=s.train_episodes)  # fmt: skip
    val = EpisodeSampler(bank, split, "val", run.negatives, seed=run.seed, size=s.val_episodes)
    ev = EvalSet.from_bank(bank)
    workers, on_gpu = s.num_workers, renders_on_cuda(run.modality)
    if on_gpu:
        workers = 0  # a CUDA renderer cannot run in forked workers: render in this process
    elif device.type == "cuda" and modality == "image":
        log.warning("images render on the CPU in workers; modality.device=cuda renders on the GPU")
    loader = DataLoader(
        EpisodeDataset(pool, run.modality, max_len=max_len),
        batch_sampler=StepBatchSampler(
            len(pool), batch, seed=run.seed, start=start, stop=s.steps, rank=rank, world=world
        ),
        collate_fn=collate_episodes,
        num_workers=workers,
        pin_memory=device.type == "cuda" and not on_gpu,
    )
    logger = MetricLogger(run_dir, enabled=rank == 0)
    log.info(
        "training %s/%s on %s (%d process(es)): %d steps from %d, %d episodes/step/process, "
        "lr %g, alpha %g; parameters %s", modality, run.pooling["name"], device, world, s.steps,
        start, batch, lr, s.alpha, ", ".join(f"{k} {v:,}" for k, v in counts.items()),
    )  # fmt: skip
    if rank == 0:
        logger.log(start, "params", counts)

    def checkpoint_payload(step: int) -> dict:
        return {
            "format": CHECKPOINT_FORMAT, "step": step, "model": raw.state_dict(),
            "optimizer": opt.state_dict(), "scaler": scaler.state_dict() if scaler.is_enabled()
            else None, "config": run.to_dict(), "bank_path": str(bank.path), "max_len": max_len,
            "best_map": best_map, "best_step": best_step, "val": last_val, "parameters": counts,
        }  # fmt: skip

    window = {"loss": 0.0, "query_loss": 0.0, "concept_loss": 0.0, "grad_norm": 0.0, "n": 0}
    t_window, train_time, done = time.perf_counter(), 0.0, start
    bar = tqdm(total=s.steps, initial=start, desc="train", disable=not progress or rank != 0)
    try:
        for step, cpu_batch in zip(range(start, s.steps), loader, strict=True):
            model.train()
            batch_t = to_device(cpu_batch, device)
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(_step_seed(run.seed, step))
                with autocast(device, amp_dtype):
                    out = model(batch_t)
                opt.zero_grad(set_to_none=True)
                scaler.scale(out.loss).backward()
            scaler.unscale_(opt)
            clip = s.grad_clip if s.grad_clip is not None else math.inf
            grad_norm = torch.nn.utils.clip_grad_norm_(raw.parameters(), clip)
            scaler.step(opt)
            scaler.update()
            done = step + 1
            window["loss"] += out.loss.detach()
            window["query_loss"] += out.query_loss.detach()
            if out.concept_loss is not None:
                window["concept_loss"] += out.concept_loss.detach()
            window["grad_norm"] += grad_norm.detach()
            window["n"] += 1
            bar.update(1)
            if done % s.log_every == 0 or done == s.steps:
                n = window.pop("n")
                vals = {k: float(v) / n for k, v in window.items()}
                if out.concept_loss is None:
                    vals.pop("concept_loss")
                dt = time.perf_counter() - t_window
                train_time += dt
                vals["episodes_per_s"] = n * batch * world / dt
                vals["lr"] = lr
                logger.log(done, "train", vals)
                bar.set_postfix(loss=f"{vals['loss']:.4f}")
                if not math.isfinite(vals["loss"]):
                    log.warning("step %d: loss is %s; lower train.lr or set train.grad_clip",
                                done, vals["loss"])  # fmt: skip
                window = dict.fromkeys(window, 0.0) | {"n": 0}
            if done % s.eval_every == 0 or done == s.steps:
                if world > 1:  # BatchNorm running stats are per process: take rank 0's
                    for buf in raw.buffers():
                        dist.broadcast(buf, 0)
                last_val = evaluate_episodes(
                    raw, val, run.modality, device=device,
                    batch_size=s.eval_batch_size or batch, num_workers=workers,
                    chunk=s.eval_chunk, max_len=max_len, eval_set=ev, amp_dtype=amp_dtype,
                )  # fmt: skip
                logger.log(done, "val", last_val)
                log.info("step %d: val mAP %.4f CBA %.4f", done, last_val["map"],
                         last_val["cba"])  # fmt: skip
                if last_val["map"] > best_map:
                    best_map, best_step = last_val["map"], done
                    if rank == 0:
                        _save(checkpoint_payload(done), ckpt_dir / "best.pt")
            if rank == 0 and (done % s.checkpoint_every == 0 or done == s.steps):
                path = ckpt_dir / f"step_{done:07d}.pt"
                _save(checkpoint_payload(done), path)
                _alias(path, ckpt_dir / "last.pt")
            if done % s.log_every == 0 or done == s.steps:
                t_window = time.perf_counter()  # the next window excludes eval and saving
    finally:
        bar.close()
        logger.close()
        if own_pg:
            dist.destroy_process_group()
    summary = {
        "run_dir": str(run_dir),
        "steps": done,
        "best_map": best_map if best_step is not None else None,
        "best_step": best_step,
        "val": last_val,
        "best": str(ckpt_dir / "best.pt"),
        "last": str(ckpt_dir / "last.pt"),
        "parameters": counts,
        "episodes_per_s": (done - start) * batch * world / train_time if train_time else None,
        "device": str(device),
        "world_size": world,
    }
    if rank == 0:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _check_resumable(saved: RunConfig, now: RunConfig, path: Path) -> None:
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

"""Where and how a training run executes: the device, the processes of distributed
data-parallel training under ``torchrun``, mixed precision (AMP) and forked torch RNG state.
Training (`curi.models.train`) and evaluation (`curi.models.evaluate`) ask a `Runtime` rather
than branching on CUDA or on the process count themselves."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor

from curi.errors import ConfigError

if TYPE_CHECKING:
    from curi.models.config import TrainSettings

__all__ = ["Runtime", "autocast", "resolve_device", "start_runtime", "to_device"]


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


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """Mixed precision on CUDA when `dtype` is given; a no-op elsewhere (AMP is CUDA-only)."""
    if device.type != "cuda" or dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=dtype)


def to_device(batch: Mapping[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    """The batch dict on `device` (non-blocking from pinned memory)."""
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@dataclasses.dataclass(frozen=True)
class Runtime:
    """This process's place in a run: its device, rank among ``world_size`` processes, and
    the autocast dtype (None: full precision). Made by `start_runtime`; `close` ends what it
    started.

    Attributes:
        device: where the model and batches live.
        rank: this process (0 under a single process).
        world_size: number of processes (``WORLD_SIZE`` under ``torchrun``, else 1).
        amp_dtype: autocast dtype on CUDA, or None.
        owns_process_group: `start_runtime` created the process group, so `close` ends it.
    """

    device: torch.device
    rank: int = 0
    world_size: int = 1
    amp_dtype: torch.dtype | None = None
    owns_process_group: bool = False

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes checkpoints, logs and summaries."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed precision for a forward pass (see `autocast`)."""
        return autocast(self.device, self.amp_dtype)

    def to_device(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return to_device(batch, self.device)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A loss scaler, enabled for float16 only (bfloat16 has float32's exponent range)."""
        return torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)

    @contextlib.contextmanager
    def seeded(self, seed: int) -> Iterator[None]:
        """Run the block with torch's RNG (CPU, and this process's GPU) seeded by `seed`, and
        restore the caller's RNG state afterwards: library code never moves global state."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` wrapped in DistributedDataParallel across processes; itself when alone."""
        if not self.distributed:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Run the block on rank 0 first, then on the other ranks (e.g. rank 0 builds a
        missing bank that the others then read)."""
        if not self.is_main:
            self.barrier()
        yield
        if self.is_main:
            self.barrier()

    def broadcast_buffers(self, model: torch.nn.Module) -> None:
        """Copy rank 0's buffers to every process: BatchNorm running statistics are per
        process, and validation must see one model."""
        if self.distributed:
            for buf in model.buffers():
                dist.broadcast(buf, 0)

    def close(self) -> None:
        """End the process group if `start_runtime` created it."""
        if self.owns_process_group and dist.is_initialized():
            dist.destroy_process_group()


def start_runtime(device: str = "auto", *, settings: TrainSettings | None = None) -> Runtime:
    """The `Runtime` of this process, joining the ``torchrun`` process group when
    ``WORLD_SIZE`` > 1 (``RANK``, ``LOCAL_RANK``; NCCL on CUDA, gloo on the CPU).

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``; under ``torchrun`` a CUDA process
            takes GPU ``LOCAL_RANK``.
        settings: the run's `TrainSettings`, for the autocast dtype (default: no AMP).

    Raises:
        ConfigError: an unknown device, or CUDA asked for but not available.
    """
    base = resolve_device(device)
    world = max(1, int(os.environ.get("WORLD_SIZE", "1")))
    rank, owns = 0, False
    if world > 1:
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        if base.type == "cuda":
            torch.cuda.set_device(local)
            base = torch.device("cuda", local)
        owns = not dist.is_initialized()
        if owns:
            dist.init_process_group("nccl" if base.type == "cuda" else "gloo")
    amp = settings.autocast_dtype(base) if settings is not None else None
    return Runtime(base, rank=rank, world_size=world, amp_dtype=amp, owns_process_group=owns)

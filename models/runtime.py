"""Where and how a training run executes: the device, the processes of distributed
data-parallel training under ``torchrun`` and mixed precision (AMP).
Training (`curi.models.train`) and evaluation (`curi.models.evaluate`) ask a `Runtime` rather
than branching on CUDA or on the process count themselves. `StopSignals` turns SIGUSR1 / SIGTERM
(a scheduler's warning before preemption or the time limit) into a stop at a step that every
process agrees on (docs/cluster.md, "Multi-node training")."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor

from curi.errors import ConfigError
from curi.models.torchrun import torchrun_env
from curi.signals import Interrupted, handling

if TYPE_CHECKING:
    from curi.models.config import TrainSettings

__all__ = [
    "Runtime",
    "StopSignals",
    "TrainingStopped",
    "autocast",
    "resolve_device",
    "start_runtime",
    "to_device",
]


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

    def gather(self, value: int) -> list[int]:
        """`value` of every process, by rank (``[value]`` alone)."""
        if not self.distributed:
            return [value]
        out: list = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

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
    ``WORLD_SIZE`` > 1 (NCCL on CUDA, gloo on the CPU). The global ``RANK`` orders the
    processes (rank 0, on the first node, writes); ``LOCAL_RANK`` (the process's place on its
    own node) picks its GPU; ``MASTER_ADDR`` / ``MASTER_PORT`` are where the group meets.

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``; under ``torchrun`` a CUDA process
            takes GPU ``LOCAL_RANK`` of its node.
        settings: the run's `TrainSettings`, for the autocast dtype (default: no AMP).

    Raises:
        ConfigError: an unknown device, CUDA asked for but not available, a torchrun
            environment `torchrun_env` refuses, or more processes on a node than GPUs.
    """
    world, rank, local = torchrun_env(dist.get_rank() if dist.is_initialized() else None)
    base = resolve_device(device)
    owns = False
    if world > 1:
        if base.type == "cuda":
            if local >= torch.cuda.device_count():
                raise ConfigError(
                    f"LOCAL_RANK={local} but this node has {torch.cuda.device_count()} GPU(s): "
                    "give torchrun --nproc_per_node no larger than the GPUs of a node"
                )
            torch.cuda.set_device(local)
            base = torch.device("cuda", local)
        owns = not dist.is_initialized()
        if owns:
            dist.init_process_group("nccl" if base.type == "cuda" else "gloo")
    amp = settings.autocast_dtype(base) if settings is not None else None
    return Runtime(base, rank=rank, world_size=world, amp_dtype=amp, owns_process_group=owns)


class TrainingStopped(Interrupted):
    """Training stopped on a signal (`StopSignals`) after saving a checkpoint of the step
    reached (`curi.signals.Interrupted`: uncaught, it ends the process with exit status 128 +
    the signal's number: 138 for SIGUSR1, 143 for SIGTERM, 130 for SIGINT). Running the same
    command again resumes.

    Attributes:
        signum: the signal.
        step: the step reached and saved.
        checkpoint: the checkpoint written (None on ranks other than 0).
    """

    def __init__(self, signum: int, step: int, checkpoint: str | None) -> None:
        super().__init__(signum)
        self.step, self.checkpoint = step, checkpoint

    def __str__(self) -> str:
        where = f"; checkpoint {self.checkpoint}" if self.checkpoint else ""
        return (
            f"training stopped by {signal.Signals(self.signum).name} at step {self.step}{where}; "
            "run the same command again to resume"
        )


class StopSignals:
    """SIGUSR1, SIGTERM and SIGINT (Ctrl-C), while the block runs, ask training to stop at a
    step boundary instead of ending the process: SLURM sends one before preemption or the time
    limit (``--signal=USR1@120``; submitit's default is USR1), and Ctrl-C ended the run with a
    traceback, losing the steps since its last checkpoint. A signal whose handler is
    ``SIG_IGN`` stays ignored (a background job's Ctrl-C); the previous handlers come back at
    the end of the block.

    Every process calls `should_stop` once after each step. Alone, it answers at once. Under
    DDP each process may get the signal at a different step, so the answer is agreed: every
    step's flags are max-reduced (a gloo group on the CPU, asynchronously, so no step waits
    for it) and read one step later, so all processes stop after the same step.

    Handlers are installed only in the main thread (Python's rule); elsewhere nothing stops.
    A scheduler or ``timeout`` may signal the whole process group, DataLoader workers
    included; torch's workers end on a SIGTERM from anyone but their parent, which would fail
    the main process before it saves its step. So every DataLoader of training and validation
    takes `worker_init` as its ``worker_init_fn``: a worker started while the block is open
    ignores the stop signals, and the main process ends its workers after the stop.
    """

    SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
    _open = False  # a block has installed its handlers in this process (forks inherit it)

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.received: int | None = None  # the first signal this process got
        self._previous: dict[int, object] = {}
        self._pending: tuple | None = None  # (async work, its flag tensor)
        self._group = None

    @staticmethod
    def worker_init(worker_id: int) -> None:
        """A DataLoader ``worker_init_fn``: in a worker forked while a block is open (in the
        main thread), the stop signals are ignored; elsewhere nothing changes."""
        if StopSignals._open:
            for sig in StopSignals.SIGNALS:
                signal.signal(sig, signal.SIG_IGN)

    def __enter__(self) -> StopSignals:
        self._handling = handling(self.SIGNALS, self._note)
        self._previous = self._handling.__enter__()
        if threading.current_thread() is threading.main_thread():
            StopSignals._open = True
        if self.rt.distributed:
            self._group = dist.new_group(backend="gloo")
        return self

    def _note(self, signum: int, frame) -> None:  # a signal handler: set a flag, nothing else
        if self.received is None:
            self.received = signum

    def should_stop(self) -> int | None:
        """The signal to stop on now, agreed by every process (None: go on)."""
        if not self.rt.distributed:
            return self.received
        agreed = None
        if self._pending is not None:
            work, flag = self._pending
            work.wait()
            agreed = int(flag.item()) or None
        flag = torch.tensor([self.received or 0], dtype=torch.int64)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        self._pending = (work, flag)
        return agreed

    def forward(self, signum: int) -> None:
        """Call the handler the signal had before the block, if it was a Python function (as
        submitit's, which requeues the job): after the checkpoint, the job's launcher acts.
        Call it after the block, once the step reached is saved. Python's own Ctrl-C handler
        is not called: its `KeyboardInterrupt` would end the stop in a traceback."""
        before = self._previous.get(signum)
        if callable(before) and before is not signal.default_int_handler:
            before(signum, None)

    def __exit__(self, exc_type, exc, tb) -> None:
        self._handling.__exit__(None, None, None)  # self._previous is kept for `forward`
        StopSignals._open = False
        if self._group is not None and exc_type is None:  # every process sent the last flag
            if self._pending is not None:
                self._pending[0].wait()
            dist.destroy_process_group(self._group)
        self._pending = self._group = None

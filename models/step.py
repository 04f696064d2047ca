"""One optimisation step of training, without host work it does not need: the batch's forward
under autocast, backward, gradient clipping and Adam at the step's learning rate
(`curi.models.schedule`), eager, compiled (`torch.compile`) or captured whole in a CUDA graph
and replayed (``train.cuda_graph``). Nothing here waits for the device: losses and the gradient
norm stay tensors, read by the caller on logging steps only.

Dropout is seeded from (seed, step) by one `torch.manual_seed` per step, inside a single
`torch.random.fork_rng` the caller holds around the whole loop (`StepRunner.rng`), so a resumed
run draws what the uninterrupted one did and the caller's RNG state is untouched afterwards."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable, Iterator, Mapping

import torch
from torch import Tensor

from curi.models.protonet import ProtoNet
from curi.models.runtime import Runtime
from curi.models.schedule import lr_at
from curi.rng import derive_rng

__all__ = ["StepOutput", "StepRunner", "portable_state", "step_seed"]

log = logging.getLogger(__name__)

_WARMUP = 3  # eager steps before a CUDA graph is captured (on a side stream, as torch asks)


def step_seed(seed: int, step: int) -> int:
    """Torch seed of one step (dropout): a pure function of (seed, step), so resume is exact."""
    return int(derive_rng(seed, "torch-step", step).integers(2**62))


@dataclasses.dataclass
class StepOutput:
    """What a step leaves on the device: losses (scalars; ``concept_loss`` None without a
    decoder), the gradient norm before clipping, and the learning rate it used."""

    loss: Tensor
    query_loss: Tensor
    concept_loss: Tensor | None
    grad_norm: Tensor
    lr: float


class StepRunner:
    """Runs training steps: ``runner(batch, step) -> StepOutput``.

    Args:
        model: the unwrapped model (clipping and checkpoints read its parameters).
        net: what the forward runs (`model`, or its DDP wrapper).
        opt: the Adam optimiser.
        scaler: the loss scaler (enabled for float16 only).
        rt: the runtime (device, autocast).
        seed: the run's seed (dropout of step t is seeded from (seed, t)).
        lr, schedule, warmup, steps: the learning-rate schedule (`lr_at`).
        grad_clip: max gradient norm (None: no clipping).
        mode: ``eager``, ``compile`` (`torch.compile` the model) or ``graph`` (capture the
            whole step in a CUDA graph after a few eager ones: CUDA, one process, a
            fixed-shape batch and no float16 loss scaling; anything else falls back to eager
            with a logged reason, as does a capture that fails).
        backend: `torch.compile`'s backend for ``compile`` (``inductor``; ``aot_eager``
            traces without generating code, for tests).
    """

    def __init__(
        self,
        *,
        model: ProtoNet,
        net: torch.nn.Module,
        opt: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler,
        rt: Runtime,
        seed: int,
        lr: float,
        schedule: str = "constant",
        warmup: int = 0,
        steps: int = 1,
        grad_clip: float | None = None,
        mode: str = "eager",
        backend: str | Callable = "inductor",
    ) -> None:
        self.model, self.net, self.opt, self.scaler, self.rt = model, net, opt, scaler, rt
        self.seed = seed
        self.schedule = dict(lr=lr, schedule=schedule, warmup=warmup, steps=steps)
        self.clip = grad_clip if grad_clip is not None else math.inf
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.mode = self._check_mode(mode)
        self._uncompiled = net
        if self.mode == "compile":
            self.net = torch.compile(net, backend=backend)
        self._graph: _Graph | None = None
        self._eager_steps = 0

    def _check_mode(self, mode: str) -> str:
        if mode != "graph":
            return mode
        why = None
        if self.rt.device.type != "cuda":
            why = "CUDA graphs need a CUDA device"
        elif self.rt.distributed:
            why = "CUDA graphs are not used under DDP"
        elif self.scaler.is_enabled():
            why = "float16 loss scaling reads the gradients on the host"
        if why:
            log.info("training step: eager (%s)", why)
            return "eager"
        return mode

    @contextlib.contextmanager
    def rng(self) -> Iterator[None]:
        """Hold this around the step loop: the steps reseed torch's RNG, and the caller's
        state comes back afterwards (one copy per loop, not per step)."""
        devices = [self.rt.device] if self.rt.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            yield

    def lr(self, step: int) -> float:
        """The learning rate of `step`."""
        return lr_at(step, **self.schedule)

    def __call__(self, batch: Mapping[str, Tensor], step: int) -> StepOutput:
        lr = self.lr(step)
        _set_lr(self.opt, lr)
        torch.manual_seed(step_seed(self.seed, step))
        if self.mode == "graph":
            if self._graph is None and self._eager_steps >= _WARMUP:
                self._graph = self._capture(batch)
            if self._graph is not None:
                return self._graph.replay(batch, lr)
        self._eager_steps += 1
        if self.mode == "graph":  # the warmup runs on a side stream
            return self._on_side_stream(batch, lr)
        if self.mode == "compile" and self._eager_steps == 1:
            return self._first_compiled(batch, lr)
        return self._eager(batch, lr)

    def _first_compiled(self, batch: Mapping[str, Tensor], lr: float) -> StepOutput:
        """The first compiled step (compilation happens in it); if compiling fails, this step
        and the rest run eager, with the reason logged."""
        try:
            return self._eager(batch, lr)
        except Exception as e:  # noqa: BLE001 - any compiler failure falls back, with its reason
            log.warning("training step: torch.compile failed (%s); eager from here", e)
            self.mode, self.net = "eager", self._uncompiled
            return self._eager(batch, lr)

    def _eager(self, batch: Mapping[str, Tensor], lr: float) -> StepOutput:
        batch = self.rt.to_device(batch)
        with self.rt.autocast():
            out = self.net(batch)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(out.loss).backward()
        self.scaler.unscale_(self.opt)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.scaler.step(self.opt)
        self.scaler.update()
        return StepOutput(out.loss, out.query_loss, out.concept_loss, grad_norm, lr)

    def _on_side_stream(self, batch: Mapping[str, Tensor], lr: float) -> StepOutput:
        side = torch.cuda.Stream(self.rt.device)
        side.wait_stream(torch.cuda.current_stream(self.rt.device))
        with torch.cuda.stream(side):
            out = self._eager(batch, lr)
        torch.cuda.current_stream(self.rt.device).wait_stream(side)
        return out

    def _capture(self, batch: Mapping[str, Tensor]) -> _Graph | None:
        """The step captured in a CUDA graph, or None (eager from here, with the reason
        logged) when capture fails."""
        try:
            graph = _Graph(self, batch)
        except Exception as e:  # noqa: BLE001 - any capture failure falls back, with its reason
            log.warning("training step: capturing a CUDA graph failed (%s); eager from here", e)
            self.mode = "eager"
            return None
        log.info("training step: captured in a CUDA graph; replayed from here")
        return graph


def portable_state(opt: torch.optim.Optimizer) -> dict:
    """The optimiser's state dict as an eager optimiser loads it anywhere: a captured step's
    tensor learning rate as a number and ``capturable`` off (a CUDA graph turns it on again)."""
    state = opt.state_dict()
    for group in state["param_groups"]:
        if isinstance(group["lr"], Tensor):
            group["lr"] = float(group["lr"])
        group["capturable"] = False
    return state


def _set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """Every group's rate to `lr`: in place where it is a tensor (a captured step reads it)."""
    for group in opt.param_groups:
        if isinstance(group["lr"], Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


class _Graph:
    """A whole step (forward, backward, clipping, Adam) captured in a CUDA graph: the batch is
    copied into fixed input buffers, the graph replayed, the outputs read from fixed buffers.
    Adam becomes capturable with a tensor learning rate (set in place each step)."""

    def __init__(self, runner: StepRunner, batch: Mapping[str, Tensor]) -> None:
        r, dev = runner, runner.rt.device
        for group in r.opt.param_groups:
            group["capturable"] = True
            group["lr"] = torch.tensor(float(group["lr"]), device=dev)
        for state in r.opt.state.values():
            if "step" in state:
                state["step"] = state["step"].to(dev, torch.float32)
        self.inputs = {k: v.to(dev).clone() for k, v in batch.items()}
        amp = torch.autocast(
            "cuda",
            dtype=r.rt.amp_dtype or torch.bfloat16,
            enabled=r.rt.amp_dtype is not None,
            cache_enabled=False,  # a captured step must not reuse casts across replays
        )
        r.opt.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            with amp:
                out = r.net(self.inputs)
            out.loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(r.params, r.clip)
            r.opt.step()
        self.out = (out.loss, out.query_loss, out.concept_loss, grad_norm)

    def replay(self, batch: Mapping[str, Tensor], lr: float) -> StepOutput:
        for k, buf in self.inputs.items():
            buf.copy_(batch[k], non_blocking=True)
        self.graph.replay()
        loss, query, concept, grad_norm = self.out
        return StepOutput(loss, query, concept, grad_norm, lr)

"""One optimisation step of training, without host work it does not need: the batch's forward
under autocast, backward, gradient clipping and Adam at the step's learning rate
(`curi.models.schedule`), eager, compiled whole (``train.compile``: `torch.compile` of the model,
whose Inductor kernels fuse the masked BatchNorms' element-wise chains, and of clipping with
Adam), captured whole in a CUDA graph and replayed (``train.cuda_graph``), or both: the
compiled step captured and replayed. Nothing here waits for the device: losses and the gradient
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

__all__ = ["MODES", "StepOutput", "StepRunner", "portable_state", "step_seed"]

log = logging.getLogger(__name__)

_WARMUP = 3  # eager steps before a CUDA graph is captured (on a side stream, as torch asks)
#: Step modes: eager, compiled whole, the eager step in a CUDA graph, the compiled one in one.
MODES = ("eager", "compile", "graph", "compile_graph")
_GRAPH_MODES = ("graph", "compile_graph")
_COMPILED_MODES = ("compile", "compile_graph")


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
        mode: one of `MODES`. ``eager``; ``compile``: `torch.compile` the model (forward and
            backward) and the update (clipping and Adam, with a tensor learning rate and
            ``capturable`` state, so neither a new rate nor a replay recompiles it; without
            float16 loss scaling, which reads gradients on the host: then the update stays
            eager); ``graph``: capture the whole step in a CUDA graph after a few eager ones
            (CUDA, one process, a fixed-shape batch, no float16 loss scaling); ``compile_graph``:
            the compiled step captured so (the warmup steps compile it). A mode a run cannot
            use falls back with a logged reason (``compile_graph`` to ``compile``, ``graph``
            to ``eager``), as does a compiler or a capture that fails (to ``graph`` or
            ``eager``).
        backend: `torch.compile`'s backend for the compiled modes (``inductor``;
            ``aot_eager`` traces without generating code, for tests).
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
        if mode not in MODES:
            raise ValueError(f"step mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = self._check_mode(mode)
        self._uncompiled = net
        self._plain = [(g["foreach"], g["fused"]) for g in opt.param_groups]
        self._update = self._eager_update
        if self.mode in _COMPILED_MODES:
            self.net = torch.compile(net, backend=backend)
            if not self.scaler.is_enabled():
                _make_capturable(opt, rt.device, foreach=True)
                self._update = torch.compile(self._compiled_update, backend=backend)
        self._graph: _Graph | None = None
        self._eager_steps = 0

    def _check_mode(self, mode: str) -> str:
        if mode not in _GRAPH_MODES:
            return mode
        why = None
        if self.rt.device.type != "cuda":
            why = "CUDA graphs need a CUDA device"
        elif self.rt.distributed:
            why = "CUDA graphs are not used under DDP"
        elif self.scaler.is_enabled():
            why = "float16 loss scaling reads the gradients on the host"
        if why:
            fallback = "compile" if mode == "compile_graph" else "eager"
            log.info("training step: %s (%s)", fallback, why)
            return fallback
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
        if self.mode in _GRAPH_MODES:
            if self._graph is None and self._eager_steps >= _WARMUP:
                self._graph = self._capture(batch)
            if self._graph is not None:
                return self._graph.replay(batch, lr)
        self._eager_steps += 1
        if self.mode in _COMPILED_MODES and self._eager_steps == 1:
            return self._first_compiled(batch, lr)
        return self._step(batch, lr)

    def _step(self, batch: Mapping[str, Tensor], lr: float) -> StepOutput:
        """A step run now (not replayed): on a side stream before a capture, as torch asks."""
        if self.mode in _GRAPH_MODES:
            return self._on_side_stream(batch, lr)
        return self._eager(batch, lr)

    def _first_compiled(self, batch: Mapping[str, Tensor], lr: float) -> StepOutput:
        """The first compiled step (compilation happens in it); if compiling fails, this step
        and the rest run uncompiled (``compile_graph``: the eager step in a CUDA graph), with
        the reason logged."""
        try:
            return self._step(batch, lr)
        except Exception as e:  # noqa: BLE001 - any compiler failure falls back, with its reason
            self.mode = "graph" if self.mode == "compile_graph" else "eager"
            log.warning("training step: torch.compile failed (%s); %s from here", e, self.mode)
            self.net, self._update = self._uncompiled, self._eager_update
            _make_plain(self.opt, self._plain)
            return self._step(batch, lr)

    def _eager(self, batch: Mapping[str, Tensor], lr: float) -> StepOutput:
        batch = self.rt.to_device(batch)
        with self._autocast():
            out = self.net(batch)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(out.loss).backward()
        grad_norm = self._update()
        return StepOutput(out.loss, out.query_loss, out.concept_loss, grad_norm, lr)

    def _eager_update(self) -> Tensor:
        """Clipping and Adam through the loss scaler (a no-op unless float16); the norm."""
        self.scaler.unscale_(self.opt)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.scaler.step(self.opt)
        self.scaler.update()
        return grad_norm

    def _compiled_update(self) -> Tensor:
        """Clipping and Adam, as `torch.compile` (and a CUDA graph) take them: no loss scaler,
        the optimiser capturable with a tensor learning rate (`_make_capturable`)."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.opt.step()
        return grad_norm

    def _autocast(self) -> contextlib.AbstractContextManager:
        """The forward's autocast: a captured compiled step's warmups use the capture's own
        (no cast cache), so that the compiled code's guards hold at capture."""
        if self.mode == "compile_graph":
            return _graph_autocast(self.rt)
        return self.rt.autocast()

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
            self.mode = "compile" if self.mode == "compile_graph" else "eager"
            log.warning(
                "training step: capturing a CUDA graph failed (%s); %s from here", e, self.mode
            )
            return None
        log.info("training step: %s captured in a CUDA graph; replayed from here", self.mode)
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


def _make_capturable(opt: torch.optim.Optimizer, device: torch.device, *, foreach: bool) -> None:
    """Adam as a CUDA graph or `torch.compile` takes it: ``capturable`` (its step counts are
    tensors on the parameters' device, read by no host code) with the learning rate a tensor
    there, set in place each step (a new rate neither recompiles nor needs a new capture).
    `foreach`: the multi-tensor form, not the fused CUDA kernel (compiled: Inductor fuses its
    element-wise work itself)."""
    for group in opt.param_groups:
        group["capturable"] = True
        if not isinstance(group["lr"], Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), device=device)
        if foreach:
            group["fused"], group["foreach"] = False, True
    for state in opt.state.values():
        if "step" in state:
            state["step"] = state["step"].to(device, torch.float32)


def _make_plain(opt: torch.optim.Optimizer, plain: list[tuple]) -> None:
    """Undo `_make_capturable` (a compiler failed): a number for the rate, ``capturable``
    off, the ``foreach`` and ``fused`` settings the optimiser was made with."""
    for group, (foreach, fused) in zip(opt.param_groups, plain, strict=True):
        group["lr"] = float(group["lr"])
        group["capturable"], group["foreach"], group["fused"] = False, foreach, fused


def _graph_autocast(rt: Runtime) -> contextlib.AbstractContextManager:
    """The autocast of a captured step: no cast cache (a replay must not reuse casts)."""
    return torch.autocast(
        rt.device.type,
        dtype=rt.amp_dtype or torch.bfloat16,
        enabled=rt.amp_dtype is not None,
        cache_enabled=False,
    )


def _set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """Every group's rate to `lr`: in place where it is a tensor (a captured step reads it)."""
    for group in opt.param_groups:
        if isinstance(group["lr"], Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


class _Graph:
    """A whole step (forward, backward, clipping, Adam; eager or compiled) captured in a CUDA
    graph: the batch is copied into fixed input buffers, the graph replayed, the outputs read
    from fixed buffers. Adam becomes capturable with a tensor learning rate (set in place each
    step)."""

    def __init__(self, runner: StepRunner, batch: Mapping[str, Tensor]) -> None:
        r, dev = runner, runner.rt.device
        _make_capturable(r.opt, dev, foreach=r.mode == "compile_graph")
        self.inputs = {k: v.to(dev).clone() for k, v in batch.items()}
        r.opt.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            with _graph_autocast(r.rt):
                out = r.net(self.inputs)
            out.loss.backward()
            grad_norm = r._update() if r.mode == "compile_graph" else r._compiled_update()
        self.out = (out.loss, out.query_loss, out.concept_loss, grad_norm)

    def replay(self, batch: Mapping[str, Tensor], lr: float) -> StepOutput:
        for k, buf in self.inputs.items():
            buf.copy_(batch[k], non_blocking=True)
        self.graph.replay()
        loss, query, concept, grad_norm = self.out
        return StepOutput(loss, query, concept, grad_norm, lr)

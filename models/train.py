"""Training of the prototypical-network baselines (paper Appendix E): Adam with the modality's
learning rate, gradient clipping, checkpoints that hold the config that made them, exact
resume, validation mAP / CBA with the best checkpoint kept. `train` wires the parts; the step
loop and validation are below it; device, DDP and AMP come from `curi.models.runtime`. Plain
arguments only: the command line lives in `curi.models.cli`."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor

from curi.atomic import exclusive, remove, write_text
from curi.bank import ConceptBank
from curi.episodes import EpisodeSampler
from curi.errors import ConfigError, CuriError
from curi.models.checkpoint import (
    CHECKPOINT_FORMAT,
    MetricLogger,
    checkpoint_file,
    link_checkpoint,
    load_checkpoint,
    load_optimizer,
    load_weights,
    save_checkpoint,
    state_digest,
)
from curi.models.config import RunConfig, build_model, check_resumable, run_bank
from curi.models.data import (
    concept_max_len,
    make_renderer,
    renders_on_cuda,
)
from curi.models.evaluate import evaluate_episodes
from curi.models.protonet import ProtoNet
from curi.models.runtime import Runtime, StopSignals, TrainingStopped, start_runtime
from curi.models.step import StepOutput, StepRunner, portable_state
from curi.models.train_batches import resolve_sampler, train_cache, train_loader
from curi.oracles.eval_set import EvalSet
from curi.paths import read_text
from curi.renderers import Renderer
from curi.splits import make_split

__all__ = ["train"]

log = logging.getLogger(__name__)


def train(
    run: RunConfig,
    *,
    run_dir: str | Path,
    bank=None,
    resume: str | Path | None = None,
    progress: bool = True,
) -> dict:
    """Train a prototypical network.

    Step t (0-based) trains on the episodes of t, with dropout seeded from (seed, t) and the
    learning rate of t (``train.lr_schedule``), so a run resumed from the checkpoint of step t
    continues exactly like the uninterrupted run. The episodes of t come from the pool of
    ``train_episodes`` episodes that `StepBatchSampler` orders (``train.sampler=loader``,
    DataLoader workers), or are drawn for t on the training device
    (``train.sampler=device``, `curi.models.device_sampler`: the default on CUDA); the step
    runs eager, compiled or replayed from a CUDA graph (`curi.models.step`). Validation (every
    ``eval_every`` steps and at the end) measures mAP on the bank's evaluation set and CBA on
    ``val_episodes`` val episodes; the best checkpoint by val mAP is ``checkpoints/best.pt``.
    Checkpoints ``checkpoints/step_XXXXXXX.pt`` (and ``last.pt``) every ``checkpoint_every``
    steps and at the end hold the model, optimizer, step and ``run.to_dict()``. Under
    ``torchrun`` (WORLD_SIZE > 1) the model is wrapped in DDP, each process takes its own
    episodes (a step trains on batch size x world size episodes), rank 0 writes; every process
    ends with the same weights, and a run is deterministic for a given world size
    (docs/cluster.md, "Multi-node training").

    SIGUSR1 or SIGTERM (a scheduler's warning before preemption or the time limit) stops the
    run after the current step (under DDP, a step all processes agree on): the checkpoint of
    that step is saved, a handler the signal had before (submitit's requeue) is called, and
    `TrainingStopped` (exit status 128 + signal) is raised; the same command run again resumes.

    A run folder holds one run, each (tag, step) of its metrics once. Without `resume`, a
    `run_dir` that holds ``checkpoints/last.pt`` is that run, rerun: it resumes from there, or
    is reported finished (its summary returned, nothing retrained) when the checkpoint's step
    reaches ``train.steps``; another config is refused. A `run_dir` without one (new, or an
    attempt killed before its first checkpoint) starts clean: the attempt's metrics,
    TensorBoard events and ``best.pt`` are replaced, nothing else in the folder is touched.

    Args:
        run: the run's config.
        run_dir: output folder (checkpoints, ``metrics.jsonl``, ``tb/``, ``summary.json``).
        bank: the loaded bank (default: built or reused from ``run.bank``).
        resume: a checkpoint file or run directory (its ``last.pt``) to continue from
            (default: `run_dir`'s own ``last.pt``, if any).
        progress: show a progress bar.

    Returns:
        The summary (also written to ``summary.json``): steps, best val mAP and step, last val
        metrics, paths of the checkpoints, parameter counts, training episodes per second,
        ``world_size``, ``batch_size`` (episodes per step and process), ``episodes_per_step``
        (all processes) and ``weights_sha256`` (`state_digest` of the model this process ends
        with: equal on every process, and equal to the digest of ``last.pt``'s model).

    Raises:
        ConfigError: bad config, CUDA asked for but absent, a resume checkpoint (or the
            run already in `run_dir`) made by a different config, processes that found
            different checkpoints to resume from (a `run_dir` not shared by all nodes), or
            another process training into `run_dir`.
        TrainingStopped: stopped by a signal (a `SystemExit`), after saving a checkpoint.
    """
    rt = start_runtime(run.device, settings=run.train)
    try:
        with _hold(Path(run_dir), rt):
            if (Path(run_dir) / "summary.json").is_dir():  # its atomic write cannot replace one
                raise ConfigError(f"{run_dir}/summary.json is a folder (or a link to one); move it")
            fit = _wire(run, rt, Path(run_dir), bank=bank, resume=resume, progress=progress)
            try:
                if fit.start >= fit.run.train.steps:
                    return _finished(fit)
                with StopSignals(rt) as stop:
                    done, seconds, signum = _run_steps(fit, stop, progress=progress)
                if signum is not None:
                    _stop(fit, stop, signum, done)
            finally:
                fit.logger.close()
            return fit.summary(done, seconds)
    finally:
        rt.close()


def _hold(run_dir: Path, rt: Runtime) -> contextlib.AbstractContextManager:
    """The run folder's lock for this process (`curi.atomic.exclusive`): ``.run.lock`` in it,
    ``.run-rank<N>.lock`` for rank N > 0 of a DDP run, whose processes share the folder. A
    second run into the folder fails at once instead of training beside this one."""
    name = "run" if rt.is_main else f"run-rank{rt.rank}"
    return exclusive(
        run_dir / name, what=f"output_dir={run_dir} (a training run)", error=ConfigError
    )


def _stop(fit: _Fit, stop: StopSignals, signum: int, done: int) -> None:
    """After a stop signal: save the step reached (unless just saved), let the signal's
    earlier handler act (submitit requeues), then raise `TrainingStopped`."""
    path = fit.ckpt_dir / f"step_{done:07d}.pt"
    if done > fit.start and not _due(done, fit.run.train.checkpoint_every, fit.run.train.steps):
        fit.save(done)
    fit.rt.barrier()  # the checkpoint is on disk before any process leaves
    stopped = TrainingStopped(signum, done, str(path) if fit.rt.is_main else None)
    log.warning("%s", stopped)
    fit.logger.close()
    stop.forward(signum)
    raise stopped


# --- wiring ----------------------------------------------------------------------------------
@dataclasses.dataclass
class _Val:
    """Validation so far: the best val mAP and its step, and the latest val metrics."""

    best_map: float = -math.inf
    best_step: int | None = None
    last: dict | None = None


@dataclasses.dataclass
class _Fit:
    """A wired training run: what the step loop and validation read and update."""

    run: RunConfig  # with the bank's full config, as checkpoints store it
    rt: Runtime
    run_dir: Path
    bank: ConceptBank
    model: ProtoNet  # unwrapped: checkpoints, clipping and validation use it
    net: torch.nn.Module  # what the step runs: `model`, or its DDP wrapper
    opt: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    loader: Iterable[dict[str, Tensor]]  # one batch per step
    step: StepRunner
    sampler: str  # where the training episodes are drawn: loader or device
    val: EpisodeSampler
    eval_set: EvalSet
    logger: MetricLogger
    batch: int  # episodes per step and process
    lr: float
    max_len: int
    workers: int  # validation's DataLoader workers (0 when the renderer runs on CUDA)
    counts: dict[str, int]
    start: int
    state: _Val
    rerun: bool  # resumed from run_dir's own last checkpoint, not from a given one

    @property
    def ckpt_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    def payload(self, step: int) -> dict:
        """What a checkpoint holds: enough to resume exactly and to rebuild the model."""
        return {
            "format": CHECKPOINT_FORMAT,
            "step": step,
            "model": self.model.state_dict(),
            "optimizer": portable_state(self.opt),
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "config": self.run.to_dict(),
            "world_size": self.rt.world_size,
            "bank_path": str(self.bank.path),
            "max_len": self.max_len,
            "best_map": self.state.best_map,
            "best_step": self.state.best_step,
            "val": self.state.last,
            "parameters": self.counts,
            "sampler": self.sampler,
        }

    def save(self, step: int) -> None:
        """``step_XXXXXXX.pt``, and ``last.pt`` as the same file (rank 0 only)."""
        if self.rt.is_main:
            path = self.ckpt_dir / f"step_{step:07d}.pt"
            save_checkpoint(self.payload(step), path)
            link_checkpoint(path, self.ckpt_dir / "last.pt")

    def summary(self, done: int, seconds: float) -> dict:
        """The run's summary; rank 0 also writes it to ``summary.json``."""
        world = self.rt.world_size
        summary = {
            "run_dir": str(self.run_dir),
            "steps": done,
            "best_map": self.state.best_map if self.state.best_step is not None else None,
            "best_step": self.state.best_step,
            "val": self.state.last,
            "best": str(self.ckpt_dir / "best.pt"),
            "last": str(self.ckpt_dir / "last.pt"),
            "parameters": self.counts,
            "episodes_per_s": (done - self.start) * self.batch * world / seconds
            if seconds
            else None,
            "device": str(self.rt.device),
            "world_size": world,
            "batch_size": self.batch,
            "episodes_per_step": self.batch * world,
            "sampler": self.sampler,
            "step_mode": self.step.mode,
            "weights_sha256": state_digest(self.model.state_dict()),
        }
        if self.rt.is_main:  # atomic: a link or FIFO there is replaced, never written through
            write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        return summary


def _wire(run: RunConfig, rt: Runtime, run_dir: Path, *, bank, resume, progress: bool) -> _Fit:
    """Build the run's parts. Config errors (modality, batch size, learning rate) come before
    the bank is built; the optimiser state is restored before DDP copies rank 0's weights."""
    s = run.train
    renderer = make_renderer(run.modality)
    batch, lr = s.batch_for(renderer.name), s.lr_for(renderer.name)
    if bank is None:
        with rt.main_first():  # rank 0 builds a missing bank, the others then read it
            bank = run_bank(run, progress=progress and rt.is_main)
    run = dataclasses.replace(run, bank=dict(bank.config))
    split = make_split(bank, run.split)
    model = build_model(run, renderer).to(rt.device)
    if s.channels_last and renderer.name == "image":
        model = model.to(memory_format=torch.channels_last)
    fused = s.fused_adam and rt.device.type == "cuda"
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=fused or None)
    scaler = rt.grad_scaler()
    start, state, rerun = _start(run, rt, run_dir, resume, model, opt, scaler)
    net = rt.wrap(model)
    max_len = concept_max_len(bank)
    sampler = resolve_sampler(s.sampler, rt.device)
    workers = _loader_workers(run, renderer, rt)
    cache = train_cache(run, rt, bank, renderer, start=start, progress=progress)
    loader = train_loader(
        run,
        rt,
        bank,
        split,
        batch,
        start=start,
        renderer=renderer,
        max_len=max_len,
        cache=cache,
        sampler=sampler,
    )
    step = _step_runner(run, rt, renderer, model, net, opt, scaler, lr)
    fit = _Fit(
        run=run,
        rt=rt,
        run_dir=run_dir,
        bank=bank,
        model=model,
        net=net,
        opt=opt,
        scaler=scaler,
        loader=loader,
        step=step,
        sampler=sampler,
        val=EpisodeSampler.from_spec(bank, run.episodes(split, "val", size=s.val_episodes)),
        eval_set=EvalSet.from_bank(bank),
        logger=MetricLogger(
            run_dir, enabled=rt.is_main, resume_step=None if resume is None and not rerun else start
        ),
        batch=batch,
        lr=lr,
        max_len=max_len,
        workers=workers,
        counts=model.parameter_counts(),
        start=start,
        state=state,
        rerun=rerun,
    )
    _log_start(fit, renderer)
    return fit


def _start(run: RunConfig, rt: Runtime, run_dir: Path, resume, model, opt, scaler) -> tuple:
    """``(step, validation state, rerun)`` the run starts from: `resume`, or `run_dir`'s own
    ``last.pt`` (a rerun), loaded into the model, optimiser and scaler; else a clean start."""
    start, state = 0, _Val()
    own = run_dir / "checkpoints" / "last.pt"
    rerun = resume is None and own.is_file()
    if resume is not None or rerun:
        start, state = _resume(
            own if rerun else resume, run, model, opt, scaler, rerun=rerun, world=rt.world_size
        )
    elif rt.is_main:
        _start_clean(run_dir)
    _check_same_start(rt, start, run_dir)
    return start, state, rerun


def _resume(
    resume, run: RunConfig, model, opt, scaler, *, rerun: bool, world: int = 1
) -> tuple[int, _Val]:
    """Load a checkpoint (a file, or a run directory's ``last.pt``) into the model, optimiser
    and scaler after checking it was made by a config that computes the same steps. `rerun`:
    the checkpoint is the output folder's own (not asked for), which the message says. A
    checkpoint saved by another number of processes than `world` resumes with a warning: the
    steps after it see other episodes than an uninterrupted run.

    Returns:
        ``(step, validation state)`` saved with it.
    """
    ckpt, path = load_checkpoint(checkpoint_file(resume, last=True))
    try:
        check_resumable(RunConfig.from_mapping(ckpt["config"]), run, path)
    except ConfigError as e:
        if not rerun:
            raise
        raise ConfigError(
            f"output_dir {path.parent.parent} already holds a run: {e} in another output_dir"
        ) from None
    load_weights(model, ckpt, path)
    load_optimizer(opt, ckpt, path)
    if ckpt.get("scaler"):
        scaler.load_state_dict(ckpt["scaler"])
    state = _Val(float(ckpt.get("best_map", -math.inf)), ckpt.get("best_step"), ckpt.get("val"))
    saved = ckpt.get("world_size", 1)
    if saved != world:
        log.warning(
            "%s was saved by %d process(es), resumed by %d: the steps from here differ from an "
            "uninterrupted run (episodes per step and their order depend on the world size)",
            path,
            saved,
            world,
        )
    log.info("resumed from %s at step %d", path, int(ckpt["step"]))
    return int(ckpt["step"]), state


def _check_same_start(rt: Runtime, start: int, run_dir: Path) -> None:
    """Every process must resume from the same step: DDP copies rank 0's weights to the
    others, but not the optimiser state, and the step decides the episodes.

    Raises:
        ConfigError: the processes found different checkpoints (or none).
    """
    starts = rt.gather(start)
    if len(set(starts)) > 1:
        raise ConfigError(
            f"the processes would start at different steps {starts} (by rank): each reads "
            f"{run_dir}/checkpoints/last.pt (or resume=) itself, so put output_dir on a "
            "filesystem every node shares"
        )


def _start_clean(run_dir: Path) -> None:
    """Before step 0 in a folder without a last checkpoint: drop the ``best.pt`` of an earlier
    attempt killed before it (its metrics go when the `MetricLogger` opens)."""
    if (run_dir / "metrics.jsonl").is_file():
        log.info(
            "%s: an earlier attempt stopped before its first checkpoint; starting clean "
            "(its metrics and TensorBoard events are replaced)",
            run_dir,
        )
    remove(run_dir / "checkpoints" / "best.pt", root=run_dir, link=True)


def _finished(fit: _Fit) -> dict:
    """A run whose checkpoint has reached ``train.steps`` already: nothing to train. Returns
    the summary its folder holds (written anew if missing or if the run came from another
    folder's checkpoint)."""
    log.info(
        "%s: the run is finished (step %d, train.steps=%d); nothing to train. A larger "
        "train.steps continues it; another output_dir trains a new one",
        fit.run_dir,
        fit.start,
        fit.run.train.steps,
    )
    saved = fit.run_dir / "summary.json"
    if fit.rerun and not saved.is_symlink():  # a link's target is no summary of this run
        with contextlib.suppress(CuriError, ValueError, RecursionError):  # else written anew
            return json.loads(read_text(saved, "run summary", CuriError))
    return fit.summary(fit.start, 0.0)


def _loader_workers(run: RunConfig, renderer: Renderer, rt: Runtime) -> int:
    """Validation's DataLoader workers: none when the renderer runs on CUDA (CUDA does not
    survive a fork, so it renders in this process), else ``train.num_workers``."""
    if renders_on_cuda(run.modality):
        return 0
    if rt.device.type == "cuda" and renderer.gpu_capable:
        log.warning(
            "%s scenes render on the CPU in workers; modality.device=cuda renders them on the GPU",
            renderer.name,
        )
    return run.train.num_workers


def _step_runner(
    run: RunConfig, rt: Runtime, renderer: Renderer, model, net, opt, scaler, lr: float
) -> StepRunner:
    """The run's `StepRunner`: compiled whole with train.compile, captured in a CUDA graph with
    train.cuda_graph (auto: on CUDA for schema, whose batches have fixed shapes, in one
    process), both (``compile_graph``) or neither (``eager``)."""
    s = run.train
    graph = s.cuda_graph
    if graph == "auto":
        graph = rt.device.type == "cuda" and renderer.name == "schema" and not rt.distributed
    modes = {(True, True): "compile_graph", (True, False): "compile", (False, True): "graph"}
    mode = modes.get((s.compile, bool(graph)), "eager")
    return StepRunner(
        model=model,
        net=net,
        opt=opt,
        scaler=scaler,
        rt=rt,
        seed=run.seed,
        lr=lr,
        schedule=s.lr_schedule,
        warmup=s.warmup_steps,
        steps=s.steps,
        grad_clip=s.grad_clip,
        mode=mode,
    )


def _log_start(fit: _Fit, renderer: Renderer) -> None:
    s, rt = fit.run.train, fit.rt
    log.info(
        "training %s/%s on %s (%d process(es)): %d steps from %d, %d episodes/step/process, "
        "lr %g, alpha %g; parameters %s",
        renderer.name,
        fit.run.pooling["name"],
        rt.device,
        rt.world_size,
        s.steps,
        fit.start,
        fit.batch,
        fit.lr,
        s.alpha,
        ", ".join(f"{k} {v:,}" for k, v in fit.counts.items()),
    )
    if rt.is_main:  # at step 0: a resumed run's earlier part logged it already
        fit.logger.log(0, "params", fit.counts)


# --- the step loop ---------------------------------------------------------------------------
def _due(done: int, every: int, steps: int) -> bool:
    """Whether something done every `every` steps (and at the end) is due after `done`."""
    return done % every == 0 or done == steps


class _Window:
    """Loss and gradient-norm sums over one logging window, kept on the device (no sync each
    step), and the window's clock; `seconds` adds up the windows (training time without
    validation and saving)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.restart()

    def restart(self) -> None:
        self.sums = dict.fromkeys(("loss", "query_loss", "concept_loss", "grad_norm"), 0.0)
        self.n, self.t0 = 0, time.perf_counter()

    def add(self, out: StepOutput) -> None:
        self.sums["loss"] += out.loss.detach()
        self.sums["query_loss"] += out.query_loss.detach()
        if out.concept_loss is not None:
            self.sums["concept_loss"] += out.concept_loss.detach()
        self.sums["grad_norm"] += out.grad_norm.detach()
        self.n += 1

    def means(self, *, concept: bool, episodes_per_step: int) -> dict[str, float]:
        """Window means (without ``concept_loss`` when there is no decoder) and episodes per
        second; the clock stops after the sums reach the host, so it counts GPU work too."""
        vals = {k: float(v) / self.n for k, v in self.sums.items()}
        if not concept:
            vals.pop("concept_loss")
        dt = time.perf_counter() - self.t0
        self.seconds += dt
        vals["episodes_per_s"] = self.n * episodes_per_step / dt
        return vals


def _log_train(fit: _Fit, window: _Window, out: StepOutput, done: int, bar) -> None:
    vals = window.means(
        concept=out.concept_loss is not None, episodes_per_step=fit.batch * fit.rt.world_size
    )
    vals["lr"] = out.lr  # the rate of the window's last step
    fit.logger.log(done, "train", vals)
    bar.set_postfix(loss=f"{vals['loss']:.4f}")
    if not math.isfinite(vals["loss"]):
        log.warning(
            "step %d: loss is %s; lower train.lr or set train.grad_clip", done, vals["loss"]
        )


def _run_steps(fit: _Fit, stop: StopSignals, *, progress: bool) -> tuple[int, float, int | None]:
    """Steps ``start..steps``: train, log every ``log_every``, validate every ``eval_every``,
    checkpoint every ``checkpoint_every`` steps, and all three at the end; or stop early, after
    a step, when `stop` says so. Only logging, validation and checkpoints read the device.

    Returns:
        ``(steps done, seconds spent training, the stop signal or None)``.
    """
    from tqdm import tqdm

    s, done = fit.run.train, fit.start
    window = _Window()
    bar = tqdm(
        total=s.steps, initial=fit.start, desc="train", disable=not progress or not fit.rt.is_main
    )
    fit.net.train()  # validation puts the model back in training mode when it is done
    try:
        with fit.step.rng():
            for step, batch in zip(range(fit.start, s.steps), fit.loader, strict=True):
                out = fit.step(batch, step)
                done = step + 1
                window.add(out)
                bar.update(1)
                if _due(done, s.log_every, s.steps):
                    _log_train(fit, window, out, done, bar)
                if _due(done, s.eval_every, s.steps):
                    _validate(fit, done)
                if _due(done, s.checkpoint_every, s.steps):
                    fit.save(done)
                if _due(done, s.log_every, s.steps):
                    window.restart()  # the next window excludes validation and saving
                signum = stop.should_stop()
                if signum is not None and done < s.steps:
                    return done, window.seconds, signum
    finally:
        bar.close()
    return done, window.seconds, None


# --- validation ------------------------------------------------------------------------------
def _validate(fit: _Fit, done: int) -> None:
    """Val mAP on the bank's evaluation set and class-balanced accuracy on the val episodes
    (`evaluate_episodes`); a new best val mAP writes ``best.pt``."""
    fit.rt.broadcast_buffers(fit.model)  # every process validates rank 0's model
    s = fit.run.train
    val = evaluate_episodes(
        fit.model,
        fit.val,
        fit.run.modality,
        device=fit.rt.device,
        batch_size=s.eval_batch_size or fit.batch,
        num_workers=fit.workers,
        chunk=s.eval_chunk,
        max_len=fit.max_len,
        eval_set=fit.eval_set,
        amp_dtype=fit.rt.amp_dtype,
    )
    fit.state.last = val
    fit.logger.log(done, "val", val)
    log.info("step %d: val mAP %.4f CBA %.4f", done, val["map"], val["cba"])
    if val["map"] > fit.state.best_map:
        fit.state.best_map, fit.state.best_step = val["map"], done
        if fit.rt.is_main:
            save_checkpoint(fit.payload(done), fit.ckpt_dir / "best.pt")

"""Training of the prototypical-network baselines (spec section 8, paper Appendix E): Adam with
the modality's learning rate, AMP on CUDA, gradient clipping, checkpoints that hold the config
that made them, exact resume, validation mAP / CBA with the best checkpoint kept, and DDP under
``torchrun``. Plain arguments only: the command line lives in `curi.models.cli`."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from curi.episodes import EpisodeSampler
from curi.models.checkpoint import (
    CHECKPOINT_FORMAT,
    MetricLogger,
    link_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from curi.models.config import RunConfig, build_model, check_resumable, open_bank, resolve_device
from curi.models.data import (
    EpisodeDataset,
    StepBatchSampler,
    collate_episodes,
    concept_max_len,
    make_renderer,
    renders_on_cuda,
)
from curi.models.evaluate import autocast, evaluate_episodes, to_device
from curi.oracles.gap import EvalSet
from curi.rng import derive_rng
from curi.splits import make_split

__all__ = ["train"]

log = logging.getLogger(__name__)


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
        check_resumable(RunConfig.from_mapping(ckpt["config"]), run, path)
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
                        save_checkpoint(checkpoint_payload(done), ckpt_dir / "best.pt")
            if rank == 0 and (done % s.checkpoint_every == 0 or done == s.steps):
                path = ckpt_dir / f"step_{done:07d}.pt"
                save_checkpoint(checkpoint_payload(done), path)
                link_checkpoint(path, ckpt_dir / "last.pt")
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

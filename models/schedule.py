"""The learning rate of each training step (``train.lr_schedule``, ``train.warmup_steps``): the
paper's constant rate (Appendix E), or a warmup then a cosine or linear decay to 0 at
``train.steps``. A pure function of the step, so a resumed run continues its schedule.

Larger batches (docs/benchmarks.md, "Learning rate at larger batches"): Adam's rate grows
about as the square root of the batch, lr(B) = lr(B0) * sqrt(B / B0) from the paper's batch B0,
with a warmup of a few hundred steps; `scaled_lr` gives it."""

from __future__ import annotations

import math

__all__ = ["SCHEDULES", "lr_at", "scaled_lr"]

SCHEDULES = ("constant", "cosine", "linear")


def lr_at(step: int, *, lr: float, schedule: str, warmup: int, steps: int) -> float:
    """The learning rate of step `step` (0-based) of a run of `steps` steps.

    Warmup: step t < `warmup` uses ``lr * (t + 1) / warmup``. After it, ``constant`` keeps
    `lr`; ``cosine`` and ``linear`` decay from `lr` towards 0, which they would reach at step
    `steps` (the last step still trains, at a small rate).

    Args:
        step: the step.
        lr: the peak rate.
        schedule: one of `SCHEDULES`.
        warmup: warmup steps (0: none).
        steps: the run's number of steps.
    """
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "constant":
        return lr
    frac = (step - warmup) / max(1, steps - warmup)  # 0 at the end of warmup, 1 at `steps`
    if schedule == "cosine":
        return lr * 0.5 * (1.0 + math.cos(math.pi * frac))
    return lr * (1.0 - frac)


def scaled_lr(lr: float, batch: int, base_batch: int) -> float:
    """Adam's learning rate for `batch` episodes per step from the rate `lr` of `base_batch`
    (square-root scaling)."""
    return lr * math.sqrt(batch / base_batch)

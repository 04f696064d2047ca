"""The callable submitit runs for a job of `curi.jobs` (imported only with a submitit launcher,
as it needs the ``curi[slurm]`` extra)."""

from __future__ import annotations

import submitit

from curi.jobs import Job, call

__all__ = ["Requeueable"]


class Requeueable(submitit.helpers.Checkpointable):
    """A job that SLURM may stop and requeue: on preemption or timeout submitit calls
    `checkpoint`, which submits the same call again. The job saves its own progress (a
    training run its checkpoints, an export its finished parts), so the new attempt goes on
    from there."""

    def __init__(self, job: Job, threads: int | None) -> None:
        self.job, self.threads = job, threads

    def __call__(self):
        return call(self.job, self.threads)

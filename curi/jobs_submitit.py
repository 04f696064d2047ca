"""The callable submitit runs for a job of `curi.jobs` (imported only with a submitit launcher,
as it needs the ``curi[slurm]`` extra)."""

from __future__ import annotations

import os
import signal

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
        # submitit's job process ignores SIGTERM (it waits for SLURM's own signal); a forked
        # worker of a process pool inherits that, so the pool's terminate (its `with` exit)
        # hung forever: processes forked by the job get the default handler back.
        os.register_at_fork(after_in_child=_default_sigterm)
        return call(self.job, self.threads)


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

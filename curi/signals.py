"""Stop signals of long work, handled one way everywhere: `handling` installs a handler for a
block and puts the earlier ones back, `Interrupted` ends the process with the status a shell
gives a process ended by the signal (128 + its number: 130 for SIGINT, 143 for SIGTERM), and
`stop_on_signals` makes Ctrl-C or SIGTERM raise it, so a command can say in one line what it
kept. Training's `curi.models.runtime.StopSignals` asks for a stop through `handling` too.
`worker_pool` runs a process pool whose workers leave the signals to the parent
(`worker_signals`) and, on a stop, ends them without waiting on their locks (`end_pool`)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from multiprocessing.pool import Pool
from multiprocessing.process import BaseProcess
from pathlib import Path

__all__ = [
    "Interrupted",
    "end_pool",
    "handling",
    "stop_on_signals",
    "worker_pool",
    "worker_signals",
]

log = logging.getLogger(__name__)


class Interrupted(SystemExit):
    """Work stopped by a signal. Like `KeyboardInterrupt` it is not an `Exception`, so no
    handler of errors swallows it; uncaught, it ends the process with exit status 128 + the
    signal's number and prints nothing.

    Attributes:
        signum: the signal.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}"


@contextmanager
def handling(signals: Sequence[int], handler: Callable) -> Iterator[dict[int, object]]:
    """While the block runs, `handler` answers `signals`, except one whose handler is
    ``SIG_IGN``: it stays ignored (a job started in the background ignores Ctrl-C). The
    earlier handlers come back after the block. Only the main thread can set handlers
    (Python's rule): elsewhere nothing changes.

    Yields:
        signal -> its handler before the block, for those the block handles (a scheduler's
        handler, such as submitit's, can then be called after a clean stop).
    """
    previous: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in signals:
            before = signal.getsignal(sig)
            if before is not signal.SIG_IGN:
                previous[sig] = before
                signal.signal(sig, handler)
    try:
        yield previous
    finally:
        for sig, before in previous.items():  # None: a handler not set from Python
            signal.signal(sig, signal.SIG_DFL if before is None else before)


@contextmanager
def stop_on_signals(signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[bool]:
    """While the block runs, the first of `signals` raises `Interrupted` in the main thread;
    a second one is ignored until the block ends, so it cannot break the clean-up that the
    first one started. Inside another such block (a bank built by `curi gap`) it changes
    nothing: the outer block's handler raises, and its clean-up stays protected.

    Yields:
        Whether this block answers the signals (False inside another block), so that one
        line, not two, says what a stop kept.
    """
    if all(getattr(signal.getsignal(sig), "stops", False) for sig in signals):
        yield False
        return

    received: list[int] = []

    def stop(signum: int, frame) -> None:
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        received.append(signum)
        raise Interrupted(signum)

    stop.stops = True  # marks the handler of an open block
    with handling(signals, stop):
        yield True
        if received:  # raised where Python drops exceptions (a __del__, an at-fork callback)
            raise Interrupted(received[0])


def worker_signals() -> None:
    """In a worker process (a pool's initializer, as `worker_pool` sets it): Ctrl-C ignored,
    since it reaches the whole process group and the parent alone answers it (and ends the
    workers), and SIGTERM's default action, so a pool's ``terminate()`` ends the worker. A
    worker forked inside `stop_on_signals` would otherwise inherit its handler and raise
    `Interrupted` wherever SIGTERM found it, even holding the pool's queue lock, leaving the
    other workers and the parent waiting (seen once in a bank build). A worker may still die
    holding that lock (a SIGTERM to the process group), so the parent never waits on it:
    see `end_pool`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _mask(signal.SIG_UNBLOCK)  # blocked by `worker_pool` from the fork: a SIGTERM ends it now
    if os.environ.get(HOLD_QUEUE_FOR_TESTS):
        _hold_queue_for_tests(Path(os.environ[HOLD_QUEUE_FOR_TESTS]))


@contextmanager
def worker_pool(
    context: BaseContext, workers: int, *, finish: bool = True, **options
) -> Iterator[Pool]:
    """``context.Pool(workers, initializer=worker_signals, **options)`` for a block: when the
    block ends normally the workers are told to finish (``close``) and awaited, so no signal is
    needed; when it raises (an error, `Interrupted`), or always with ``finish=False`` (work
    whose rest is not needed), they are ended by `end_pool`. Leaving ``with Pool(...)``
    terminates them in both cases, and a SIGTERM that reaches a worker still starting (its
    work done by the others) is lost: Python clears signals caught between ``fork`` and its
    own re-initialisation in the child, which then waits for ever, and so does the pool's
    ``join`` (a CI run hung so). The stop signals wait while the workers are forked (`_mask`);
    an error then ends those started so far."""
    if "initializer" not in options:
        options["initializer"] = worker_signals
    before = set(multiprocessing.active_children())
    mask = _mask(signal.SIG_BLOCK)
    try:
        pool = context.Pool(workers, **options)
    except BaseException:
        _kill([p for p in multiprocessing.active_children() if p not in before], wait=True)
        _mask(signal.SIG_SETMASK, mask)
        raise
    try:
        _mask(signal.SIG_SETMASK, mask)  # a stop signal that came meanwhile is answered here
        yield pool
        if finish:
            pool.close()
            pool.join()
    except BaseException:
        end_pool(pool)
        raise
    if not finish:
        end_pool(pool)


END_WITHIN = 30.0  # seconds `end_pool` goes on killing workers the pool starts anew


def end_pool(pool: Pool) -> None:
    """End `pool` now, its work abandoned, without waiting on any lock its workers share.

    ``Pool.terminate()`` first takes the lock of the pool's task queue, which a worker holds
    while it waits for a task; a worker that died there (a SIGTERM to the process group, whose
    default action the workers take) never gives it back, so ``terminate()`` waited for ever,
    its pool starting new workers that waited on it too (about 1 in 8 SIGTERMs to `curi gap`'s
    group on a loaded machine). So ``terminate()`` runs in a thread of its own, while this one
    kills (SIGKILL: no signal handler, nothing a process still starting can lose) every worker
    of the pool until the pool has stopped starting new ones, then waits a moment for
    ``terminate()`` and returns even if it waits on a dead worker's lock. The workers hold
    nothing the parent relies on: their results reach it only through the queue it reads."""
    ender = threading.Thread(target=_terminate, args=(pool,), name="end_pool", daemon=True)
    ender.start()
    deadline = time.monotonic() + END_WITHIN
    while True:
        alive = [p for p in list(pool._pool) if p.exitcode is None]
        _kill(alive, wait=False)
        if not alive and not pool._worker_handler.is_alive():
            break  # every worker dead, and no other will be started
        if time.monotonic() > deadline:
            log.warning("a worker pool still starts workers after %.0f s; leaving it", END_WITHIN)
            break
        time.sleep(0.01)
    ender.join(timeout=1.0)  # returns at once unless a dead worker holds the queue's lock


def _terminate(pool: Pool) -> None:
    """``pool.terminate()`` in `end_pool`'s thread: an error there is logged, not printed by
    the thread's excepthook (the workers are killed regardless)."""
    try:
        pool.terminate()
    except Exception as e:  # noqa: BLE001 - a thread's error would be a traceback on stderr
        log.debug("terminating a worker pool: %r", e)


STOPS = (signal.SIGINT, signal.SIGTERM)


def _mask(how: int, signals: Iterable[int] = STOPS) -> set[int]:
    """``signal.pthread_sigmask(how, signals)`` where there is one (POSIX); returns the
    thread's mask before. While `worker_pool` forks its workers, the stop signals wait
    (blocked) instead of running `stop_on_signals`' handler inside ``os.fork``'s callbacks,
    where Python drops its exception (a stop was lost so: the command ran on, ignoring
    signals); the workers, and the pool's threads, which would fork new ones, start with them
    blocked, and `worker_signals` unblocks them once their actions are set, so a SIGTERM that
    reached a worker still starting ends it instead of being lost."""
    if not hasattr(signal, "pthread_sigmask"):
        return set()
    return signal.pthread_sigmask(how, signals)


def _kill(processes: Iterable[BaseProcess], *, wait: bool) -> None:
    """SIGKILL `processes` (children of this process), and with `wait` reap them."""
    processes = list(processes)
    for p in processes:
        p.kill()
    if wait:
        for p in processes:
            p.join()


# --- a test hook -------------------------------------------------------------------------------
HOLD_QUEUE_FOR_TESTS = "CURI_TEST_HOLD_POOL_QUEUE"
"""Tests only: with this variable naming a folder F, each pool worker (in `worker_signals`)
starts a thread that, once ``F/hold`` exists, takes the lock of the pool's task queue, writes
``F/held`` and keeps the lock until the worker dies. The state `end_pool` must survive, made
at a known moment instead of 1 time in 8."""


def _hold_queue_for_tests(folder: Path) -> None:
    """Start the thread `HOLD_QUEUE_FOR_TESTS` describes in this pool worker; the task queue is
    the ``inqueue`` argument of ``multiprocessing.pool.worker``, a caller of the initializer."""
    frame = sys._getframe(1)
    while frame is not None and "inqueue" not in frame.f_locals:
        frame = frame.f_back
    if frame is None:  # not a multiprocessing.pool worker
        return
    lock = frame.f_locals["inqueue"]._rlock

    def hold() -> None:
        from curi.atomic import write_text

        while not (folder / "hold").exists():
            time.sleep(0.02)
        lock.acquire()
        write_text(folder / "held", str(os.getpid()))
        threading.Event().wait()  # until the worker dies, the lock held

    threading.Thread(target=hold, name="hold_queue_for_tests", daemon=True).start()

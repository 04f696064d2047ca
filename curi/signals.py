"""Stop signals of long work, handled one way everywhere: `handling` installs a handler for a
block and puts the earlier ones back, `Interrupted` ends the process with the status a shell
gives a process ended by the signal (128 + its number: 130 for SIGINT, 143 for SIGTERM), and
`stop_on_signals` makes Ctrl-C or SIGTERM raise it, so a command can say in one line what it
kept. Training's `curi.models.runtime.StopSignals` asks for a stop through `handling` too."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from multiprocessing.pool import Pool

__all__ = ["Interrupted", "handling", "stop_on_signals", "worker_pool", "worker_signals"]


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
def stop_on_signals(signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """While the block runs, the first of `signals` raises `Interrupted` in the main thread;
    a second one is ignored until the block ends, so it cannot break the clean-up that the
    first one started."""

    def stop(signum: int, frame) -> None:
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    with handling(signals, stop):
        yield


def worker_signals() -> None:
    """In a worker process (a pool's initializer, as `worker_pool` sets it): Ctrl-C ignored,
    since it reaches the whole process group and the parent alone answers it (and ends the
    workers), and SIGTERM's default action, so a pool's ``terminate()`` ends the worker. A
    worker forked inside `stop_on_signals` would otherwise inherit its handler and raise
    `Interrupted` wherever SIGTERM found it, even holding the pool's queue lock, leaving the
    other workers and the parent waiting (seen once in a bank build)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def worker_pool(context: BaseContext, workers: int, **options) -> Iterator[Pool]:
    """``context.Pool(workers, initializer=worker_signals, **options)`` for a block: when the
    block ends normally the workers are told to finish (``close``) and awaited, so no signal is
    needed; when it raises (an error, `Interrupted`), they are ended (``terminate``). Leaving
    ``with Pool(...)`` terminates them in both cases, and a SIGTERM that reaches a worker
    still starting (its work done by the others) is lost: Python clears signals caught between
    ``fork`` and its own re-initialisation in the child, which then waits for ever, and so
    does the pool's ``join`` (a CI run hung so)."""
    if "initializer" not in options:
        options["initializer"] = worker_signals
    pool = context.Pool(workers, **options)
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    else:
        pool.close()
    finally:
        pool.join()

"""curi.signals: a stop signal raises `Interrupted` (exit status 128 + signal) once, a signal
set to be ignored stays ignored, and the earlier handlers come back after the block."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from curi.signals import Interrupted, handling, stop_on_signals


def test_a_signal_in_the_block_raises_interrupted_once_and_the_handlers_come_back():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(Interrupted) as e, stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler ends the sleep at once
    assert isinstance(e.value, SystemExit) and e.value.code == 143
    assert str(e.value) == "stopped by SIGTERM"
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.fixture
def ctrl_c():
    """Python's own Ctrl-C handler, as in a terminal, for the test: a test run started in
    the background inherits SIGINT ignored, which `stop_on_signals` rightly leaves ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("ctrl_c")
def test_a_second_signal_does_not_interrupt_the_clean_up():
    cleaned = []
    with pytest.raises(Interrupted) as e, stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # ignored: the first one is being handled
            time.sleep(0.01)
            cleaned.append(True)
    assert e.value.code == 130 and cleaned == [True]


def test_an_ignored_signal_stays_ignored():
    before = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        with handling([signal.SIGUSR2], lambda *a: pytest.fail("handled")) as previous:
            assert previous == {} and signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGUSR2)
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR2, before)


def _handlers_of_worker(task):
    """A stand-in for a bank build's chunk: (counts, keep, rows) whose counts say whether this
    worker ignores SIGINT and takes SIGTERM's default action."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    ends = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    return np.array([int(ignored), int(ends)]), np.zeros(0, np.int64), None


def test_pool_workers_forked_in_a_stop_block_leave_the_signals_to_the_parent(monkeypatch):
    """A pool's terminate() sends its workers SIGTERM: a worker that inherited
    `stop_on_signals`' handler raised wherever it was (a bank build hung once), and a worker
    still starting when its pool's work was done lost the signal (Python clears signals caught
    before its re-initialisation after fork), so the pool's join waited for ever; `worker_pool`
    closes a pool whose work is done instead. The pools run in a thread here, so that a hang
    fails the test instead of stopping the run."""
    from curi import bank_build

    monkeypatch.setattr(bank_build, "_execute_chunk", _handlers_of_worker)
    out = []
    with stop_on_signals():
        for _ in range(3):  # work that ends at once: workers may still be starting
            job = threading.Thread(
                target=lambda: out.append(
                    bank_build._run_execution(["x"] * 2000, None, 0, 1, 2, False)[0]
                ),
                daemon=True,
            )
            job.start()
            job.join(timeout=120)
            assert not job.is_alive(), "the pool did not end"
    assert len(out) == 3 and all(len(c) == 8 and c.all() for c in out)

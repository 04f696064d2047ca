"""Ctrl-C (SIGINT to the process group, as a terminal sends it) stops `curi train` and
`curi bank` as SIGTERM does (issue 43, item 8): training saves the step reached and says so in
one line; a bank build ends its workers, publishes nothing and says so in one line; the exit
status is 128 + the signal's number, and there is no traceback."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from curi import load_bank
from curi.models.checkpoint import load_checkpoint

CURI = [sys.executable, "-c", "from curi.cli import main; main()"]
ENV = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT's default in the command: a test run started in the background inherits it
    ignored, and a command leaves an ignored signal ignored (as a shell's background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*CURI, *args],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )


def _until(what: str, done, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until `done()`; fails if the command ends first or after `timeout` s (a hang guard)."""
    t0 = time.monotonic()
    while not done():
        assert proc.poll() is None, f"the command ended before {what}: {proc.communicate()}"
        assert time.monotonic() - t0 < timeout, f"no {what}"
        time.sleep(0.02)


def _signal_group(proc: subprocess.Popen, signum: int) -> tuple[str, str]:
    """Send `signum` to the command's process group; its output once it has ended."""
    try:
        os.killpg(proc.pid, signum)
        return proc.communicate(timeout=120)  # a hang guard
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _group_size(pgid: int) -> int:
    """Processes in the group `pgid` (Linux's /proc)."""
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                n += int(fields[2]) == pgid
    return n


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]


def test_ctrl_c_stops_training_at_a_step_with_its_checkpoint(tiny_bank_dir, tmp_path):
    # Before: a 40-line KeyboardInterrupt traceback, exit 1, and the steps since the last
    # periodic checkpoint lost (here: every step, none being due).
    run_dir = tmp_path / "run"
    args = ["train", "bank=tiny", "train=tiny", "progress=false", "pooling=avg"]
    args += ["train.num_workers=2", "train.steps=100000", "train.checkpoint_every=100000"]
    args += ["train.eval_every=100000", f"data_dir={tiny_bank_dir.parent}", f"output_dir={run_dir}"]
    proc = _start(args, tmp_path)
    metrics = run_dir / "metrics.jsonl"
    _until("training step", lambda: '"tag": "train"' in _text(metrics), proc)
    out, err = _signal_group(proc, signal.SIGINT)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]  # 130, as 143 for SIGTERM
    _no_traceback(err)
    reached = load_checkpoint(run_dir / "checkpoints" / "last.pt")[0]["step"]
    path = run_dir / "checkpoints" / f"step_{reached:07d}.pt"
    assert reached >= 1 and path.is_file()
    lines = [line for line in (out + err).splitlines() if "stopped" in line]
    assert len(lines) == 1 and lines[0].endswith(
        f"training stopped by SIGINT at step {reached}; checkpoint {path}; "
        "run the same command again to resume"
    ), out + err


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_stopped_bank_build_publishes_nothing_and_says_so(tiny_bank_dir, tmp_path, signum):
    # Before: SIGINT printed a 55-line traceback from the build's pool (exit 1), SIGTERM ended
    # it silently (exit -15). The bank already there (force=true rebuilds it) stays as it was.
    data = tmp_path / "data"
    shutil.copytree(tiny_bank_dir, data / "tiny")
    manifest = (data / "tiny" / "manifest.json").read_bytes()
    args = ["bank", "bank=tiny", "bank.workers=2", f"data_dir={data}", "force=true"]
    proc = _start([*args, "progress=false"], tmp_path)
    _until("worker started", lambda: _group_size(proc.pid) >= 2, proc)  # inside the build
    out, err = _signal_group(proc, signum)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err[-3000:]
    _no_traceback(err)
    lines = [line for line in (out + err).splitlines() if "stopped" in line]
    assert len(lines) == 1 and lines[0].endswith(
        f"bank build stopped by {name}; nothing published at {data / 'tiny'} (a bank already "
        "there is unchanged); the same command builds it"
    ), out + err
    assert (data / "tiny" / "manifest.json").read_bytes() == manifest
    assert sorted(p.name for p in data.iterdir()) == [".tiny.lock", "tiny"]  # no temporary
    assert len(load_bank(data / "tiny")) > 0

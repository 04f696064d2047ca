"""Multi-process training (CPU, gloo): `curi train` as two torchrun "nodes" on this machine,
checked against the contract of docs/cluster.md (every process ends with the weights of rank
0's checkpoint; a run is deterministic for a given world size; the summary records the world
size and episodes per step), and the stop on SIGUSR1 / SIGTERM that lets a preempted SLURM job
resume from its checkpoint."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import start_ddp_ranks

from curi.errors import ConfigError
from curi.models import load_checkpoint, start_runtime
from curi.models.checkpoint import state_digest
from curi.models.runtime import StopSignals, TrainingStopped

CURI = [sys.executable, "-c", "from curi.cli import main; main()"]  # the `curi` command
TRAIN = [  # a few steps of the tiny schedule, a checkpoint at step 2 and at the end
    "train",
    "bank=tiny",
    "train=tiny",
    "progress=false",
    "train.steps=4",
    "train.eval_every=4",
    "train.checkpoint_every=2",
    "train.val_episodes=4",
]
ENV = os.environ | {"OMP_NUM_THREADS": "1"}  # one torch thread a process: 2 cores, 4 processes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _summary(stdout: str) -> dict:
    """The summary JSON `curi train` prints last (log lines come before it)."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    return json.loads("\n".join(lines[start:]))


def _two_nodes(bank_dir: Path, run_dir: Path, *, torchrun: bool = True) -> list[dict]:
    """`curi train` as two processes; each one's summary. `torchrun`: under torchrun as two
    one-process nodes meeting at a c10d rendezvous (the rendezvous, not the order of start,
    decides the ranks); else started with torchrun's environment by hand (static ranks)."""
    port, train = _free_port(), [*TRAIN, f"data_dir={bank_dir.parent}", f"output_dir={run_dir}"]
    launch = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=localhost:{port}",
        f"--rdzv_id=curi-test-{port}",
        "--no-python",
    ]
    static = {"WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    static["MASTER_PORT"] = str(port)
    nodes = [
        subprocess.Popen(
            [*launch, *CURI, *train] if torchrun else [*CURI, *train],
            env=ENV if torchrun else ENV | static | {"RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        outs = [p.communicate(timeout=600) for p in nodes]
    finally:
        for p in nodes:  # a node that failed leaves the other waiting at the rendezvous
            p.kill()
    for p, (_, err) in zip(nodes, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    return [_summary(out) for out, _ in outs]


@pytest.fixture(scope="module")
def two_node_run(tiny_bank_dir, tmp_path_factory) -> tuple[Path, list[dict]]:
    run_dir = tmp_path_factory.mktemp("ddp") / "run"
    return run_dir, _two_nodes(tiny_bank_dir, run_dir)


def test_two_torchrun_nodes_end_with_rank_0s_weights_and_record_the_world(two_node_run):
    run_dir, summaries = two_node_run
    last, _ = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    digest = state_digest(last["model"])
    for s in summaries:  # every process holds the weights rank 0 saved
        assert s["weights_sha256"] == digest
        assert s["world_size"] == 2 and s["steps"] == 4
        assert s["episodes_per_step"] == 2 * s["batch_size"] == 8  # batch size is per process
    assert last["world_size"] == 2 and last["step"] == 4
    assert digest != state_digest(
        load_checkpoint(run_dir / "checkpoints" / "step_0000002.pt")[0]["model"]
    )  # the weights moved: equal digests are not vacuous
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["world_size"] == 2 and saved["episodes_per_step"] == 8
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = [(r["tag"], r["step"]) for r in rows]
    assert len(keys) == len(set(keys)) and ("train", 4) in keys  # one writer: rank 0


@pytest.mark.slow  # run and reported in docs/benchmarks.md (CI time)
def test_two_process_runs_with_one_seed_give_the_same_checkpoints(
    two_node_run, tiny_bank_dir, tmp_path
):
    # The same world size and seed, the ranks given by hand this time (torchrun's static form;
    # cheaper than a second rendezvous): byte-identical checkpoints.
    run_dir, _ = two_node_run
    again = tmp_path / "again"
    assert _two_nodes(tiny_bank_dir, again, torchrun=False)[1]["world_size"] == 2
    for name in ("best.pt", "last.pt", "step_0000002.pt"):
        a, _ = load_checkpoint(run_dir / "checkpoints" / name)
        b, _ = load_checkpoint(again / "checkpoints" / name)
        assert a["step"] == b["step"]
        assert state_digest(a["model"]) == state_digest(b["model"]), name


# --- stopping on a signal, and resuming --------------------------------------------------------
def _wait_for_training(run_dir: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until the run has logged a training step (its signal handlers are in place)."""
    metrics, t0 = run_dir / "metrics.jsonl", time.monotonic()
    while not (metrics.is_file() and '"tag": "train"' in metrics.read_text()):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() - t0 < timeout, "no training step logged"
        time.sleep(0.05)


def test_sigusr1_saves_the_step_reached_and_the_same_command_resumes(tiny_bank_dir, tmp_path):
    run_dir = tmp_path / "run"
    steps = 150  # seconds of steps (avg pooling): the signal comes long before the end
    cmd = [
        *CURI,
        *TRAIN,
        "pooling=avg",
        f"train.steps={steps}",
        "train.checkpoint_every=1000",  # only the stop saves before the end
        "train.eval_every=1000",
        f"data_dir={tiny_bank_dir.parent}",
        f"output_dir={run_dir}",
    ]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for_training(run_dir, proc)
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGUSR1, err[-3000:]
    ckpt, _ = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    reached = ckpt["step"]
    assert 1 <= reached < steps
    assert (run_dir / "checkpoints" / f"step_{reached:07d}.pt").is_file()
    assert f"training stopped by SIGUSR1 at step {reached}" in out + err
    assert not (run_dir / "summary.json").exists()  # a summary means a finished run

    again = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"at step {reached}" in again.stdout + again.stderr  # "resumed from ... at step N"
    assert _summary(again.stdout)["steps"] == steps
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["tag"] == "train"] == list(range(1, steps + 1))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1], ids=["TERM", "USR1"])
def test_a_stop_signal_to_the_whole_process_group_saves_the_step(tiny_bank_dir, tmp_path, signum):
    # As `timeout` and schedulers do: the DataLoader workers get the signal too. They ignore
    # it (torch's own SIGTERM handler ended them, and the run failed without its checkpoint).
    run_dir = tmp_path / "run"
    args = [
        *CURI,
        *TRAIN,
        "pooling=avg",
        "train.num_workers=2",
        "train.checkpoint_every=100000",  # only the stop saves
        "train.eval_every=100000",
        f"data_dir={tiny_bank_dir.parent}",
        f"output_dir={run_dir}",
    ]
    proc = subprocess.Popen(
        [*args, "train.steps=100000"],  # never reached: the signal comes mid-run
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for_training(run_dir, proc, timeout=300)
        os.killpg(proc.pid, signum)
        _, err = proc.communicate(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum, err[-3000:]
    reached = load_checkpoint(run_dir / "checkpoints" / "last.pt")[0]["step"]
    assert (run_dir / "checkpoints" / f"step_{reached:07d}.pt").is_file()
    more = [*args, f"train.steps={reached + 2}"]  # two steps more, resumed
    again = subprocess.run(more, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"at step {reached}" in again.stdout + again.stderr  # "resumed from ... at step N"
    assert _summary(again.stdout)["steps"] == reached + 2


_STOP_CHILD = """
import sys, torch
torch.set_num_threads(1)
from curi import load_bank
from curi.models import RunConfig, TrainSettings
from curi.models.train import train
bank = load_bank(sys.argv[1])
s = TrainSettings(steps=100000, batch_size=2, train_episodes=64, log_every=1, eval_every=10**6,
                  checkpoint_every=10**6, val_episodes=2, num_workers=0)
run = RunConfig(bank=bank.config, pooling={"name": "avg"}, train=s, device="cpu")
train(run, run_dir=sys.argv[2], bank=bank, progress=False)
"""


@pytest.mark.slow  # run and reported in docs/benchmarks.md (CI time)
def test_a_signal_to_one_ddp_process_stops_all_at_one_step(tiny_bank_dir, tmp_path):
    # SIGTERM reaches rank 1 only: the processes agree on the step to stop after (rank 0 saves
    # it), and none waits forever at a collective.
    run_dir = tmp_path / "run"
    procs = start_ddp_ranks(_STOP_CHILD, str(tiny_bank_dir), str(run_dir), cwd=tmp_path)
    try:
        _wait_for_training(run_dir, procs[0])
        procs[1].send_signal(signal.SIGTERM)
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 128 + signal.SIGTERM, err[-3000:]
    ckpt, _ = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert ckpt["world_size"] == 2 and 1 <= ckpt["step"] < 100000
    for _, err in outs:  # both stopped after the step that was saved
        assert f"training stopped by SIGTERM at step {ckpt['step']}" in err


def test_stop_signals_restore_handlers_and_call_the_earlier_one(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    rt = start_runtime("cpu")
    seen = []
    before = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        mine = signal.getsignal(signal.SIGUSR1)
        with StopSignals(rt) as stop:
            assert stop.should_stop() is None
            os.kill(os.getpid(), signal.SIGUSR1)
            assert stop.should_stop() == signal.SIGUSR1 and not seen  # noted, not acted on
        assert signal.getsignal(signal.SIGUSR1) is mine
        stop.forward(signal.SIGUSR1)  # after the checkpoint: the launcher's handler acts
        assert seen == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, before)
    stopped = TrainingStopped(signal.SIGTERM, 7, "x/step_0000007.pt")
    assert isinstance(stopped, SystemExit) and stopped.code == 143
    assert "stopped by SIGTERM at step 7; checkpoint x/step_0000007.pt" in str(stopped)


def test_world_size_without_the_rest_of_torchruns_environment_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    for key in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError, match=r"WORLD_SIZE=2 but MASTER_ADDR, MASTER_PORT not set"):
        start_runtime("cpu")
    monkeypatch.setenv("RANK", "one")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    with pytest.raises(ConfigError, match=r"RANK='one' is not an integer"):
        start_runtime("cpu")
    monkeypatch.setenv("WORLD_SIZE", "-1")  # was taken as one process
    with pytest.raises(ConfigError, match=r"WORLD_SIZE=-1 must be at least 1"):
        start_runtime("cpu")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "5"}, "RANK=5 is outside 0..1"),  # waited 30 minutes at the rendezvous
        ({"MASTER_PORT": "abc"}, "MASTER_PORT='abc' is not an integer"),  # a raw ValueError
        ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is outside 1..65535"),
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK=-1 is outside 0..1"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1"),  # trained in one process
    ],
    ids=["rank", "port", "port-range", "local-rank", "world"],
)
def test_a_bad_torchrun_environment_is_one_line_before_the_bank(tmp_path, env, message):
    torchrun = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    torchrun["MASTER_PORT"] = str(_free_port())
    r = subprocess.run(
        [*CURI, *TRAIN, "device=cpu", f"data_dir={tmp_path / 'none'}", f"output_dir={tmp_path}"],
        env=ENV | torchrun | env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-3000:]
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"curi train: error: {message}")
    assert not (tmp_path / "none").exists()  # checked before the bank is looked for

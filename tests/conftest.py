"""Shared fixtures: one tiny bank per test session (built in a few seconds), and one wheel
of curi per test run (`wheel`)."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the reference interpreter lives beside the tests

from curi import BankConfig, build_bank, load_bank  # noqa: E402

TINY = BankConfig(name="tiny", num_scenes=20_000, num_draws=40_000, seed=0, workers=1)


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """Each test starts with the root logger as the one before it found it: a command run in
    this process configures logging (Hydra: root at INFO, a handler on the stdout pytest
    captured then), which would change what later tests' `caplog` sees and write to a closed
    stream."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


@pytest.fixture(scope="session")
def tiny_bank_dir(tmp_path_factory) -> Path:
    return build_bank(TINY, tmp_path_factory.mktemp("data"), progress=False)


@pytest.fixture(scope="session")
def tiny_bank(tiny_bank_dir):
    return load_bank(tiny_bank_dir)


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel of curi built from the checkout's files (tracked, and untracked ones git does
    not ignore, copied first so no stale ``build/`` folder leaks in), once per test run: the
    pytest-xdist workers share it through their run's common folder, under a lock (the first
    builds it, the others wait and reuse it). `tests/test_install.py` installs it,
    `tests/test_expected.py` unpacks it."""
    base = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1 ... under pytest-xdist
    root = base.parent if worker else base  # the run's own folder, never an earlier run's
    dist = root / "wheel"
    with open(root / "wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = sorted(dist.glob("curi-*.whl"))
        if not built:
            source = _source_copy(root / "wheel-source")
            shutil.rmtree(dist / "new", ignore_errors=True)  # a failed worker's attempt
            args = ["wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist / "new")]
            r = subprocess.run(
                [sys.executable, "-m", "pip", *args, str(source)],
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            (new,) = (dist / "new").glob("curi-*.whl")
            built = [new.rename(dist / new.name)]  # whole, or not there for the next worker
    return built[0]


def _source_copy(dest: Path) -> Path:
    """The checkout's files (tracked, and untracked ones git does not ignore) copied to `dest`
    (made anew)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    shutil.rmtree(dest, ignore_errors=True)
    for rel in filter(None, listed):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


def run_curi(*args: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run the `curi` command as a user would (a fresh process), capturing its output. The
    timeout is a guard against a hang, far above what a loaded 2-core machine needs (the
    slowest command of the tests takes about a minute there); a test of a command that must
    end at once (a FIFO refused, not read) gives its own, lower one."""
    return subprocess.run(
        [sys.executable, "-c", "from curi.cli import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def unwritable(tmp_path) -> Path:
    """A folder this process cannot write in: its mode, and for root, whom modes do not stop,
    the immutable attribute (skipped where neither works)."""
    folder = tmp_path / "unwritable"
    folder.mkdir()
    folder.chmod(0o555)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    if os.access(folder, os.W_OK):
        folder.chmod(0o755)
        pytest.skip("no way to make a folder unwritable for this user here")
    yield folder
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
    folder.chmod(0o755)


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for a test module (`pytestmark = usefixtures(...)`): tiny
    models run faster so, and the CI machine's cores are shared."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def start_ddp_ranks(code: str, *args: str, cwd: Path, world: int = 2) -> list[subprocess.Popen]:
    """Start `world` processes running `code` (``python -c``) as the ranks of one DDP run on
    this machine, with torchrun's environment, a free port for the gloo rendezvous and one
    torch thread each (2 cores, several processes). The caller communicates and kills them."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = []
    for rank in range(world):
        env = os.environ | {
            "OMP_NUM_THREADS": "1",
            "WORLD_SIZE": str(world),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code, *args],
                env=env,
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


README = Path(__file__).resolve().parents[1] / "README.md"


def readme_section(title: str) -> str:
    """The text of the README's section `title` (a ``## `` heading), up to the next one."""
    text = README.read_text(encoding="utf-8")
    assert text.count(title) == 1, f"README.md has no single {title!r} section"
    return text.split(title, 1)[1].split("\n## ", 1)[0]


def run_readme_scores(code: str, data_dir: Path, cwd: Path) -> tuple[str, dict]:
    """Run a README block that ends with a `scores` dict in a fresh Python process, as a user
    would, with `data_dir` as the curi data folder; returns its stdout and `scores`."""
    code += "\nimport json\nprint('SCORES=' + json.dumps(scores))\n"
    env = {**os.environ, "CURI_DATA_DIR": str(data_dir)}
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("SCORES="))
    return r.stdout, json.loads(line.removeprefix("SCORES="))

"""curi's one numba setting and its cache (`curi.kernel`): every kernel module listed, the cache
keyed on all of them (an edit of a called module never leaves old code in use), damaged or
strange cache files ignored and rebuilt, no writable folder a logged line, and the kernels
equal with the JIT disabled."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from curi import kernel

ROOT = Path(__file__).resolve().parents[1]

# A package of two kernel modules, `a.g` calling `b.f`, registered with curi.kernel before it is
# imported; the child prints g()'s value and whether numba compiled it or read it from the cache.
_CHILD = """
import sys
from pathlib import Path
import curi.kernel as K
K.KERNEL_MODULES = K.KERNEL_MODULES + ("kpkg/a.py", "kpkg/b.py")
if len(sys.argv) > 1:
    K._candidates = lambda: [Path(sys.argv[1])]
from kpkg.a import g
print(g(), "hit" if g.stats.cache_hits else "compiled")
"""
_B = "from curi.kernel import kernel\n\n\n@kernel\ndef f():\n    return {value}\n"
_A = "from curi.kernel import kernel\nfrom kpkg.b import f\n\n\n@kernel\ndef g():\n"
_A += "    return f() + 1\n"


def _package(tmp_path: Path, value: int) -> Path:
    pkg = tmp_path / "src" / "kpkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(_A)
    (pkg / "b.py").write_text(_B.format(value=value))
    return pkg


def _child(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "src"),
        "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,  # a hang guard (a FIFO read would block for ever): ~5 s when quiet
    )


def _value(r: subprocess.CompletedProcess) -> tuple[int, str]:
    assert r.returncode == 0, r.stderr[-3000:]
    value, how = r.stdout.split()
    return int(value), how


def test_every_module_with_kernels_is_listed():
    found = set()
    for folder in ("curi", "oracles", "models", "renderers"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            decorated = any(
                isinstance(d, ast.Name) and d.id == "kernel"
                for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef)
                for d in node.decorator_list
            )
            if decorated:
                rel = path.relative_to(ROOT).as_posix()
                found.add(rel if rel.startswith("curi/") else f"curi/{rel}")
            src = path.read_text()
            if path.name != "kernel.py":
                assert "numba.njit" not in src and "numba.jit" not in src, path  # one setting
    assert found == set(kernel.KERNEL_MODULES)


def test_an_edit_of_a_called_module_is_compiled_again_and_a_second_run_compiles_nothing(tmp_path):
    pkg = _package(tmp_path, 1)
    assert _value(_child(tmp_path)) == (2, "compiled")
    assert _value(_child(tmp_path)) == (2, "hit")
    (pkg / "b.py").write_text(_B.format(value=10))  # a.py, whose kernel calls f, is unchanged
    assert _value(_child(tmp_path)) == (11, "compiled")
    assert _value(_child(tmp_path)) == (11, "hit")


def _damage_all(cache: Path, how: str) -> int:
    files = [p for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc")]
    for p in files:
        data = p.read_bytes()
        p.unlink()
        if how == "empty":
            p.write_bytes(b"")
        elif how == "truncated":
            p.write_bytes(data[: len(data) // 2])
        elif how == "junk":
            p.write_bytes(b"\x80\x04junk" * 50)
        elif how == "altered":  # the digest no longer matches: never unpickled
            p.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        elif how == "folder":
            p.mkdir()
        elif how == "fifo":
            os.mkfifo(p)
    return len(files)


@pytest.mark.parametrize("how", ["empty", "truncated", "junk", "altered", "folder", "fifo"])
def test_a_damaged_cache_file_is_ignored_and_rebuilt_never_read_or_waited_on(tmp_path, how):
    _package(tmp_path, 1)
    assert _value(_child(tmp_path)) == (2, "compiled")
    assert _damage_all(tmp_path / "cache", how) >= 4  # f and g: an index and a data file each
    assert _value(_child(tmp_path)) == (2, "compiled")
    if how != "folder":  # a folder in the way cannot be replaced: compiled every time
        assert _value(_child(tmp_path)) == (2, "hit")


def test_no_writable_cache_folder_is_one_logged_line_not_a_failure(tmp_path):
    _package(tmp_path, 1)
    r = _child(tmp_path, "/proc/curi-no-such-folder")
    assert _value(r) == (2, "compiled")
    lines = [x for x in r.stderr.splitlines() if "numba's cache" in x]
    assert len(lines) == 1 and "NUMBA_CACHE_DIR" in lines[0]


def test_the_digest_covers_every_kernel_module():
    digest = kernel.sources_digest()
    assert (
        len(digest) == 64 and kernel.cache_dir() is None or digest[:16] in str(kernel.cache_dir())
    )
    for rel in kernel.KERNEL_MODULES:
        assert kernel._module_path(rel).is_file()


_EPISODES = """
import hashlib, sys, warnings
import numpy as np
from curi.bank import load_bank
from curi.episodes import EpisodeSampler
from curi.splits import make_split
warnings.simplefilter("ignore")  # uint64 arithmetic wraps in numpy scalars as it does compiled
bank = load_bank(sys.argv[1])
h = hashlib.sha256()
for neg in ("hard", "easy"):
    s = EpisodeSampler(bank, make_split(bank, "concept_iid"), "test", neg, seed=0)
    x = s.stacked(0, 6)
    for k in sorted(x):
        h.update(k.encode() + np.ascontiguousarray(x[k]).tobytes())
print(h.hexdigest())
"""


def test_the_kernels_draw_the_same_episodes_with_the_jit_disabled(tiny_bank_dir, tmp_path):
    out = []
    for disable in ("0", "1"):
        r = subprocess.run(
            [sys.executable, "-c", _EPISODES, str(tiny_bank_dir)],
            capture_output=True,
            text=True,
            env={**os.environ, "NUMBA_DISABLE_JIT": disable},
            cwd=tmp_path,
            timeout=600,  # a hang guard: ~20 s when quiet (a cold cache compiles)
        )
        assert r.returncode == 0, r.stderr[-3000:]
        out.append(r.stdout.strip())
    assert out[0] == out[1] and len(out[0]) == 64


def test_kernel_source_is_plain_python_when_the_jit_is_disabled():
    code = textwrap.dedent(
        """
        import curi.pcg as p
        print(type(p.next64).__name__)
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "NUMBA_DISABLE_JIT": "1"},
        timeout=600,  # a hang guard: ~2 s when quiet
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "function"


_PARENT = """
import sys
from curi.bank import load_bank
from curi.oracles.gap import compositionality_gap
from curi import posterior_loops
from curi.oracles import loops
bank = load_bank(sys.argv[1])
compositionality_gap(bank, ["concept_iid"], ["hard", "easy"], episodes=40, workers=2)
kernels = [loops.random_oracle_draws, posterior_loops.consistent_words, loops.bit_scores]
print(" ".join(str(len(k.signatures)) for k in kernels))
"""


def test_the_gap_loads_the_kernels_in_its_parent_before_the_workers_fork(tiny_bank_dir, tmp_path):
    r = subprocess.run(
        [sys.executable, "-c", _PARENT, str(tiny_bank_dir)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,  # a hang guard: ~20 s when quiet
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert all(int(n) >= 1 for n in r.stdout.split()), r.stdout  # compiled or loaded here

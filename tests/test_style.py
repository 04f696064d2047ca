"""The code's one layout and its lint rules (pyproject's [tool.ruff]): `ruff format` and `ruff
check` find nothing to change, so no file drifts from the formatter (`# fmt: skip` only where a
table's alignment needs it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("args", [["format", "--check"], ["check"]], ids=["format", "lint"])
def test_ruff_finds_nothing(args):
    pytest.importorskip("ruff")
    out = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

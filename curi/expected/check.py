"""`curi check`: whether this installation makes the benchmark's banks and episodes, measured
against the numbers stored with the package (`curi.expected`): the ``tiny`` bank built in a
temporary folder (seconds), optionally the ``default`` bank (about a minute on 2 cores)."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from curi.atomic import remove
from curi.errors import ConfigError
from curi.expected.compare import compare_record
from curi.expected.measure import CASES, PATHS, SEEDS, SPLIT, bank_record

__all__ = ["BANKS", "CheckResult", "check_installation", "expected_record", "summary"]

PACKAGE = "curi.expected"
BANKS = ("tiny", "default")  # the bank presets with stored numbers (``<name>.json``)
_SHOWN = 3  # moved items the one line names; the rest are counted


def expected_record(name: str) -> dict:
    """The stored numbers ``<name>.json`` of the installed package (a bank of `BANKS`, or
    ``gap_tiny``).

    Raises:
        ConfigError: the file is missing from the installation or not JSON.
    """
    path = files(PACKAGE) / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"curi's stored expected numbers {name}.json are missing or damaged in the "
            f"installed package ({e}); reinstall curi"
        ) from None


@dataclass(frozen=True)
class CheckResult:
    """What `check_installation` found: ``moved`` (one phrase per thing that moved, empty
    when the installation makes the stored numbers), the banks checked, and the time."""

    moved: list[str]
    banks: tuple[str, ...]
    seconds: float = field(default=0.0, compare=False)

    @property
    def ok(self) -> bool:
        return not self.moved


def summary(result: CheckResult) -> str:
    """`result` in one line: what was compared and that it is equal, or the first things that
    moved (and how many more)."""
    banks = " and ".join(f"{b} bank" for b in result.banks)
    streams = len(CASES) * len(SEEDS) * len(result.banks)
    if result.ok:
        return (
            f"equal: this installation makes the benchmark's episodes ({banks}: files, "
            f"{SPLIT} split, {streams} episode streams x {len(PATHS)} paths, "
            f"{result.seconds:.0f} s)"
        )
    more = len(result.moved) - _SHOWN
    return "moved: " + "; ".join(result.moved[:_SHOWN]) + (f"; and {more} more" if more > 0 else "")


def check_installation(
    banks: Iterable[str] = ("tiny",),
    *,
    expected: Mapping[str, dict] | None = None,
    progress: bool = False,
) -> CheckResult:
    """Build each bank of `banks` (presets of `BANKS`) in a temporary folder, measure it and
    its episodes (`curi.expected.measure.bank_record`) and compare them with the stored
    numbers (`expected`: bank -> record; None: the installed package's files).

    Raises:
        ConfigError: a bank without stored numbers, or stored numbers missing or damaged.
    """
    from curi.bank import build_bank, load_bank

    banks = tuple(banks)
    for name in banks:
        if name not in BANKS:
            raise ConfigError(f"no stored numbers for the bank {name!r}; known: {', '.join(BANKS)}")
    want = {b: (expected or {}).get(b) or expected_record(b) for b in banks}
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="curi-check-"))
    moved = []
    try:
        for name in banks:
            bank = load_bank(build_bank(name, tmp / "data", progress=progress), verify=False)
            scratch = tmp / f"{name}-episodes"
            scratch.mkdir()
            moved += compare_record(want[name], bank_record(bank, scratch), bank=name)
    finally:
        remove(tmp, root=tmp.parent)
    return CheckResult(moved, banks, time.perf_counter() - t0)

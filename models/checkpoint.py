"""Checkpoints and metric logs of training runs: atomic saves, loading a file or a run
directory's best checkpoint, and scalars to JSON lines and TensorBoard."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import torch

from curi.atomic import atomic_path
from curi.errors import ConfigError

__all__ = [
    "CHECKPOINT_FORMAT",
    "MetricLogger",
    "link_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
]

log = logging.getLogger(__name__)
CHECKPOINT_FORMAT = 1


def load_checkpoint(path: str | Path) -> tuple[dict, Path]:
    """Load a checkpoint file, or a run directory's ``checkpoints/best.pt`` (else ``last.pt``).

    Returns:
        ``(payload, file)``, tensors on the CPU.

    Raises:
        ConfigError: nothing there, or not a checkpoint of this format.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        for name in ("best.pt", "last.pt"):
            if (p / "checkpoints" / name).is_file():
                p = p / "checkpoints" / name
                break
    if not p.is_file():
        raise ConfigError(f"checkpoint not found at {path}; give a .pt file or a run directory")
    try:
        payload = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means an unusable file
        raise ConfigError(f"cannot read checkpoint {p}: {type(e).__name__}: {e}") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{p} is not a curi checkpoint (format {CHECKPOINT_FORMAT})")
    return payload, p


def save_checkpoint(payload: dict, path: Path) -> None:
    """torch.save to a temporary name, then rename into place (never a half-written file)."""
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def link_checkpoint(src: Path, dst: Path) -> None:
    """Make `dst` the same file as `src` (hard link, else a copy), atomically."""
    with atomic_path(dst) as tmp:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)


class MetricLogger:
    """Scalars to ``metrics.jsonl`` (always; one JSON object per line) and to TensorBoard under
    ``tb/`` when `torch.utils.tensorboard` imports. Disabled on non-zero DDP ranks."""

    def __init__(self, run_dir: Path, *, enabled: bool = True) -> None:
        self.enabled, self.tb, self._file = enabled, None, None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        self._file = (run_dir / "metrics.jsonl").open("a")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tb"))
        except ImportError:
            log.info("tensorboard is not installed: metrics go to metrics.jsonl only")

    def log(self, step: int, tag: str, values: Mapping[str, float | None]) -> None:
        """Record `values` under `tag` (``train``, ``val``) at `step`."""
        if not self.enabled:
            return
        clean = {k: v for k, v in values.items() if isinstance(v, (int, float))}
        self._file.write(json.dumps({"step": step, "tag": tag, **clean}) + "\n")
        self._file.flush()
        if self.tb is not None:
            for k, v in clean.items():
                self.tb.add_scalar(f"{tag}/{k}", v, step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self.tb is not None:
            self.tb.close()

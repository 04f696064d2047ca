"""Checkpoints and metric logs of training runs: atomic saves, loading a file or a run
directory's best checkpoint, a digest of a model's weights, and scalars to JSON lines and
TensorBoard."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from curi.atomic import atomic_path, remove, write_text
from curi.errors import ConfigError

__all__ = [
    "CHECKPOINT_FORMAT",
    "MetricLogger",
    "check_checkpoint_bank",
    "link_checkpoint",
    "load_checkpoint",
    "load_weights",
    "checkpoint_file",
    "save_checkpoint",
    "state_digest",
]

if TYPE_CHECKING:  # torch is imported where a checkpoint is read or written
    import torch

log = logging.getLogger(__name__)
CHECKPOINT_FORMAT = 1
EVENTS = "events.out.tfevents."  # how TensorBoard names the event files it writes


def load_checkpoint(path: str | Path) -> tuple[dict, Path]:
    """Load a checkpoint file, or a run directory's ``checkpoints/best.pt`` (else ``last.pt``).

    Returns:
        ``(payload, file)``, tensors on the CPU.

    Raises:
        ConfigError: nothing there, not a checkpoint of this format, or weights that are not
            those saved (digest) or not finite.
    """
    p = checkpoint_file(path)
    payload = _safe_load(p)
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{p} is not a curi checkpoint (format {CHECKPOINT_FORMAT})")
    _check_weights(payload, p)
    return payload, p


def checkpoint_file(path: str | Path, *, last: bool = False) -> Path:
    """The checkpoint file `path` names: a file, or a run directory's ``checkpoints/best.pt``
    (else ``last.pt``; with `last`, ``last.pt`` only). Cheap (no torch), so a command checks
    it before its work.

    Raises:
        ConfigError: no checkpoint there.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        for name in ("last.pt",) if last else ("best.pt", "last.pt"):
            if (p / "checkpoints" / name).is_file():
                p = p / "checkpoints" / name
                break
    if not p.is_file():
        raise ConfigError(f"checkpoint not found at {path}; give a .pt file or a run directory")
    return p


def _check_weights(payload: dict, p: Path) -> None:
    """Refuse weights that are not those saved (their digest, ``model_sha256``, differs: a
    byte flipped on disk, an edit) or not numbers (NaN or inf: the run diverged). A checkpoint
    of an older curi has no digest: it loads, with a warning.

    Raises:
        ConfigError: no weights, a digest mismatch, or weights that are not finite.
    """
    import torch

    model = payload.get("model")
    if not isinstance(model, Mapping) or not all(
        isinstance(t, torch.Tensor) for t in model.values()
    ):
        raise ConfigError(f"checkpoint {p} holds no model weights; use one written by `curi train`")
    saved = payload.get("model_sha256")
    if saved is None:
        log.warning("%s has no digest of its weights (an older curi wrote it): not checked", p)
    elif saved != state_digest(model):
        raise ConfigError(
            f"checkpoint {p} is damaged: its weights differ from the digest saved with them; "
            "use another checkpoint of the run (checkpoints/step_*.pt), or train again"
        )
    bad = [k for k, t in model.items() if t.is_floating_point() and not t.isfinite().all()]
    if bad:
        raise ConfigError(
            f"checkpoint {p} holds weights that are NaN or infinite ({len(bad)} tensors, e.g. "
            f"{bad[0]}): the run diverged before this step; resume from an earlier checkpoint "
            "(resume=<run>/checkpoints/step_N.pt), or train again with a lower train.lr"
        )


def load_weights(model: torch.nn.Module, payload: Mapping, path: Path) -> None:
    """Load a checkpoint's weights (``payload["model"]``) into `model`, which its config built.

    Raises:
        ConfigError: weights of another model (a pooling or sizes other than the config's:
            an edited checkpoint), naming the first weight missing, unexpected or misshapen.
    """
    state, mine = payload["model"], model.state_dict()
    problems = [f"{k} missing" for k in mine if k not in state]
    problems += [f"{k} unexpected" for k in state if k not in mine]
    problems += [
        f"{k} of shape {tuple(state[k].shape)}, not {tuple(t.shape)}"
        for k, t in mine.items()
        if k in state and state[k].shape != t.shape
    ]
    if problems:
        raise ConfigError(
            f"checkpoint {path} holds weights of another model than its config describes "
            f"({len(problems)} problems, e.g. {problems[0]}); use a checkpoint written by "
            "`curi train`, unedited"
        )
    model.load_state_dict(state)


def _safe_load(p: Path) -> object:
    """`torch.load` of tensors and plain values only (``weights_only=True``): a checkpoint
    holds nothing else, and anything else could run code while unpickling. A file that needs
    more is refused with curi's message, never torch's advice to load it unsafely.

    Raises:
        ConfigError: the file needs other objects, or is not a torch file at all.
    """
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol")  # for torch devs
        try:
            return torch.load(p, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:
            found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
            if found:
                raise ConfigError(
                    f"refusing checkpoint {p}: it needs {found.group(1)}, but a curi checkpoint "
                    "holds only tensors and plain values and loading anything else could run "
                    "code; use one written by `curi train`"
                ) from None
            why = "not a torch checkpoint of tensors and plain values"
        except Exception as e:  # noqa: BLE001 - any other failure means an unusable file
            first = (str(e).splitlines() or [""])[0][:200]
            why = type(e).__name__ if "weights_only" in first else f"{type(e).__name__}: {first}"
    raise ConfigError(f"cannot read checkpoint {p} ({why}); use one written by `curi train`")


def check_checkpoint_bank(ckpt_bank: Mapping, bank, path: str | Path | None = None) -> None:
    """Refuse a checkpoint (at `path`, named in the message) trained on another bank than
    `bank`: the bank configs differ in any key but ``workers``.

    Raises:
        ConfigError: naming both banks, the keys that differ and how to fix it.
    """
    mine = {k: v for k, v in bank.config.items() if k != "workers"}
    theirs = {k: v for k, v in dict(ckpt_bank).items() if k != "workers"}
    diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    if diff:
        where = f" {path}" if path is not None else ""
        raise ConfigError(
            f"the checkpoint{where} was trained on bank {theirs.get('name')!r}, not on this bank "
            f"{mine.get('name')!r} (they differ in {diff}); run with bank={theirs.get('name')} "
            "or give a checkpoint of this bank"
        )


def save_checkpoint(payload: dict, path: Path) -> None:
    """torch.save to a temporary name, then rename into place (never a half-written file),
    with the digest of the model's weights (``model_sha256``), which `load_checkpoint` checks."""
    import torch

    payload = {**payload, "model_sha256": state_digest(payload["model"])}
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:  # on a full disk torch's error keeps the OSError as context
            torch.save(payload, f)


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 (hex) of a state dict: every entry's name, dtype, shape and bytes, in name
    order. Equal digests mean bitwise-equal weights and buffers, e.g. a checkpoint's
    ``model`` and the model a DDP process holds (`train`'s summary, ``weights_sha256``)."""
    import torch

    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def link_checkpoint(src: Path, dst: Path) -> None:
    """Make `dst` the same file as `src` (hard link, else a copy), atomically."""
    with atomic_path(dst) as tmp:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)


class MetricLogger:
    """Scalars to ``metrics.jsonl`` (always; one JSON object per line) and to TensorBoard under
    ``tb/`` when `torch.utils.tensorboard` imports. Disabled on non-zero DDP ranks.

    A run folder holds each (tag, step) once. A run that starts at step 0 (`resume_step` None)
    replaces what an earlier attempt in the folder logged (``metrics.jsonl`` and the ``tb/``
    events files; nothing else there). A run resumed from the checkpoint of step
    `resume_step` replays the steps after it, which the interrupted run may have logged
    already: those rows are dropped (TensorBoard: purged) when the logger opens, so every
    (tag, step) is recorded once, with the resumed value. The TensorBoard writer opens at the
    first new scalar, so a run that logs nothing (finished already) adds no events file.
    """

    def __init__(
        self, run_dir: Path, *, enabled: bool = True, resume_step: int | None = None
    ) -> None:
        self.enabled, self.tb, self._file = enabled, None, None
        self._tb_dir, self._purge = run_dir / "tb", None
        self._kept: set[tuple[str, int]] = set()  # rows of the interrupted run, kept
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / "metrics.jsonl"
        if resume_step is None:
            for old in self._tb_dir.glob(f"{EVENTS}*"):
                remove(old, root=run_dir, link=True)
            remove(path, root=run_dir, link=True)
        else:
            self._purge = resume_step + 1
            if path.is_file():
                self._kept = _keep_rows_through(path, resume_step)
        self._file = path.open("a")

    def _writer(self):
        """The TensorBoard writer, opened on first use (None without tensorboard)."""
        if self._tb_dir is not None and self.tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(self._tb_dir), purge_step=self._purge)
            except ImportError:
                log.info("tensorboard is not installed: metrics go to metrics.jsonl only")
                self._tb_dir = None
        return self.tb

    def log(self, step: int, tag: str, values: Mapping[str, float | None]) -> None:
        """Record `values` under `tag` (``train``, ``val``) at `step`, unless a resumed run's
        earlier part recorded them already."""
        if not self.enabled or (tag, step) in self._kept:
            return
        clean = {k: v for k, v in values.items() if isinstance(v, (int, float))}
        self._file.write(json.dumps({"step": step, "tag": tag, **clean}) + "\n")
        self._file.flush()
        if self._writer() is not None:
            for k, v in clean.items():
                self.tb.add_scalar(f"{tag}/{k}", v, step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self.tb is not None:
            self.tb.close()


def _keep_rows_through(path: Path, step: int) -> set[tuple[str, int]]:
    """Rewrite ``metrics.jsonl`` with only its rows up to `step` (a line cut short by a kill
    goes too); returns their (tag, step)."""
    kept, lines = set(), []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
            key = (row["tag"], int(row["step"]))
        except (ValueError, TypeError, KeyError):
            continue
        if key[1] <= step:
            kept.add(key)
            lines.append(line + "\n")
    write_text(path, "".join(lines))
    return kept

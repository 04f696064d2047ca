"""Checkpoints and metric logs of training runs: atomic saves, loading a file or a run
directory's best checkpoint, a digest of a model's weights, and scalars to JSON lines and
TensorBoard."""

from __future__ import annotations

import _codecs
import hashlib
import io
import json
import logging
import math
import os
import pickle
import re
import shutil
import stat
import warnings
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from curi.atomic import atomic_path, remove, write_text
from curi.errors import ConfigError
from curi.paths import open_regular, regular_file

__all__ = [
    "CHECKPOINT_FORMAT",
    "MetricLogger",
    "check_checkpoint",
    "check_checkpoint_bank",
    "check_fields",
    "link_checkpoint",
    "load_checkpoint",
    "load_optimizer",
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
# How a file torch.save wrote begins: a zip archive (torch >= 1.6), or a pickle (the legacy
# format, protocol 2 or later, whose first byte is the PROTO opcode).
_MAGIC = (b"PK\x03\x04", b"\x80")
_AGAIN = "use another checkpoint of the run (checkpoints/step_*.pt), or train again"


def load_checkpoint(path: str | Path) -> tuple[dict, Path]:
    """Load a checkpoint file, or a run directory's ``checkpoints/best.pt`` (else ``last.pt``).

    Returns:
        ``(payload, file)``, tensors on the CPU.

    Raises:
        ConfigError: nothing there, not a checkpoint of this format, weights that are not
            those saved (digest) or not finite, or a field beside them out of range
            (`check_fields`).
    """
    p = checkpoint_file(path)
    payload = _safe_load(p)
    _check_format(payload, p)
    _check_weights(payload, p)
    check_fields(payload, p)
    return payload, p


def check_checkpoint(
    path: str | Path, *, last: bool = False, learners: tuple[str, ...] = ("protonet",)
) -> Path:
    """The checkpoint file `path` names (`checkpoint_file`), once everything `load_checkpoint`
    refuses that needs no torch passes: the file is one torch can read (a zip archive with its
    ``data.pkl`` and ``version`` records, or a pickle of torch's legacy format), whose pickle
    needs no object a checkpoint never holds, a dict of this format with a mapping of tensors
    as its weights and fields in range (`check_fields`). The pickle is read with every tensor
    a placeholder (no tensor data, no torch): cheap, so a command checks its checkpoint here
    before it makes a run folder. The weights' digest and values need torch and are checked
    when the checkpoint is loaded. A checkpoint of another learner of `learners` (its
    ``learner`` field, docs/learners.md) passes once it reads: its own loader checks the rest.

    Raises:
        ConfigError: as `checkpoint_file` and `load_checkpoint`, in the same words.
    """
    p = checkpoint_file(path, last=last)
    payload = _peek(p)
    other = payload.get("learner") if isinstance(payload, dict) else None
    if isinstance(other, str) and other != "protonet" and other in learners:
        return p
    _check_format(payload, p)
    if not _holds_weights(payload.get("model"), _Tensor):
        raise _no_weights(p)
    check_fields(payload, p)
    return p


def checkpoint_file(path: str | Path, *, last: bool = False) -> Path:
    """The checkpoint file `path` names: a file, or a run directory's ``checkpoints/best.pt``
    (else ``last.pt``; with `last`, ``last.pt`` only). Cheap (no torch), so a command checks
    it before its work.

    Raises:
        ConfigError: no checkpoint there, something else than a regular file (a FIFO, which
            is never opened), or a file that does not begin as torch's files do (its first
            bytes: a text file is refused before torch is imported).
    """
    p = Path(path).expanduser()
    if p.is_dir():
        for name in ("last.pt",) if last else ("best.pt", "last.pt"):
            if os.path.lexists(p / "checkpoints" / name):  # a FIFO there: say what it is
                p = regular_file(p / "checkpoints" / name, "checkpoint")
                break
    if not p.is_file():
        if os.path.lexists(p) and not p.is_dir():  # a FIFO, a socket, a dangling link ...
            regular_file(p, "checkpoint")
        raise ConfigError(f"checkpoint not found at {path}; give a .pt file or a run directory")
    with open_regular(p, "checkpoint") as f:
        head = f.read(4)
    if not head.startswith(_MAGIC):
        what = "empty" if not head else "not a torch file, as `curi train` writes (its first bytes)"
        raise ConfigError(
            f"{p} is not a checkpoint: it is {what}; give a .pt file from a run's "
            "checkpoints/ folder, or the run directory"
        )
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
    if not _holds_weights(model, torch.Tensor):
        raise _no_weights(p)
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


def _check_format(payload: object, p: Path) -> None:
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{p} is not a curi checkpoint (format {CHECKPOINT_FORMAT})")


def _holds_weights(model: object, tensor: type) -> bool:
    """Whether `model` is a mapping of weights, each a `tensor`."""
    return isinstance(model, Mapping) and all(isinstance(t, tensor) for t in model.values())


def _no_weights(p: Path) -> ConfigError:
    return ConfigError(f"checkpoint {p} holds no model weights; use one written by `curi train`")


def check_fields(payload: Mapping, path: Path) -> None:
    """Refuse the fields a checkpoint keeps beside its weights, which their digest does not
    cover, where they are out of range: an edited ``step`` would claim steps never trained,
    an edited ``best_map`` keep ``best.pt`` from ever being replaced. ``config`` must be a
    mapping of run options; ``step`` an integer in [0, the config's ``train.steps``];
    ``best_step`` absent or an integer in [0, ``step``]; ``best_map`` a val mAP in [0, 1]
    beside a ``best_step``, else absent (None, or -inf: no validation yet, as `curi train`
    writes it). The optimizer state is checked against the model (`load_optimizer`).

    Raises:
        ConfigError: naming the checkpoint, the field, its value and what it must be.
    """
    config = payload.get("config")
    if not isinstance(config, Mapping):
        raise _damaged(path, "config", config, "a mapping of run options")
    train = config.get("train")
    steps = train.get("steps") if isinstance(train, Mapping) else None
    if not _integer(steps, 1):
        raise _damaged(path, "config's train.steps", steps, "a positive integer")
    step = payload.get("step")
    if not _integer(step, 0, steps):
        raise _damaged(path, "step", step, f"an integer in [0, {steps}] (its train.steps)")
    best_step, best_map = payload.get("best_step"), payload.get("best_map")
    if best_step is not None and not _integer(best_step, 0, step):
        raise _damaged(path, "best_step", best_step, f"an integer in [0, {step}] (its step)")
    if best_step is None:
        if not (best_map is None or (type(best_map) is float and best_map == -math.inf)):
            raise _damaged(path, "best_map", best_map, "absent, as its best_step is")
    elif not (type(best_map) in (int, float) and 0 <= best_map <= 1):  # NaN fails too
        raise _damaged(path, "best_map", best_map, "a val mAP in [0, 1]")


def _integer(value: object, low: int, high: int | None = None) -> bool:
    return type(value) is int and low <= value and (high is None or value <= high)


def _finite(value: object) -> bool:
    """A real number (not a bool) that is finite, or a one-element finite tensor."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and bool(value.isfinite().all())
    return type(value) in (int, float) and math.isfinite(value)


def _damaged(path: Path, field: str, value: object, want: str) -> ConfigError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return ConfigError(
        f"checkpoint {path} is damaged: its {field} is {shown}, not {want}; {_AGAIN}"
    )


def load_optimizer(opt: torch.optim.Optimizer, payload: Mapping, path: Path) -> None:
    """Load a checkpoint's optimizer state (``payload["optimizer"]``) into `opt`, built over
    the model its config describes, once it fits `opt`: as many ``param_groups``, holding the
    same parameters, their settings of the same kinds (numbers finite); per-parameter state
    for those parameters only, every tensor finite and of its parameter's shape (or one
    number, as Adam's step count). NaN in Adam's moments would train on and fail later.

    Raises:
        ConfigError: naming the checkpoint and the first part of the state that does not fit.
    """
    problem = _optimizer_problem(payload.get("optimizer"), opt)
    if problem:
        raise ConfigError(f"checkpoint {path} is damaged: its optimizer state {problem}; {_AGAIN}")
    opt.load_state_dict(payload["optimizer"])


def _optimizer_problem(saved: object, opt: torch.optim.Optimizer) -> str | None:
    """What in the optimizer state `saved` does not fit `opt` (None: it fits)."""
    import torch

    if not (
        isinstance(saved, Mapping)
        and isinstance(saved.get("state"), Mapping)
        and isinstance(saved.get("param_groups"), list)
    ):
        return "is not a mapping of 'state' and a list of 'param_groups'"
    mine, groups = opt.state_dict()["param_groups"], saved["param_groups"]
    if len(groups) != len(mine):
        return f"has {len(groups)} param_groups, not {len(mine)}"
    for k, (theirs, ours) in enumerate(zip(groups, mine, strict=True)):
        params = theirs.get("params") if isinstance(theirs, Mapping) else None
        if (
            not isinstance(params, list)
            or [i if type(i) is int else None for i in params] != (ours["params"])
        ):
            return f"param_groups[{k}] does not list the model's {len(ours['params'])} parameters"
        for key in sorted((ours.keys() & theirs.keys()) - {"params"}):
            if not _same_kind(theirs[key], ours[key]):
                return f"param_groups[{k}][{key!r}] is {theirs[key]!r}"
    shapes = [p.shape for g in opt.param_groups for p in g["params"]]
    for index, entry in saved["state"].items():
        if not _integer(index, 0, len(shapes) - 1):
            return f"is for a parameter {index!r} the model lacks (it has {len(shapes)})"
        if not isinstance(entry, Mapping):
            return f"of parameter {index} is {type(entry).__name__}, not a mapping"
        for name, value in entry.items():
            where = f"{name!r} of parameter {index}"
            if not isinstance(value, torch.Tensor):
                if not _finite(value):
                    return f"{where} is {value!r}, not a finite number"
            elif value.dim() and value.shape != shapes[index]:
                return f"{where} has shape {tuple(value.shape)}, not {tuple(shapes[index])}"
            elif value.is_floating_point() and not value.isfinite().all():
                return f"{where} holds NaN or infinite values"
    return None


def _same_kind(theirs: object, ours: object) -> bool:
    """Whether an optimizer setting saved (`theirs`) is of the kind of `opt`'s own: a flag
    (bool or None), a finite number, or a tuple of finite numbers (Adam's betas)."""
    if ours is None or isinstance(ours, bool):
        return theirs is None or isinstance(theirs, bool)
    if isinstance(ours, (tuple, list)):
        return (
            isinstance(theirs, (tuple, list))
            and len(theirs) == len(ours)
            and all(_finite(x) for x in theirs)
        )
    if _finite(ours):
        return _finite(theirs)
    return type(theirs) is type(ours)


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
                raise _needs(p, found.group(1)) from None
            why = "not a torch checkpoint of tensors and plain values"
        except Exception as e:  # noqa: BLE001 - any other failure means an unusable file
            first = (str(e).splitlines() or [""])[0][:200]
            why = type(e).__name__ if "weights_only" in first else f"{type(e).__name__}: {first}"
    raise _unreadable(p, why)


def _needs(p: Path, name: str) -> ConfigError:
    return ConfigError(
        f"refusing checkpoint {p}: it needs {name}, but a curi checkpoint holds only tensors "
        "and plain values and loading anything else could run code; use one written by "
        "`curi train`"
    )


def _unreadable(p: Path, why: str) -> ConfigError:
    return ConfigError(f"cannot read checkpoint {p} ({why}); use one written by `curi train`")


# What `_peek` reads a checkpoint's pickle with: the objects besides torch's own that torch's
# weights_only loader builds (torch._weights_only_unpickler), and torch's legacy header.
_PLAIN = {
    ("collections", "OrderedDict"): OrderedDict,
    ("collections", "Counter"): Counter,
    ("builtins", "set"): set,
    ("builtins", "bytearray"): bytearray,
    ("builtins", "complex"): complex,
    ("_codecs", "encode"): _codecs.encode,  # how protocol 2 pickles bytes
}
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # the first pickle of torch's legacy format


class _Opaque:
    """What an object of torch's (a storage, a dtype, a device) stands for in a pickle that
    `_peek` reads: built from nothing, whatever it is given."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state) -> None:
        pass


class _Tensor(_Opaque):
    """A tensor of a checkpoint that `_peek` read: its data is not read."""


def _tensor(*args, **kwargs) -> _Tensor:
    return _Tensor()


class _NeedsGlobal(Exception):
    pass


class _Peeker(pickle.Unpickler):
    """Reads a checkpoint's pickle without torch: torch's rebuild functions make `_Tensor`
    placeholders, its other objects `_Opaque` ones, storages are never read, and any other
    object than torch's weights_only loader allows is refused (never built)."""

    def find_class(self, module: str, name: str):
        if module == "torch" or module.startswith("torch."):
            return _tensor if name.startswith("_rebuild") else _Opaque
        if (module, name) in _PLAIN:
            return _PLAIN[module, name]
        raise _NeedsGlobal(f"{module}.{name}")

    def persistent_load(self, pid):
        return _Opaque()


def _peek(p: Path) -> object:
    """The object a checkpoint file holds, its tensors `_Tensor` placeholders (`_Peeker`):
    only its pickle is read (a zip archive's ``data.pkl``; the start of a legacy file).

    Raises:
        ConfigError: a file torch cannot read, or one needing other objects (`_needs`).
    """
    try:
        with open_regular(p, "checkpoint") as f:
            zipped = f.read(4) == _MAGIC[0]
            f.seek(0)
            if zipped:
                return _Peeker(io.BytesIO(_data_pkl(f, p))).load()
            if _Peeker(f).load() != _LEGACY_MAGIC:
                raise _unreadable(p, "a pickle, but not one torch.save wrote")
            _Peeker(f).load(), _Peeker(f).load()  # the protocol version, the system's
            return _Peeker(f).load()
    except _NeedsGlobal as e:
        raise _needs(p, str(e)) from None
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a broken archive or pickle: an unusable file
        first = (str(e).splitlines() or [""])[0][:200]
        raise _unreadable(p, f"{type(e).__name__}: {first}") from None


def _data_pkl(f, p: Path) -> bytes:
    """The ``data.pkl`` record of the zip archive torch.save wrote (open as `f`), which holds
    the pickle; torch reads an archive only with it and its ``version`` record."""
    with zipfile.ZipFile(f) as z:
        names = z.namelist()
        top = names[0].split("/")[0] if names else ""
        if f"{top}/data.pkl" not in names or not {f"{top}/version", f"{top}/.data/version"} & set(
            names
        ):
            raise _unreadable(p, "a zip archive without torch's data.pkl and version records")
        return z.read(f"{top}/data.pkl")


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
            if _regular_or_missing(path):
                self._kept = _keep_rows_through(path, resume_step)
        self._file = _open_log(path)

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


def _regular_or_missing(path: Path) -> bool:
    """Whether ``metrics.jsonl`` is a regular file (False: missing).

    Raises:
        ConfigError: something else is there (a FIFO, whose open would wait for a reader for
            ever, a folder, a symlink, which would be written through).
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISREG(mode):
        return True
    kind = {stat.S_IFLNK: "a symlink", stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a folder"}
    raise ConfigError(
        f"{path} is {kind.get(stat.S_IFMT(mode), 'a special file')}, not a regular file: a run "
        "folder's metrics.jsonl is the log curi appends to; move it away, or train into "
        "another output_dir"
    )


def _open_log(path: Path):
    """``metrics.jsonl`` opened to append, never through a symlink and never waiting on a
    FIFO (one put there after `_regular_or_missing`).

    Raises:
        ConfigError: what is there is not a regular file.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:  # a symlink (ELOOP), a FIFO without reader (ENXIO), a folder ...
        _regular_or_missing(path)
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        _regular_or_missing(path)
    return os.fdopen(fd, "a")


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

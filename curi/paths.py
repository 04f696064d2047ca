"""Names that become paths: the one check that a bank name, an output name under a run
folder, or a name stored in a file (a checkpoint's config) stays inside the folder it is meant
for. Without it ``data_dir / name`` follows ``..``, absolute names and symlinks: a bank named
``./../victim`` with ``force=true`` replaced a folder beside the data directory
(docs/reliability.md, "paths").

Paths the user gives explicitly (``data_dir=``, ``output_dir=``, ``curi episodes out=FILE``,
``checkpoint=``) are the user's choice: where they may lead is not checked here, only a *name*
that a config places under such a folder is; whether a command can use them (a folder, not a
file; writable; names that fit) is checked before its work (`output_path`, `as_folder`)."""

from __future__ import annotations

import io
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import NamedTuple

from curi import atomic
from curi.errors import ConfigError, CuriError

__all__ = [
    "Foreign",
    "as_folder",
    "foreign",
    "inside",
    "open_regular",
    "output_path",
    "read_text",
    "regular_file",
    "safe_name",
]

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# bytes a new name leaves for what curi.atomic adds beside it (".<name>.tmp-<pid>", ".lock")
_ROOM = 16


def safe_name(name: object, what: str) -> str:
    """`name`, once it is a single plain folder or file name: letters, digits, ``_``, ``-``
    and ``.``, not starting with ``.`` (so not ``.`` or ``..``, and never one of the hidden
    temporaries ``.<name>.tmp-<pid>`` of `curi.atomic`), no separator.

    Args:
        name: the name to check.
        what: what the name is, for the message (``"bank name"``).

    Raises:
        ConfigError: naming `what`, the value and the allowed characters.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"{what} {name!r} is not a plain name: use letters, digits, '_', '-' and '.', "
            "not starting with '.', with no '/' (it becomes a folder under its parent folder)"
        )
    return name


def inside(
    root: str | Path, name: str | Path, *, what: str, child: bool = True, hint: str = ""
) -> Path:
    """``root / name``, once it is known to stay inside `root`.

    Both are resolved (``..``, symlinks, ``~`` in `root`) before they are compared, so an
    absolute `name`, ``../x``, ``a/../../x`` or a symlink under `root` that points elsewhere
    are refused; `root` need not exist yet. The path returned is the unresolved
    ``root / name`` (what the user sees in messages and files stays as before).

    Args:
        root: the folder the path must stay in.
        name: a name or relative path under `root`.
        what: what `name` is, for the message (``"eval out"``).
        child: refuse `root` itself (``name`` of ``"."`` or ``"a/.."``), for a name that must
            be something *in* the folder, never the folder.
        hint: appended to the message (how to write elsewhere on purpose).

    Raises:
        ConfigError: the path resolves outside `root` (or to `root` when `child`).
    """
    root = Path(root).expanduser()
    path = root / name
    try:
        base, target = root.resolve(), path.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop (RuntimeError before Python 3.13)
        raise ConfigError(f"{what} {str(name)!r}: cannot resolve {path}: {e}{hint}") from None
    if target == base and child:
        raise ConfigError(
            f"{what} {str(name)!r} names the folder {root} itself; give a name in it{hint}"
        )
    if not target.is_relative_to(base):
        raise ConfigError(
            f"{what} {str(name)!r} resolves to {target}, outside {root}; give a name that stays "
            f"inside that folder (no '..', absolute path or symlink leading out of it){hint}"
        )
    return path


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, for messages."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "a socket" if stat.S_ISSOCK(mode) else "a device or other special file"


class Foreign(NamedTuple):
    """What stands where a command keeps its own folder or file (`foreign`)."""

    kind: str  # "a symlink", "a file", "a folder", "a FIFO", ...
    target: str | None = None  # a symlink's target


def foreign(path: str | Path, *, folder: bool, cannot: str) -> Foreign | None:
    """What stands at `path`, where a command keeps its own folder (`folder`) or regular file,
    when it is something else; None when nothing is there, or that folder or file itself. A
    symlink is never the command's own, whatever it points to (`lstat`, never followed): a
    command writing, replacing or deleting through it would do so in the link's target.

    Args:
        cannot: the start of the message when `path` cannot be looked at (``"cannot read
            X"``); ``: <why>`` is added.

    Raises:
        ConfigError: `path` cannot be looked at (a name too long, no permission ...).
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(f"{cannot}: {e.strerror or e}") from None
    if stat.S_ISLNK(mode):
        return Foreign("a symlink", os.readlink(path))
    if (stat.S_ISDIR if folder else stat.S_ISREG)(mode):
        return None
    return Foreign("a file" if stat.S_ISREG(mode) else _kind(mode))


def regular_file(path: str | Path, what: str, error: type[CuriError] = ConfigError) -> Path:
    """`path`, once it is a regular file (or a symlink to one). Opening a FIFO for reading
    blocks until a writer comes, forever if none does, and a device or a folder is no file
    of ours either: every file curi reads that a user or another process could replace (a
    bank's manifest, a split file, an episode file) is checked here first, or opened with
    `open_regular`.

    Raises:
        error: naming `what`, the path and what it is instead (missing, a folder, a FIFO ...).
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{what} {str(path)!r} does not exist") from None
    except OSError as e:  # a name too long, a loop of symlinks, no permission ...
        raise error(f"{what} {str(path)!r} cannot be read: {e.strerror or e}") from None
    if not stat.S_ISREG(mode):
        raise error(f"{what} {str(path)!r} is {_kind(mode)}, not a regular file")
    return path


def open_regular(
    path: str | Path, what: str, error: type[CuriError] = ConfigError
) -> io.BufferedReader:
    """`path` opened for reading (binary), once it is a regular file (or a symlink to one).
    It is opened without waiting for a writer (``O_NONBLOCK``: a FIFO opens at once) and
    checked on the open descriptor, so a FIFO put in its place between a check and the read
    cannot block either (`regular_file`).

    Raises:
        error: naming `what`, the path and what it is instead (missing, a folder, a FIFO ...).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{what} {str(path)!r} does not exist") from None
    except OSError as e:  # a socket, a name too long, a loop of symlinks, no permission ...
        raise error(f"{what} {str(path)!r} cannot be read: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(f"{what} {str(path)!r} is {_kind(mode)}, not a regular file")
    return os.fdopen(fd, "rb")


def read_text(
    path: str | Path, what: str, error: type[CuriError] = ConfigError, *, missing_ok: bool = False
) -> str | None:
    """The text (UTF-8) of the file `path`, once it is a regular file (`open_regular`): the
    one reader of the small text files a user or another process could replace (rules, tasks,
    predictions, model results, a sweep's and a job's own files).

    Args:
        missing_ok: return None when nothing is at `path` (a file not written yet).

    Raises:
        error: naming `what` and the path: missing, not a regular file, unreadable or not UTF-8.
    """
    if missing_ok and not os.path.lexists(path):
        return None
    try:
        with open_regular(path, what, error) as raw, io.TextIOWrapper(raw, "utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"cannot read the {what} {str(path)!r}: {e}") from None


def _name_max(folder: Path) -> int:
    """The longest file name, in bytes, that the file system holding `folder` allows."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long, no permission: nothing usable is there
        return False


def as_folder(path: object, what: str, error: type[CuriError] = ConfigError) -> Path:
    """`path` as a folder to read or to make: a non-empty path (an empty one would be the
    working directory) that is not a file, nor under one. Whether it can be written is left to
    its user (a folder of banks may be read-only).

    Raises:
        error: naming `what` and the path.
    """
    if not isinstance(path, str | Path) or not str(path).strip():
        raise error(f"{what} is empty; give a folder, or leave {what} out")
    p = Path(path).expanduser()
    _dangling(p, what, path, error)
    there = next((q for q in (p, *p.parents) if _exists(q)), Path("."))
    if not there.is_dir():
        where = "" if there == p else f" (under {there})"
        kind = "a file" if there.is_file() else _kind(os.stat(there).st_mode)
        raise error(f"{what} {str(p)!r} is {kind}{where}, not a folder; give a folder")
    return p


def output_path(out: object, *, folder: bool, key: str = "out") -> Path:
    """`out`, the value of option `key`, once a command can write its output there: a
    non-empty path that is not an existing file (`folder`) or folder (else), whose nearest
    existing parent is a folder this process can make files in (the folder itself, when it
    exists and `folder`), and whose every name yet to be made fits the file system with room
    for curi's temporary names. Cheap, so every command that writes checks its output place
    here before its work: a file in place of an output folder, an unwritable place or a name
    too long otherwise failed after the work, or in a traceback.

    Raises:
        ConfigError: one line naming `key`, the value and what to give instead.
    """
    kind = "folder" if folder else "file"
    if not isinstance(out, str | Path) or not str(out).strip():
        raise ConfigError(f"{key}={out!r} names no {kind}; give the {kind} to write")
    if "\0" in str(out):
        raise ConfigError(f"{key}={str(out)!r} holds a NUL character; give a {kind} path")
    path = Path(out)
    if folder:  # a file is written by a rename, which replaces a link; a folder cannot be
        _dangling(path, key, out, ConfigError)
    if _exists(path):
        if path.is_dir() != folder:
            what = "a folder" if path.is_dir() else "a file, not a folder"
            raise ConfigError(f"{key}={out} is {what}; give a {kind} to write")
        _writable(path if folder else path.parent, key, out, kind)
        return path
    parent = next((p for p in path.parents if _exists(p)), Path("."))
    if not parent.is_dir():
        raise ConfigError(f"{key}={out}: {parent} is not a folder; give a path in a folder")
    most = _name_max(parent) - _ROOM
    for name in path.relative_to(parent).parts:
        if len(os.fsencode(name)) > most:
            raise ConfigError(
                f"{key}={out}: the name {name[:40]!r}... is {len(os.fsencode(name))} bytes "
                f"long; use at most {most} (the file system allows {most + _ROOM})"
            )
    _writable(parent, key, out, kind)
    return path


def _dangling(path: Path, key: str, value: object, error: type[CuriError]) -> None:
    """Refuse a symbolic link to nothing where a folder is to be made: ``mkdir`` fails on it
    (the name exists), though every check that follows the link finds nothing there."""
    try:
        target = os.readlink(path) if path.is_symlink() and not path.exists() else None
    except (OSError, ValueError):  # a name too long: the checks that follow say so
        return
    if target is not None:
        raise error(
            f"{key}={value} is a symbolic link to {target!r}, which does not exist; make its "
            "target, or give another folder"
        )


def _writable(where: Path, key: str, out: object, kind: str) -> None:
    """Refuse a folder this process cannot make files in. Tried, not read from the folder's
    mode: root passes every mode check, yet makes nothing under ``/proc``, on a read-only
    mount or in an immutable folder. The trial is a hidden empty folder, removed at once."""
    try:
        probe = tempfile.mkdtemp(prefix=".curi-probe-", dir=where)
    except OSError as e:
        raise ConfigError(
            f"{key}={out}: the folder {where} is not writable ({e.strerror or e}); give a "
            f"{kind} where you can write"
        ) from None
    atomic.remove(probe, root=where)

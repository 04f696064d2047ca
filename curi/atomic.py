"""The one atomic-write helper: every file or folder curi publishes (bank, episode exports,
re-rendered episodes, checkpoints, metrics) is written under a temporary name in the same
folder and renamed into place, so a reader never sees half a file and an interrupted write
leaves nothing under the final name.

A temporary name is hidden and names its process: ``.<name>.tmp-<pid>`` beside the target, so
two processes never write the same temporary and leftovers of a killed one are recognisable
(`temporaries`). Writers that must not run side by side on one path (two exports to the same
file) hold `exclusive`, a lock the kernel releases when its process ends."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from curi.errors import RemovalError

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: `exclusive` does not lock
    fcntl = None

__all__ = [
    "aside_name",
    "asides",
    "atomic_dir",
    "atomic_path",
    "exclusive",
    "temporaries",
    "temporary_name",
    "owner_alive",
    "remove",
    "rename_into",
    "write_bytes",
    "write_text",
]


def temporary_name(path: str | Path) -> Path:
    """This process's temporary name for `path`: ``.<name>.tmp-<pid>`` in the same folder (a
    rename within one filesystem is atomic)."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def temporaries(path: str | Path) -> list[Path]:
    """Temporaries of `path` left by any process (an interrupted write), sorted."""
    path = Path(path)
    return sorted(path.parent.glob(f".{path.name}.tmp-*"))


def owner_alive(tmp: str | Path) -> bool:
    """Whether the process that wrote the temporary `tmp` (``...tmp-<pid>``) still runs, so
    the file may still be in use. Ours counts as gone: one writer never finds its own
    leftovers in use. A name without a pid counts as alive (it is not ours to delete)."""
    pid = Path(tmp).name.rpartition(".tmp-")[2]
    if not pid.isdigit():
        return True
    if int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's process
        return True
    return True


def aside_name(path: str | Path) -> Path:
    """Where `atomic_dir` moves this process's old folder while it renames the new one in:
    ``.<name>.old-<pid>`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.old-{os.getpid()}")


def asides(path: str | Path) -> list[Path]:
    """Old folders of `path` moved aside by any process (`aside_name`), sorted: a process killed
    during the swap leaves one (complete when `path` is missing, else partly deleted)."""
    path = Path(path)
    return sorted(path.parent.glob(f".{path.name}.old-*"))


def remove(path: str | Path, *, root: str | Path, link: bool = False) -> None:
    """Delete the file or folder `path` inside `root` (nothing when it is missing): the one
    remover of curi, so that no command deletes outside what it owns (docs/reliability.md,
    "Third round").

    It never deletes through a symlink: a symlink at `path` is refused, or with `link` removed
    itself (its target untouched); a `path` whose folder resolves outside `root` (through
    ``..`` or a symlinked folder on the way) is refused, as is `root` itself; a folder's tree
    is deleted without following the symlinks inside it (`shutil.rmtree`'s walk by
    descriptors removes them as links).

    Args:
        path: what to delete, at any depth under `root`.
        root: the folder the command owns it in (an export's folder, a run folder ...).
        link: `path` is a name of curi's own (a temporary, a listed file), so a symlink there
            is removed as a link rather than refused.

    Raises:
        RemovalError: `path` is outside `root`, is `root`, is a symlink (without `link`), or
            cannot be deleted.
    """
    path = Path(path)
    where = _owned_path(path, Path(root))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:  # no such file can exist; the writer says why
            return
        raise RemovalError(f"cannot delete {path}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode) and not link:
        raise RemovalError(
            f"will not delete {path}: it is a symlink (to {os.readlink(path)}), not a folder "
            f"or file curi made in {where}; remove the link yourself"
        )
    try:
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:  # deleted meanwhile (the tree: partly, by another remover)
        if os.path.lexists(path):
            remove(path, root=root, link=link)
    except OSError as e:
        raise RemovalError(f"cannot delete {path}: {e.strerror or e}") from None


def _owned_path(path: Path, root: Path) -> Path:
    """The resolved `root`, once `path` is a name inside it: its folder resolved (``..``,
    symlinks) lies in `root`, and it is neither `root` nor ``.``/``..``.

    Raises:
        RemovalError: naming `path`, `root` and where `path` leads.
    """
    try:
        base, folder = root.resolve(), path.parent.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop (RuntimeError before Python 3.13)
        raise RemovalError(f"will not delete {path}: cannot resolve it ({e})") from None
    if folder / path.name == base:
        raise RemovalError(f"will not delete {path}: it is {root} itself, not a name in it")
    if path.name in ("", ".", "..") or not folder.is_relative_to(base):
        raise RemovalError(
            f"will not delete {path}: it resolves to {folder / path.name}, outside {root} "
            "(the folder this command may delete in); a symlink or '..' leads out of it"
        )
    return base


def _fsync(p: Path) -> None:
    """Flush a written file to disk before it is renamed into place (else a crash soon after
    the rename can leave an empty file under the final name)."""
    with open(p, "rb+") as f:
        os.fsync(f.fileno())


@contextmanager
def atomic_path(path: str | Path, *, fsync: bool = True) -> Iterator[Path]:
    """Publish a file atomically: yield a temporary path beside `path` to write; when the block
    ends without error, flush it to disk and rename it onto `path` (replacing an older file);
    on error, remove it and leave `path` as it was.

    The temporary's name does not end like `path`, so writers that infer a format from the
    suffix need it given (``Image.save(tmp, format="PNG")``) or a file object
    (``np.savez_compressed(f, ...)``, which would otherwise append ``.npz``).

    Args:
        path: the file to publish; its folder is created when missing.
        fsync: flush the file to disk before the rename.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    remove(tmp, root=path.parent, link=True)
    try:
        yield tmp
        if fsync:
            _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        remove(tmp, root=path.parent, link=True)
        raise


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Publish a folder atomically: yield a fresh, empty temporary folder beside `path` to fill;
    when the block ends without error, an existing `path` is moved aside (`aside_name`), the
    temporary is renamed to `path`, and only then is the old folder deleted; on error the
    temporary is deleted and `path` is untouched.

    A process killed during the swap leaves `path` complete (old or new) and at most a partly
    deleted old folder, except between the two renames, where `path` is missing and the old
    folder is whole under its aside name; `asides` finds both for the caller to clean up or
    put back.

    Args:
        path: the folder to publish; its parent is created when missing.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    remove(tmp, root=path.parent, link=True)
    tmp.mkdir()
    try:
        yield tmp
        if path.exists():
            trash = aside_name(path)
            remove(trash, root=path.parent, link=True)
            path.rename(trash)
            tmp.rename(path)
            remove(trash, root=path.parent, link=True)
        else:
            tmp.rename(path)
    finally:
        remove(tmp, root=path.parent, link=True)


def rename_into(src: str | Path, folder: str | Path) -> Path:
    """Publish the finished file `src` (written in a staging folder on the same filesystem) as
    ``folder / src.name`` in one rename, replacing a file of that name; returns the new path."""
    dst = Path(folder) / Path(src).name
    os.replace(src, dst)
    return dst


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` atomically (see `atomic_path`); returns `path`."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically (see `atomic_path`); returns `path`."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


@contextmanager
def exclusive(path: str | Path, *, what: str, error: type[Exception]) -> Iterator[None]:
    """Hold the lock of `path` for the block, or fail at once when another process holds it.

    The lock is `fcntl.flock` on the hidden file ``.<name>.lock`` beside `path`, which holds
    the holder's pid for the message and is removed when the block ends. The kernel releases
    the lock when its holder ends, even by SIGKILL (a leftover file is then locked afresh), so
    it is never stale. Processes forked inside the block share it until they end. A symlink or
    anything but a regular file in its place is refused, never followed or truncated.

    Args:
        path: the file (or export) to lock; its folder is created when missing.
        what: what is being written, for the message (``"out=eps.tar"``).
        error: the exception raised, with one line naming the holder and the lock file.
    """
    path = Path(path)
    lock = path.with_name(f".{path.name}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _lock(lock, what, error)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        remove(lock, root=path.parent, link=True)  # while held: a waiting opener then retries
        os.close(fd)


_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def _lock_error(lock: Path, what: str, e: OSError) -> str:
    """Why the lock file could not be opened: a folder that is not writable (nothing to
    remove: under /proc or on a read-only mount too, where root passes every mode check), or
    a lock file that is in the way."""
    if not os.path.lexists(lock):
        return f"{what}: the folder {lock.parent} is not writable ({e.strerror}); write elsewhere"
    return f"{what}: cannot open its lock file {lock}: {e.strerror}; remove it"


def _lock(lock: Path, what: str, error: type[Exception]) -> int:
    """An open descriptor of the file `lock`, locked, once it is still the file at that path
    (the holder before may have removed it after this process opened it)."""
    while True:
        try:
            fd = os.open(lock, _LOCK_FLAGS, 0o644)
        except OSError as e:
            raise error(_lock_error(lock, what, e)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise error(f"{what}: its lock file {lock} is not a regular file; remove it")
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                    raise error(
                        f"{what} is being written by another process (pid {holder}, holding "
                        f"the lock {lock}); wait for it to finish, or write elsewhere"
                    ) from None
            with contextlib.suppress(FileNotFoundError):
                now = os.stat(lock, follow_symlinks=False)
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                    return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)

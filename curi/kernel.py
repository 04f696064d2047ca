"""One compile setting for every loop numba compiles in curi (`kernel`), and the on-disk cache
of their machine code made safe:

- keyed on the sources of every module that holds kernels (`KERNEL_MODULES`), not only the
  kernel's own file as numba's cache is: a kernel of `curi.episodes.draws` that calls
  `curi.pcg` is compiled again after an edit of `curi/pcg.py`, so no process can run old
  draws beside new ones;
- each cache file carries the SHA-256 of its contents; a file that is not a regular file
  (a folder, a FIFO: never opened), is truncated, emptied or altered is ignored and rebuilt,
  never unpickled (a guard against accidents and hand edits, not against someone who
  recomputes the digest, as the bank's manifest);
- with no folder it can write (a read-only install and home, no ``NUMBA_CACHE_DIR``), the
  kernels compile in memory for the process, with one logged line, instead of failing.

The cache folder is the first writable of ``NUMBA_CACHE_DIR``, the ``__pycache__`` beside the
kernels' modules, and ``$XDG_CACHE_HOME/curi/numba`` (else ``~/.cache/curi/numba``), in a
subfolder named by the sources' digest. With ``NUMBA_DISABLE_JIT=1`` the kernels run as plain
Python (for a debugger)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numba
from numba.core import caching, config

__all__ = ["KERNEL_MODULES", "cache_dir", "kernel", "sources_digest"]

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parent.parent
#: Every module that defines kernels (`kernel`), relative to the folder above `curi/`; a kernel
#: may call any of them, so the cache of each is keyed on all of them (tests/test_kernel.py
#: checks that no module with kernels is missing).
KERNEL_MODULES = (
    "curi/bit_loops.py",
    "curi/pcg.py",
    "curi/episodes/draws.py",
    "curi/posterior_loops.py",
    "curi/oracles/loops.py",
)
_DIGEST_BYTES = 32
_MAX_CACHE_FILE = 1 << 28  # a cache file above 256 MiB is not one of ours


def _module_path(rel: str) -> Path:
    """The installed file of a kernel module (``curi/oracles`` is the ``oracles`` folder
    installed as ``curi.oracles``)."""
    import importlib.util

    name = rel.removesuffix(".py").replace("/", ".")
    spec = importlib.util.find_spec(name.rsplit(".", 1)[0])
    folder = Path(next(iter(spec.submodule_search_locations)))
    return folder / (name.rsplit(".", 1)[1] + ".py")


def sources_digest() -> str:
    """SHA-256 of the kernel modules' sources, numba's version and the Python version."""
    h = hashlib.sha256(f"numba {numba.__version__} python {sys.version_info[:2]}".encode())
    for rel in KERNEL_MODULES:
        h.update(rel.encode() + b"\0" + _module_path(rel).read_bytes() + b"\0")
    return h.hexdigest()


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError:
        return False
    return True


def _candidates() -> list[Path]:
    out = [Path(config.CACHE_DIR)] if config.CACHE_DIR else []
    out.append(Path(__file__).resolve().parent / "__pycache__")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [*out, Path(xdg) / "curi" / "numba"]


_CACHE: dict[str, Path | None] = {}


def cache_dir() -> Path | None:
    """The folder of this installation's compiled kernels (None: no folder can be written; the
    kernels then compile in memory, once per process, and one line says so)."""
    if "dir" not in _CACHE:
        digest = sources_digest()
        found = next((c for c in _candidates() if _writable(c / f"numba-{digest[:16]}")), None)
        _CACHE["dir"] = None if found is None else found / f"numba-{digest[:16]}"
        _CACHE["digest"] = digest
        if found is None:
            log.warning(
                "no writable folder for numba's cache (tried %s): the compiled loops are "
                "compiled again in each process; set NUMBA_CACHE_DIR to a writable folder",
                ", ".join(str(c) for c in _candidates()),
            )
    return _CACHE["dir"]


class _Locator(caching._CacheLocator):
    """Where a kernel's cache lives, and its freshness: the digest of every kernel module."""

    def __init__(self, py_func, py_file) -> None:
        self._lineno = py_func.__code__.co_firstlineno
        self._path = str(cache_dir())

    def ensure_cache_path(self) -> None:
        os.makedirs(self._path, exist_ok=True)

    def get_cache_path(self) -> str:
        return self._path

    def get_source_stamp(self) -> str:
        return _CACHE["digest"]

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        return cls(py_func, py_file)


class _CheckedFile(caching.IndexDataCacheFile):
    """numba's index and data files, each prefixed by the SHA-256 of the rest; any file that is
    not a regular file of ours with a matching digest reads as a cache miss."""

    def _read(self, path: str) -> bytes | None:
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or not 0 < st.st_size <= _MAX_CACHE_FILE:
                return None
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                blob = f.read(_MAX_CACHE_FILE + 1)
        except OSError:
            return None
        digest, payload = blob[:_DIGEST_BYTES], blob[_DIGEST_BYTES:]
        return payload if hashlib.sha256(payload).digest() == digest else None

    def _write(self, path: str, payload: bytes) -> None:
        with self._open_for_write(path) as f:
            f.write(hashlib.sha256(payload).digest() + payload)

    def _load_index(self) -> dict:
        payload = self._read(self._index_path)
        if payload is None:
            return {}
        try:
            version, stamp, overloads = caching.pickle.loads(payload)
        except Exception:  # noqa: BLE001 - our digest matched, but be a cache, not a crash
            return {}
        fresh = version == self._version and stamp == self._source_stamp
        return overloads if fresh and isinstance(overloads, dict) else {}

    def _save_index(self, overloads: dict) -> None:
        self._write(self._index_path, self._dump((self._version, self._source_stamp, overloads)))

    def _load_data(self, name: str):
        payload = self._read(self._data_path(name))
        if payload is None:
            raise OSError(f"cache file {name} missing or damaged")  # numba reads: a miss
        return caching.pickle.loads(payload)

    def _save_data(self, name: str, data) -> None:
        self._write(self._data_path(name), self._dump(data))


class _Impl(caching.CompileResultCacheImpl):
    _locator_classes = [_Locator]


class _Cache(caching.FunctionCache):
    """numba's per-function cache with `_Locator` and `_CheckedFile`; a cache that cannot be
    written (a folder in the way, a full disk) is a miss, not an error."""

    _impl_class = _Impl

    def __init__(self, py_func) -> None:
        super().__init__(py_func)
        self._cache_file = _CheckedFile(
            self._cache_path, self._impl.filename_base, self._impl.locator.get_source_stamp()
        )

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception:  # noqa: BLE001 - a cache must never stop the code it speeds up
            return None

    def save_overload(self, sig, data) -> None:
        with contextlib.suppress(OSError):
            super().save_overload(sig, data)


def kernel(fn: Callable) -> Callable:
    """Compile `fn` with curi's one numba setting (nopython, the GIL released) and the cache
    above; the plain function under ``NUMBA_DISABLE_JIT=1``."""
    dispatcher = numba.njit(nogil=True)(fn)
    if not config.DISABLE_JIT and cache_dir() is not None:
        dispatcher._cache = _Cache(dispatcher.py_func)
    return dispatcher

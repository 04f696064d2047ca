"""The concept bank (paper section 3, Appendix B): sample scenes and concepts, reject, execute,
filter, collapse and de-duplicate, group synonyms, draw the mAP evaluation set, and store it all
with a manifest that records every file's checksum, shape and dtype and checksums itself
(`curi.bank_format`); `load_bank` checks it and memory-maps the bank back as a `ConceptBank`.
Builds of one bank take turns under a lock beside it, and whatever a killed build leaves is
put back or removed by the next build or load (docs/reliability.md, "Bank: manifest,
concurrent and interrupted builds")."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import stat
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

import numpy as np

from curi.atomic import asides, atomic_dir, remove, temporaries
from curi.bank_build import build_into
from curi.bank_config import (
    LATER_OPTIONS,
    BankConfig,
    checked_manifest,
    data_root,
    default_data_dir,
)
from curi.bank_format import (
    MANIFEST,
    read_manifest,
)
from curi.bits import unpack_rows
from curi.concepts import Concept, parse
from curi.errors import BankError, BankMismatchError, CuriError
from curi.executor import BitScenes
from curi.paths import inside, open_regular, output_path
from curi.scenes import Camera, Scenes

__all__ = [
    "BankConfig",
    "ConceptBank",
    "bank_concepts",
    "build_bank",
    "check_bank",
    "data_root",
    "load_bank",
    "default_data_dir",
    "open_bank",
]

log = logging.getLogger(__name__)
_SCENE_FILES = ("n_objects", "props", "position", "rotation", "pixel")
# --- one builder per bank -------------------------------------------------------------------
_HELD_LOCKS: set[int] = set()  # descriptors of the build locks this process holds


def _drop_inherited_locks() -> None:
    """In a forked child (the executing workers), let go of the parent's build locks: a lock
    lives as long as any descriptor of it, so a worker orphaned by a killed build would
    otherwise block every later build of its bank."""
    if _HELD_LOCKS:
        null = os.open(os.devnull, os.O_RDONLY)
        for fd in _HELD_LOCKS:
            os.dup2(null, fd)  # the number stays valid, the lock's description is released
        os.close(null)
        _HELD_LOCKS.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


def _lock_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.lock")


@contextmanager
def _build_lock(final: Path, *, wait: bool) -> Iterator[bool | None]:
    """Hold the lock of the bank at `final` (``flock`` on ``.<name>.lock`` beside it, released
    by the kernel when the holder dies): yields whether this process had to wait for another
    builder, or None when the lock cannot be created (a read-only folder) or, `wait` being
    false, is taken. A FIFO or a symlink in the lock's place is refused: opening a FIFO for
    writing blocked until a reader came, and a symlink would lock (or create) a file elsewhere.

    Raises:
        BankError: the lock's path holds something other than a regular file.
    """
    lock = _lock_path(final)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if e.errno != errno.ELOOP:  # a read-only folder: build without the lock
            yield None
            return
        fd = None
    if fd is None or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd is not None:
            os.close(fd)
        raise BankError(f"the bank's lock file {lock} is not a regular file; remove it")
    f = os.fdopen(fd, "a")
    try:
        waited = False
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                yield None
                return
            log.warning("waiting for another process that is building the bank at %s", final)
            waited = True
            fcntl.flock(f, fcntl.LOCK_EX)
        _HELD_LOCKS.add(f.fileno())
        try:
            yield waited
        finally:
            _HELD_LOCKS.discard(f.fileno())
    finally:
        f.close()


def _tidy(final: Path) -> None:
    """With the lock held (so no live builder of this bank is using them), undo what killed
    builds left: put back an old bank moved aside by a swap killed before the new one was
    renamed in, then delete stale temporaries and old banks."""
    if not final.exists():
        for old in sorted(asides(final), key=lambda p: p.stat().st_mtime, reverse=True):
            if (old / MANIFEST).is_file():
                old.rename(final)
                log.warning("put back the bank at %s, moved aside by a killed build", final)
                break
    for stale in temporaries(final) + asides(final):
        log.info("removing %s, left by a killed build", stale)
        remove(stale, root=final.parent, link=True)


def _stamp(final: Path) -> tuple[int, int] | None:
    """Identifies the bank published at `final` (its manifest's inode and time), or None."""
    try:
        st = (final / MANIFEST).stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _reuse(final: Path, cfg: BankConfig, *, force: bool) -> bool:
    """Whether the bank at `final` is the one `cfg` describes, to be reused. With `force` (a
    bank another builder published while this one waited) anything else is rebuilt.

    Raises:
        BankError: (not `force`) the bank is damaged or was built from another config.
    """
    try:
        bank = load_bank(final)
    except BankError:
        if force:
            return False
        raise
    if bank.config != cfg.identity():
        if force:
            return False
        diff = sorted(k for k, v in cfg.identity().items() if bank.config.get(k) != v)
        raise BankMismatchError(final, diff)
    log.debug("bank %s already built; reusing it", final)
    return True


def build_bank(
    cfg: BankConfig | Mapping | str,
    data_dir: str | Path | None = None,
    *,
    progress: bool = True,
    force: bool = False,
) -> Path:
    """Build the concept bank described by `cfg` under ``data_dir / cfg.name`` (paper Appendix B.2).

    An existing bank with the same identity is reused (unless `force`); the bank is written
    to a temporary directory and renamed into place, so an interrupted build leaves nothing
    that loads, and the next build starts cleanly. Builds of the same bank take turns (a
    lock file ``.<name>.lock`` beside it): a second builder waits, then reuses the bank the
    first one published, even with `force`, if it is the one asked for. A build killed while
    replacing a bank leaves the old or the new one (see `_tidy`).

    Args:
        cfg: a `BankConfig`, a mapping of its fields, or a preset name (``"tiny"``,
            ``"default"``, ``"paper"``; see `BankConfig.preset`).
        data_dir: the data directory (default: `default_data_dir()`).
        progress: show progress bars.
        force: rebuild even if a bank is already there.

    Returns:
        The bank directory.

    Raises:
        ConfigError: a bad option.
        BankMismatchError: a different bank already occupies the directory (and not `force`).
    """
    if isinstance(cfg, str):
        cfg = BankConfig.preset(cfg)
    elif not isinstance(cfg, BankConfig):
        cfg = BankConfig.from_mapping(cfg)
    cfg.check()
    root = data_root(data_dir)
    final = inside(root, cfg.name, what="bank name")  # cfg.check: a plain name
    final.parent.mkdir(parents=True, exist_ok=True)
    before = _stamp(final)
    with _build_lock(final, wait=True) as waited:
        if waited is None:  # a read-only data directory: use the bank there, build none
            if final.exists() and not force and _reuse(final, cfg, force=False):
                return final
            raise BankError(f"cannot build the bank at {final}: its folder is not writable")
        _tidy(final)
        fresh = waited and _stamp(final) not in (None, before)  # published while we waited
        if final.exists() and (not force or fresh) and _reuse(final, cfg, force=force):
            return final
        with atomic_dir(final) as tmp:
            build_into(tmp, cfg, progress)
    return final


class ConceptBank:
    """A loaded concept bank (read-only; large arrays are memory-mapped).

    Attributes:
        path: the bank directory.
        manifest: the manifest (config, counts, timings, checksums).
        concepts: canonical postfix strings, in first-draw order.
        truth_words: (H, W) uint64, bit s of row i set when concept i holds on scene s.
        truth_by_scene: (N, ceil(H / 64)) uint64, the same bits scene-major.
        groups: (H,) synonym group ids.
        lengths: (H,) lengths in tokens.
        log_prior: (H,) unnormalised log-linear prior, -0.2 * len(h).
        pcfg_logprob: (H,) PCFG log-probability of the concept's first draw.
        counts: (H,) number of scenes satisfying each concept.
        eval_ids: mAP evaluation set, scene ids (3 per concept).
        eval_concepts: the concept each evaluation scene was drawn for.
    """

    def __init__(self, path: Path, manifest: dict):
        self.path = path
        self.manifest = manifest
        self.config: dict = manifest["config"]
        text = (path / "concepts.txt").read_text(encoding="utf-8")
        if text.count("\n") != manifest["files"]["concepts.txt"]["lines"]:
            raise BankError(
                f"bank at {path} is damaged: concepts.txt has {text.count(chr(10))} lines, the "
                f"manifest records {manifest['files']['concepts.txt']['lines']}; rebuild it "
                "(add force=true to the command)"
            )
        self.concepts: list[str] = text.split("\n")[:-1]
        meta = np.load(path / "concepts.npz")
        self.groups = meta["group"]
        self.lengths = meta["length"]
        self.log_prior = meta["log_prior"]
        self.pcfg_logprob = meta["pcfg_logprob"]
        self.counts = meta["count"]
        # Plain ndarray views of the memory maps: indexing a np.memmap is several times slower.
        self.truth_words = np.asarray(np.load(path / "truth.npy", mmap_mode="r"))
        self.truth_by_scene = np.asarray(np.load(path / "truth_by_scene.npy", mmap_mode="r"))
        self.eval_ids = np.load(path / "eval_ids.npy")
        self.eval_concepts = np.load(path / "eval_concepts.npy")

    @property
    def num_scenes(self) -> int:
        return int(self.config["num_scenes"])

    def __len__(self) -> int:
        return len(self.concepts)

    def __reduce__(self):
        # Pickle by path (for DataLoader workers): memory maps are reopened, not copied.
        return (_reopen, (self.path,))

    def __repr__(self) -> str:
        return f"ConceptBank({str(self.path)!r}, concepts={len(self)}, scenes={self.num_scenes})"

    @cached_property
    def scenes(self) -> Scenes:
        arrays = {
            n: np.load(self.path / "scenes" / f"{n}.npy", mmap_mode="r") for n in _SCENE_FILES
        }
        cam = Camera(width=self.config["image_width"], height=self.config["image_height"])
        return Scenes(camera=cam, **arrays)

    def truth(self, i: int) -> np.ndarray:
        """Boolean row (num_scenes,): the scenes satisfying concept i."""
        return unpack_rows(np.asarray(self.truth_words[i]), self.num_scenes)

    def group(self, i: int) -> int:
        """Synonym group of concept i."""
        return int(self.groups[i])

    def concept(self, i: int) -> Concept:
        """Concept i, parsed."""
        return parse(self.concepts[i])

    def bit_scenes(self) -> BitScenes:
        """The scene pool as bit planes, read as this bank's concepts were executed (its
        ``location_bins``), so a concept outside the bank executes as the bank's would."""
        bins = self.config.get("location_bins", LATER_OPTIONS["location_bins"])
        return BitScenes.from_scenes(self.scenes, location_bins=bins)

    def scene_records(self, ids) -> list[dict]:
        """JSON-ready records of scenes `ids` (see `Scenes.records`)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_scenes):
            raise IndexError(f"scene ids must be in [0, {self.num_scenes})")
        return self.scenes.records(ids)


def _reopen(path: Path) -> ConceptBank:
    return load_bank(path, verify=False)


def load_bank(path: str | Path, *, verify: bool = True) -> ConceptBank:
    """Load a bank directory written by `build_bank`, after checking it against its manifest
    (`curi.bank_format`): the manifest's own checksum and structure, its config against the
    builder's checks, the files it must list (regular files only), and every file's size,
    shape, dtype and sample digest (which binds the config) against the manifest and the
    counts it states.

    Args:
        path: the bank directory.
        verify: also check every file's SHA-256 (reads the whole bank; the cheap checks above
            are always made).

    Raises:
        BankError: missing directory or manifest, unknown format, a missing, damaged or
            inconsistent file or manifest field (naming it).
    """
    path = Path(path).expanduser()
    hint = "build it with `curi bank bank=<preset> data_dir=<dir>`"
    if temporaries(path) or asides(path):
        with _build_lock(path, wait=False) as held:
            if held is not None:  # no build of this bank is running
                _tidy(path)
    if not path.is_dir():
        raise BankError(f"bank not found at {path}; {hint}")
    manifest = checked_manifest(path, read_manifest(path, hint), verify=verify)
    try:
        return ConceptBank(path, manifest)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise BankError(
            f"bank at {path} is damaged: {str(e)[:300]}; rebuild it (add force=true to the command)"
        ) from None


def open_bank(
    bank: BankConfig | Mapping | str,
    data_dir: str | Path | None = None,
    *,
    progress: bool = True,
    force: bool = False,
    build: bool | None = None,
) -> ConceptBank:
    """The bank `bank` describes, ready to use: built under `data_dir`, or reused when the same
    bank is already there (`build_bank`), then loaded without re-hashing its files (the build
    has just checked it is the bank asked for). The one way every command, training and
    evaluation open the bank they are given.

    Args:
        bank: a `BankConfig`, a mapping of its fields, or a preset name (``"tiny"``).
        data_dir: the data directory (default: `default_data_dir()`).
        progress: show progress bars while building.
        force: rebuild even if a bank is already there (implies `build`).
        build: build the bank when it is missing. None (default): only in the default data
            directory, so that a misspelt `data_dir` is an error rather than a new bank.

    Raises:
        ConfigError: a bad bank option.
        BankError: the bank is missing and may not be built here, or a different bank occupies
            the folder (and not `force`).
    """
    cfg = check_bank(bank, data_dir, force=force, build=build)
    return load_bank(build_bank(cfg, data_dir, progress=progress, force=force), verify=False)


def check_bank(
    bank: BankConfig | Mapping | str,
    data_dir: str | Path | None = None,
    *,
    force: bool = False,
    build: bool | None = None,
) -> BankConfig:
    """The config of the bank `open_bank` would open with these arguments, once its options are
    valid and the bank is there or may be built there. Cheap (no file of the bank is read), so
    a command checks it before its heavy work.

    Raises:
        ConfigError: a bad bank option.
        BankError: a data_dir that is empty or a file, or a missing bank that may not be built
            there.
        ConfigError: a data folder where the bank would be built that cannot be written.
    """
    if isinstance(bank, BankConfig):
        cfg = bank
    else:
        cfg = BankConfig.preset(bank) if isinstance(bank, str) else BankConfig.from_mapping(bank)
    root = data_root(data_dir)
    if build is None:
        build = data_dir is None or root.absolute() == default_data_dir().absolute()
    there = (root / str(cfg.name) / MANIFEST).is_file()
    if not (build or force) and not there:
        raise BankError(_missing_bank(cfg, root))
    if force or not there:  # it will be built: under /proc or a file, mkdir fails at the end
        given = data_dir is not None or not os.environ.get("CURI_DATA_DIR")
        output_path(root, folder=True, key="data_dir" if given else "CURI_DATA_DIR")
    return cfg


def bank_concepts(
    cfg: BankConfig, data_dir: str | Path | None = None, *, force: bool = False
) -> list[str] | None:
    """The concepts of the bank `open_bank` would open with these arguments (`cfg` as
    `check_bank` returns it), when that bank is there already: read from its ``concepts.txt``
    once the file's digest is the manifest's and the manifest's config is `cfg`'s. Cheap
    (neither the truth matrix nor the scenes are read), so a command checks a split file
    against the bank before its work. None where the bank will be built (`force`, or nothing
    there), or what is there is another bank or damaged: `open_bank` says so, in its words.
    """
    if force:
        return None
    try:
        path = data_root(data_dir) / str(cfg.name)
        if not (path / MANIFEST).is_file():
            return None
        manifest = read_manifest(path, "")
        if manifest["config"] != cfg.identity():
            return None
        with open_regular(path / "concepts.txt", "concepts.txt") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != manifest["files"]["concepts.txt"]["sha256"]:
            return None
        return data.decode("utf-8").split("\n")[:-1]
    except (CuriError, OSError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _missing_bank(cfg: BankConfig, root: Path) -> str:
    """How to build a missing bank (the preset's name when the config is that preset)."""
    preset = "bank=" + str(cfg.name)
    try:
        if BankConfig.preset(str(cfg.name)) != cfg:
            preset += " (and the same bank.* options)"
    except CuriError:
        preset = f"bank.name={cfg.name} (and the same bank.* options)"
    return (
        f"no bank {cfg.name!r} in data_dir {str(root)!r}; build it with `curi bank {preset} "
        f"data_dir={root}`, or add build=true (a bank is built on its own only in the default "
        f"data folder, {default_data_dir()})"
    )

"""The concept bank (paper section 3, Appendix B): sample scenes and concepts, reject, execute,
filter, collapse and de-duplicate, group synonyms, draw the mAP evaluation set, and store it all
with a manifest that records every file's checksum, shape and dtype and checksums itself
(`curi.bank_format`); `load_bank` checks it and memory-maps the bank back as a `ConceptBank`.
Builds of one bank take turns under a lock beside it, and whatever a killed build leaves is
put back or removed by the next build or load (docs/reliability.md, "Bank: manifest,
concurrent and interrupted builds")."""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import json
import logging
import multiprocessing as mp
import os
import stat
import time
import zipfile
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from curi import validate
from curi.atomic import asides, atomic_dir, remove, temporaries
from curi.bank_format import (
    FORMAT_VERSION,
    MANIFEST,
    REBUILD,
    check_files,
    check_manifest,
    describe,
    read_manifest,
    sample_sha256,
    seal,
    sha256,
)
from curi.bits import num_words, popcount, select_bits, transpose_blocks, unpack_rows
from curi.concepts import MAX_NESTING, Concept, parse
from curi.errors import BankError, BankMismatchError, ConfigError, CuriError, known_options
from curi.executor import LOCATION_BINS, BitScenes, execute
from curi.grammar import sample_concepts
from curi.machine import available_cores
from curi.paths import as_folder, inside, safe_name
from curi.presets import load_preset
from curi.prior import length_log_prior
from curi.rejection import REASONS, static_rejection
from curi.rng import derive_rng
from curi.scenes import LAYOUTS, NUM_BINS, Camera, Scenes, sample_scenes
from curi.validate import MAX_SEED

__all__ = [
    "BankConfig",
    "ConceptBank",
    "build_bank",
    "check_bank",
    "data_root",
    "load_bank",
    "default_data_dir",
    "open_bank",
]

log = logging.getLogger(__name__)
_SCENE_FILES = ("n_objects", "props", "position", "rotation", "pixel")
#: Longest bank name: it becomes a folder name, and ``.<name>.lock`` and ``.<name>.tmp-<pid>``
#: beside it must stay under the file systems' 255 bytes.
MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class BankConfig:
    """What a bank is made of. Every field but `workers` is part of the bank's identity.

    Attributes:
        name: directory name of the bank under the data directory (a plain name of at most
            `MAX_NAME_CHARS` characters, `curi.paths.safe_name`).
        num_scenes: scenes in the universe U (paper: about 1,000,000).
        num_draws: grammar draws (paper: 2,000,000).
        seed: the seed of every random choice.
        max_depth: depth at which a non-terminal may no longer be expanded (6, START at
            depth 0: docs/concepts.md, "Grammar"; 5 reads the paper's "no node deeper than 6"
            with the root at depth 1 and leaves counted, which reproduces the original
            release's split sizes: `paper_legacy`, docs/fidelity.md section 4).
        attempts: attempts per failed child (12).
        min_positives: keep a concept only if it holds on at least this many scenes (11: "more
            than 10", so support and query can each get 5 distinct positives).
        max_fraction: keep a concept only if it holds on fewer than this share of scenes (0.1).
        eval_per_concept: positives per concept in the mAP evaluation set (3).
        image_width, image_height: the camera's image size that defines location bins.
        location_bins: ``spec`` (bins 1..8, docs/concepts.md, "Semantics") or ``legacy``
            (location literals read as the original release's 0..7 bins:
            `curi.executor.LOCATION_BINS`; the `paper_legacy` preset, docs/fidelity.md).
        layout: scene layout, ``spec`` or ``clevr`` (CLEVR's directional margin as well;
            `curi.scenes.LAYOUTS`; docs/concepts.md, "Scenes").
        workers: processes that execute concepts (0: one per CPU core).
    """

    name: str = "default"
    num_scenes: int = 200_000
    num_draws: int = 500_000
    seed: int = 0
    max_depth: int = 6
    attempts: int = 12
    min_positives: int = 11
    max_fraction: float = 0.1
    eval_per_concept: int = 3
    image_width: int = 240
    image_height: int = 160
    location_bins: str = "spec"
    layout: str = "spec"
    workers: int = 0

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> BankConfig:
        """Build from a mapping (e.g. a Hydra node); unknown keys are an error."""
        out = cls(**known_options(cls, cfg, "bank"))
        out.check()
        return out

    @classmethod
    def preset(cls, preset: str, /, **overrides) -> BankConfig:
        """A bank preset by name (``tiny``, ``default``, ``paper``: the files of `conf/bank`),
        with any field overridden, e.g. ``BankConfig.preset("tiny", workers=1)``.

        Raises:
            ConfigError: an unknown preset (the message lists the known ones) or field.
        """
        return cls.from_mapping({**load_preset("bank", preset), **overrides})

    def check(self) -> None:
        """Raise ConfigError for values out of range (one message naming the key, the value
        and the allowed range), and store integral values as ints.

        The bounds: below depth 4 the grammar finishes no draw and deeper than
        `curi.concepts.MAX_NESTING` + 1 the parser refuses what it draws; location bins need
        at least `NUM_BINS` pixels a side; a concept must be able to hold on `min_positives`
        scenes yet on fewer than `max_fraction` of them; the upper bounds of the sizes keep
        a bank's truth matrix in memory (10 times the paper's scenes and 50 times its draws).
        """
        ints = {
            "num_scenes": (10, 10**7),
            "num_draws": (1, 10**8),
            "seed": (0, MAX_SEED),
            "max_depth": (4, MAX_NESTING + 1),
            "attempts": (1, 100),
            "min_positives": (1, 10**7),
            "eval_per_concept": (1, 1000),
            "image_width": (NUM_BINS, 16384),
            "image_height": (NUM_BINS, 16384),
            "workers": (0, 1024),
        }
        safe_name(self.name, "bank name")
        if len(self.name) > MAX_NAME_CHARS:
            raise ConfigError(
                f"bank name has {len(self.name)} characters; use at most {MAX_NAME_CHARS} (it "
                "becomes a folder name, and file systems refuse names over 255 bytes)"
            )
        for key, (low, high) in ints.items():
            value = validate.integer(getattr(self, key), f"bank.{key}", low=low, high=high)
            object.__setattr__(self, key, value)  # frozen: 2.0 -> 2, the same identity
        validate.choice(self.location_bins, "bank.location_bins", LOCATION_BINS)
        validate.choice(self.layout, "bank.layout", LAYOUTS)
        frac = validate.number(self.max_fraction, "bank.max_fraction", low=0, high=1, open_low=True)
        object.__setattr__(self, "max_fraction", frac)
        if self.min_positives >= int(np.ceil(frac * self.num_scenes)):
            raise ConfigError(
                f"bank.min_positives={self.min_positives} leaves no concept: it must be below "
                f"bank.max_fraction * bank.num_scenes = {frac * self.num_scenes:g}"
            )

    def identity(self) -> dict:
        """The fields that determine the bank's content. Options added after banks were
        first published (`_LATER_OPTIONS`) are left out at their default, so a bank built
        before they existed keeps its identity and is reused."""
        d = dataclasses.asdict(self)
        d.pop("workers")
        for key, default in _LATER_OPTIONS.items():
            if d[key] == default:
                del d[key]
        return d

    @property
    def camera(self) -> Camera:
        return Camera(width=self.image_width, height=self.image_height)


#: Bank options a manifest leaves out at their default (`BankConfig.identity`).
_LATER_OPTIONS = {"location_bins": "spec", "layout": "spec"}

_CONFIG_TYPES = {
    f.name: type(f.default) for f in dataclasses.fields(BankConfig) if f.name != "workers"
}


def _config_types(manifest: object) -> dict[str, type]:
    """The identity fields a manifest's config must hold: every one, less the later options
    it leaves out (at their default, see `BankConfig.identity`)."""
    config = manifest.get("config") if isinstance(manifest, dict) else None
    held = config if isinstance(config, dict) else {}
    return {k: t for k, t in _CONFIG_TYPES.items() if k not in _LATER_OPTIONS or k in held}


def default_data_dir() -> Path:
    """``$CURI_DATA_DIR``, else the user cache folder (``$XDG_CACHE_HOME/curi``)."""
    if os.environ.get("CURI_DATA_DIR"):
        return Path(os.environ["CURI_DATA_DIR"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "curi"


def data_root(data_dir: str | Path | None) -> Path:
    """The data folder `data_dir` names (None: `default_data_dir()`).

    Raises:
        BankError: an empty name (the working directory) or a file where the folder goes.
    """
    if data_dir is None:
        return default_data_dir()
    return as_folder(data_dir, "data_dir", BankError)


# --- execution across processes ------------------------------------------------------------
_BS: BitScenes | None = None  # set in the parent before forking workers


def _execute_chunk(args: tuple[list[str], int, int]):
    """Execute a chunk of concepts; return all counts and the rows of those that pass."""
    texts, lo, hi = args
    rows = execute(texts, _BS)
    counts = popcount(rows)
    keep = np.flatnonzero((counts >= lo) & (counts < hi))
    return counts, keep, rows[keep]


def _run_execution(texts: list[str], bs: BitScenes, lo: int, hi: int, workers: int, progress):
    """Execute every concept; return per-concept counts and, chunk by chunk, the indices and
    rows of those that pass the frequency filter."""
    global _BS
    _BS = bs
    chunk = 512
    tasks = [(texts[i : i + chunk], lo, hi) for i in range(0, len(texts), chunk)]
    bar = _bar(progress, len(texts), "executing", "concept")
    counts, kept = [], []
    try:
        if workers > 1 and len(tasks) > 1:
            with mp.get_context("fork").Pool(workers) as pool:
                results = pool.imap(_execute_chunk, tasks)
                for i, (c, keep, rows) in enumerate(results):
                    counts.append(c)
                    kept.append((keep + i * chunk, rows))
                    bar.update(len(c))
        else:
            for i, t in enumerate(tasks):
                c, keep, rows = _execute_chunk(t)
                counts.append(c)
                kept.append((keep + i * chunk, rows))
                bar.update(len(c))
    finally:
        bar.close()
        _BS = None
    return (np.concatenate(counts) if counts else np.zeros(0, np.int64)), kept


def _bar(progress: bool, total: int, desc: str, unit: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=not progress)


def _synonym_groups(rows: np.ndarray) -> np.ndarray:
    """Group id per row: rows with identical bits share an id (numbered by first appearance)."""
    ids: dict[bytes, int] = {}
    out = np.empty(len(rows), np.int32)
    for i, r in enumerate(rows):
        key = hashlib.blake2b(r.tobytes(), digest_size=16).digest()
        out[i] = ids.setdefault(key, len(ids))
    return out


def _eval_set(rows: np.ndarray, counts: np.ndarray, per: int, seed: int):
    """`per` positives per concept, with replacement, each concept from its own stream."""
    ids = np.empty(len(rows) * per, np.int64)
    for i, (row, c) in enumerate(zip(rows, counts, strict=True)):
        ranks = derive_rng(seed, "eval_set", i).integers(0, c, size=per)
        ids[i * per : (i + 1) * per] = select_bits(row, ranks)
    return ids, np.repeat(np.arange(len(rows), dtype=np.int32), per)


def _write_transposed(rows: np.ndarray, num_scenes: int, path: Path, progress: bool) -> None:
    """Write the scene-major bit matrix (num_scenes, ceil(H / 64)): bit i of row s is set when
    concept i holds on scene s. Episodes and oracles read it to find, with a few word ANDs,
    every concept that holds on a handful of scenes."""
    n_concepts, n_words = rows.shape
    bar = _bar(progress, n_words, "transposing", "word")
    with open(path, "wb") as f:
        shape = (num_scenes, num_words(n_concepts))
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<u8", "fortran_order": False, "shape": shape}
        )
        for blk in transpose_blocks(rows, num_scenes):
            f.write(blk.tobytes())  # (<= 64, ceil(H / 64))
            bar.update(-(-len(blk) // 64))
    bar.close()


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
            _build_into(tmp, cfg, progress)
    return final


def _build_into(out: Path, cfg: BankConfig, progress: bool) -> None:
    timings: dict[str, float] = {}
    workers = cfg.workers or available_cores()

    t = time.perf_counter()
    scenes = sample_scenes(
        cfg.num_scenes, cfg.seed, camera=cfg.camera, layout=cfg.layout, progress=progress
    )
    bs = BitScenes.from_scenes(scenes, location_bins=cfg.location_bins)
    timings["scenes"] = time.perf_counter() - t

    t = time.perf_counter()
    draws = sample_concepts(
        cfg.num_draws, cfg.seed, max_depth=cfg.max_depth, attempts=cfg.attempts, progress=progress
    )
    timings["sampling"] = time.perf_counter() - t

    # Static rejection, collapse and de-duplication before execution: collapsing never changes
    # a concept's truth, so filtering then collapsing (the paper's order) keeps the same set.
    t = time.perf_counter()
    first: dict[str, float] = {}
    for text, logp in draws:
        first.setdefault(text, logp)
    reasons: Counter[str] = Counter()
    candidates: dict[str, tuple[float, int]] = {}
    for text, logp in first.items():
        c = parse(text)
        why = static_rejection(c)
        if why is not None:
            reasons[why] += 1
            continue
        candidates.setdefault(c.collapsed().postfix(), (logp, len(c.collapsed())))
    texts = list(candidates)
    timings["rejection"] = time.perf_counter() - t

    t = time.perf_counter()
    lo, hi = cfg.min_positives, int(np.ceil(cfg.max_fraction * cfg.num_scenes))
    counts, chunks = _run_execution(texts, bs, lo, hi, workers, progress)
    # Write the kept rows chunk by chunk, freeing each (no second copy of the matrix in memory).
    keep = np.concatenate([k for k, _ in chunks]).astype(np.int64) if chunks else np.zeros(0, int)
    with open(out / "truth.npy", "wb") as f:
        header = {"descr": "<u8", "fortran_order": False, "shape": (len(keep), bs.num_words)}
        np.lib.format.write_array_header_1_0(f, header)
        while chunks:
            f.write(np.ascontiguousarray(chunks.pop(0)[1], dtype="<u8").tobytes())
    rows = np.load(out / "truth.npy", mmap_mode="r")
    timings["execution"] = time.perf_counter() - t

    t = time.perf_counter()
    _write_transposed(rows, cfg.num_scenes, out / "truth_by_scene.npy", progress)
    timings["transposing"] = time.perf_counter() - t

    t = time.perf_counter()
    kept = [texts[i] for i in keep]
    pcfg = np.array([candidates[s][0] for s in kept], np.float64)
    lengths = np.array([candidates[s][1] for s in kept], np.int16)
    groups = _synonym_groups(rows)
    eval_ids, eval_concepts = _eval_set(rows, counts[keep], cfg.eval_per_concept, cfg.seed)
    timings["filtering"] = time.perf_counter() - t

    t = time.perf_counter()
    (out / "scenes").mkdir()
    for name, arr in scenes.arrays().items():
        np.save(out / "scenes" / f"{name}.npy", arr)
    del rows
    np.save(out / "eval_ids.npy", eval_ids)
    np.save(out / "eval_concepts.npy", eval_concepts)
    np.savez(
        out / "concepts.npz",
        group=groups,
        length=lengths,
        log_prior=length_log_prior(lengths),
        pcfg_logprob=pcfg,
        count=counts[keep],
    )
    (out / "concepts.txt").write_text("".join(s + "\n" for s in kept), encoding="utf-8")
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    config = cfg.identity()
    files = {
        f: {
            "sha256": sha256(out / f),
            "sample_sha256": sample_sha256(out / f, config),
            **describe(out, f),
        }
        for f in names
    }
    timings["writing"] = time.perf_counter() - t
    from curi import __version__

    manifest = {
        "format": FORMAT_VERSION,
        "version": __version__,
        "config": config,
        "counts": {
            "draws": cfg.num_draws,
            "successful_draws": len(draws),
            "unique_draws": len(first),
            "static_rejections": {r: reasons.get(r, 0) for r in REASONS},
            "executed": len(texts),
            "too_rare": int((counts < lo).sum()),
            "too_frequent": int((counts >= hi).sum()),
            "concepts": len(kept),
            "synonym_groups": int(groups.max() + 1) if len(groups) else 0,
            "scenes": cfg.num_scenes,
            "eval_set": len(eval_ids),
        },
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "workers": workers,
        "files": files,
    }
    text = json.dumps(seal(manifest), indent=2) + "\n"
    (out / MANIFEST).write_text(text, encoding="utf-8")
    # What load_bank checks holds for every bank published (a writer bug fails the build).
    _checked_manifest(out, json.loads(text), verify=False)
    log.info(
        "bank: %d concepts in %d synonym groups", len(kept), manifest["counts"]["synonym_groups"]
    )


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
        bins = self.config.get("location_bins", _LATER_OPTIONS["location_bins"])
        return BitScenes.from_scenes(self.scenes, location_bins=bins)

    def scene_records(self, ids) -> list[dict]:
        """JSON-ready records of scenes `ids` (see `Scenes.records`)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_scenes):
            raise IndexError(f"scene ids must be in [0, {self.num_scenes})")
        return self.scenes.records(ids)


def _reopen(path: Path) -> ConceptBank:
    return load_bank(path, verify=False)


def _checked_manifest(path: Path, raw: object, *, verify: bool) -> dict:
    """`raw`, the parsed manifest of the bank at `path`, once it and the files it lists pass
    every check (`curi.bank_format.check_manifest` and `check_files`) and its config passes the
    builder's own (`BankConfig.check`: a bank is never read by a config it could not have been
    built from).

    Raises:
        BankError: naming what is wrong.
    """
    manifest = check_manifest(path, raw, _config_types(raw))
    try:
        BankConfig(**manifest["config"]).check()
    except ConfigError as e:
        raise BankError(
            f"bank at {path} is damaged: its {MANIFEST} states a config the builder refuses "
            f"({e}); {REBUILD}"
        ) from None
    check_files(path, manifest, verify=verify)
    return manifest


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
    manifest = _checked_manifest(path, read_manifest(path, hint), verify=verify)
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
    """
    if isinstance(bank, BankConfig):
        cfg = bank
    else:
        cfg = BankConfig.preset(bank) if isinstance(bank, str) else BankConfig.from_mapping(bank)
    root = data_root(data_dir)
    if build is None:
        build = data_dir is None or root.absolute() == default_data_dir().absolute()
    if not (build or force) and not (root / str(cfg.name) / MANIFEST).is_file():
        raise BankError(_missing_bank(cfg, root))
    return cfg


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

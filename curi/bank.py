"""The concept bank (paper section 3, Appendix B): sample scenes and concepts, reject, execute,
filter, collapse and de-duplicate, group synonyms, draw the mAP evaluation set, and store it all
with a manifest of checksums; `load_bank` verifies and memory-maps it back as a `ConceptBank`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import multiprocessing as mp
import os
import shutil
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from curi.atomic import atomic_dir, temporaries
from curi.bits import num_words, popcount, select_bits, transpose_blocks, unpack_rows
from curi.concepts import Concept, parse
from curi.errors import BankError, ConfigError, known_options
from curi.executor import BitScenes, execute
from curi.grammar import sample_concepts
from curi.presets import load_preset
from curi.prior import length_log_prior
from curi.rejection import REASONS, static_rejection
from curi.rng import derive_rng
from curi.scenes import Camera, Scenes, sample_scenes

__all__ = ["BankConfig", "ConceptBank", "build_bank", "load_bank", "default_data_dir"]

log = logging.getLogger(__name__)
FORMAT_VERSION = 2  # 2: adds the scene-major truth_by_scene.npy
_SCENE_FILES = ("n_objects", "props", "position", "rotation", "pixel")


@dataclass(frozen=True)
class BankConfig:
    """What a bank is made of. Every field but `workers` is part of the bank's identity.

    Attributes:
        name: directory name of the bank under the data directory.
        num_scenes: scenes in the universe U (paper: about 1,000,000).
        num_draws: grammar draws (paper: 2,000,000).
        seed: the seed of every random choice.
        max_depth: depth at which a non-terminal may no longer be expanded (paper: 6).
        attempts: attempts per failed child (12).
        min_positives: keep a concept only if it holds on at least this many scenes (11: "more
            than 10", so support and query can each get 5 distinct positives).
        max_fraction: keep a concept only if it holds on fewer than this share of scenes (0.1).
        eval_per_concept: positives per concept in the mAP evaluation set (3).
        image_width, image_height: the camera's image size that defines location bins.
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
    workers: int = 0

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> BankConfig:
        """Build from a mapping (e.g. a Hydra node); unknown keys are an error."""
        out = cls(**known_options(cls, cfg, "bank"))
        out.check()
        return out

    @classmethod
    def preset(cls, name: str, **overrides) -> BankConfig:
        """A bank preset by name (``tiny``, ``default``, ``paper``: the files of `conf/bank`),
        with any field overridden, e.g. ``BankConfig.preset("tiny", workers=1)``.

        Raises:
            ConfigError: an unknown preset (the message lists the known ones) or field.
        """
        return cls.from_mapping({**load_preset("bank", name), **overrides})

    def check(self) -> None:
        """Raise ConfigError for values out of range."""
        if self.num_scenes < 10:
            raise ConfigError(f"bank.num_scenes must be >= 10, got {self.num_scenes}")
        if self.num_draws < 1:
            raise ConfigError(f"bank.num_draws must be >= 1, got {self.num_draws}")
        if not 0 < self.max_fraction <= 1:
            raise ConfigError(f"bank.max_fraction must be in (0, 1], got {self.max_fraction}")
        if self.min_positives < 1 or self.eval_per_concept < 1 or self.seed < 0:
            raise ConfigError("bank.min_positives, eval_per_concept must be >= 1 and seed >= 0")

    def identity(self) -> dict:
        """The fields that determine the bank's content."""
        d = dataclasses.asdict(self)
        d.pop("workers")
        return d

    @property
    def camera(self) -> Camera:
        return Camera(width=self.image_width, height=self.image_height)


def default_data_dir() -> Path:
    """``$CURI_DATA_DIR``, else the user cache folder (``$XDG_CACHE_HOME/curi``)."""
    if os.environ.get("CURI_DATA_DIR"):
        return Path(os.environ["CURI_DATA_DIR"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "curi"


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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


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
    that loads, and the next build starts cleanly.

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
        BankError: a different bank already occupies the directory (and not `force`).
    """
    if isinstance(cfg, str):
        cfg = BankConfig.preset(cfg)
    elif not isinstance(cfg, BankConfig):
        cfg = BankConfig.from_mapping(cfg)
    cfg.check()
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    final = root / cfg.name
    if final.exists() and not force:
        bank = load_bank(final)
        if bank.config != cfg.identity():
            diff = sorted(k for k, v in cfg.identity().items() if bank.config.get(k) != v)
            raise BankError(
                f"a different bank already exists at {final} (differs in {diff}); delete it, "
                f"rebuild with force=true, or choose another data_dir or bank name"
            )
        log.info("bank %s already built; reusing it", final)
        return final
    root.mkdir(parents=True, exist_ok=True)
    for stale in temporaries(final):
        shutil.rmtree(stale, ignore_errors=True)
    with atomic_dir(final) as tmp:
        _build_into(tmp, cfg, progress)
    return final


def _build_into(out: Path, cfg: BankConfig, progress: bool) -> None:
    timings: dict[str, float] = {}
    workers = cfg.workers or os.cpu_count() or 1

    t = time.perf_counter()
    scenes = sample_scenes(cfg.num_scenes, cfg.seed, camera=cfg.camera, progress=progress)
    bs = BitScenes.from_scenes(scenes)
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
    (out / "concepts.txt").write_text("".join(s + "\n" for s in kept))
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    checksums = {f: _sha256(out / f) for f in files}
    timings["writing"] = time.perf_counter() - t
    from curi import __version__

    manifest = {
        "format": FORMAT_VERSION,
        "version": __version__,
        "config": cfg.identity(),
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
        "files": checksums,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
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
        self.concepts: list[str] = (path / "concepts.txt").read_text().splitlines()
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

    def scene_records(self, ids) -> list[dict]:
        """JSON-ready records of scenes `ids` (see `Scenes.records`)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_scenes):
            raise IndexError(f"scene ids must be in [0, {self.num_scenes})")
        return self.scenes.records(ids)


def _reopen(path: Path) -> ConceptBank:
    return load_bank(path, verify=False)


def load_bank(path: str | Path, *, verify: bool = True) -> ConceptBank:
    """Load a bank directory written by `build_bank`.

    Args:
        path: the bank directory.
        verify: check every file's checksum against the manifest.

    Raises:
        BankError: missing directory or manifest, unknown format, missing or corrupt file.
    """
    path = Path(path).expanduser()
    hint = "build it with `curi bank bank=<preset> data_dir=<dir>`"
    if not path.is_dir():
        raise BankError(f"bank not found at {path}; {hint}")
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except FileNotFoundError:
        raise BankError(f"{path} has no manifest.json: not a complete bank; {hint}") from None
    except json.JSONDecodeError as e:
        raise BankError(f"{path}/manifest.json is corrupt ({e}); rebuild the bank") from None
    if manifest.get("format") != FORMAT_VERSION:
        raise BankError(
            f"bank at {path} has format {manifest.get('format')}, this curi reads "
            f"{FORMAT_VERSION}; rebuild it (add force=true to the command)"
        )
    for name, digest in manifest["files"].items():
        f = path / name
        if not f.is_file():
            raise BankError(f"bank at {path} is missing {name}; rebuild it (force=true)")
        if verify and _sha256(f) != digest:
            raise BankError(f"bank file {f} is corrupt (checksum mismatch); rebuild it")
    return ConceptBank(path, manifest)

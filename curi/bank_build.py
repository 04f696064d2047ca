"""Writing a concept bank's files (paper section 3, Appendix B.2): `build_into` samples,
executes across processes, filters and groups the concepts of a `BankConfig` and writes every
file and the sealed manifest into a fresh folder; `curi.bank.build_bank` runs it under the
bank's lock and publishes the folder."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np

from curi.bank_config import BankConfig, checked_manifest
from curi.bank_format import FORMAT_VERSION, MANIFEST, describe, sample_sha256, seal, sha256
from curi.bits import num_words, popcount, select_bits, transpose_blocks
from curi.concepts import parse
from curi.executor import BitScenes, execute
from curi.grammar import CHUNK, sample_chunk
from curi.machine import available_cores
from curi.prior import length_log_prior
from curi.rejection import REASONS, static_rejection
from curi.rng import derive_rng
from curi.scenes import sample_scenes
from curi.signals import Interrupted, stop_on_signals, worker_pool

__all__ = ["build_into"]

log = logging.getLogger("curi.bank")


def build_into(out: Path, cfg: BankConfig, progress: bool) -> None:
    """Write the bank `cfg` describes into the empty folder `out` (paper Appendix B.2): sample
    scenes and concepts, reject and de-duplicate, execute and filter, group synonyms, draw the
    evaluation set, then the files and the sealed manifest, checked as `load_bank` checks it.

    Ctrl-C or SIGTERM stops the build (`curi.signals.Interrupted`: exit status 130 or 143)
    with one logged line, its workers ended; `out` is the caller's temporary folder
    (`curi.atomic.atomic_dir`), so nothing is published and a bank already there is kept. Under
    a command that answers the signals itself (`curi gap`), that command says what it kept."""
    try:
        with stop_on_signals() as ours:
            _build_into(out, cfg, progress)
    except Interrupted as stop:
        if ours:
            final = out.parent / cfg.name  # `out` is its temporary, beside it
            log.warning(
                "bank build %s; nothing published at %s (a bank already there is unchanged); "
                "the same command builds it",
                stop,
                final,
            )
        raise


def _build_into(out: Path, cfg: BankConfig, progress: bool) -> None:
    """`build_into`'s work, its signals handled there."""
    timings: dict[str, float] = {}
    workers = cfg.workers or available_cores()
    with _timed(timings, "scenes"):
        scenes = sample_scenes(
            cfg.num_scenes, cfg.seed, camera=cfg.camera, layout=cfg.layout, progress=progress
        )
        bs = BitScenes.from_scenes(scenes, location_bins=cfg.location_bins)
    with worker_pool(mp.get_context("fork"), workers) if workers > 1 else nullcontext() as pool:
        with _timed(timings, "sampling"):
            draws = _sample(cfg, pool, progress)
        with _timed(timings, "rejection"):
            first, reasons, candidates = _candidates(draws, pool)
    texts = list(candidates)
    with _timed(timings, "execution"):
        lo, hi = cfg.min_positives, int(np.ceil(cfg.max_fraction * cfg.num_scenes))
        counts, chunks = _run_execution(texts, bs, lo, hi, workers, progress)
        keep, rows = _write_truth(out / "truth.npy", chunks, bs.num_words)
    with _timed(timings, "transposing"):
        _write_transposed(rows, cfg.num_scenes, out / "truth_by_scene.npy", progress)
    with _timed(timings, "filtering"):
        kept = [texts[i] for i in keep]
        groups = _synonym_groups(rows)
        eval_ids, eval_concepts = _eval_set(rows, counts[keep], cfg.eval_per_concept, cfg.seed)
    with _timed(timings, "writing"):
        (out / "scenes").mkdir()
        for name, arr in scenes.arrays().items():
            np.save(out / "scenes" / f"{name}.npy", arr)
        del rows
        np.save(out / "eval_ids.npy", eval_ids)
        np.save(out / "eval_concepts.npy", eval_concepts)
        _write_concepts(out, kept, candidates, groups, counts[keep])
        files = _file_records(out, cfg.identity())
    counted = {
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
    }
    _write_manifest(out, cfg, counted, timings, workers, files)
    log.info("bank: %d concepts in %d synonym groups", len(kept), counted["synonym_groups"])


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    """Record the seconds the block takes as ``timings[stage]``."""
    t = time.perf_counter()
    yield
    timings[stage] = time.perf_counter() - t


def _sample(cfg: BankConfig, pool, progress: bool) -> list[tuple[str, float]]:
    """`sample_concepts`'s draws, its chunks (each its own stream) drawn by `pool`'s workers
    (or here, without a pool)."""
    tasks = [
        (c, min(CHUNK, cfg.num_draws - c * CHUNK), cfg) for c in range(-(-cfg.num_draws // CHUNK))
    ]
    out: list[tuple[str, float]] = []
    with _bar(progress, cfg.num_draws, "sampling", "draw") as bar:
        for task, got in zip(tasks, _map(pool, _sample_chunk, tasks), strict=True):
            out += got
            bar.update(task[1])
    return out


def _sample_chunk(task: tuple[int, int, BankConfig]) -> list[tuple[str, float]]:
    c, m, cfg = task
    return sample_chunk(c, m, cfg.seed, max_depth=cfg.max_depth, attempts=cfg.attempts)


def _map(pool, fn, tasks: list):
    """``fn`` of every task, in order: by the pool's workers, or here without one."""
    return map(fn, tasks) if pool is None else pool.imap(fn, tasks)


def _screen(texts: list[str]) -> list[tuple[str | None, str, int]]:
    """(static rejection reason or None, the collapsed postfix, its length) of each draw."""
    out = []
    for text in texts:
        c = parse(text)
        why = static_rejection(c)
        if why is not None:
            out.append((why, "", 0))
        else:
            collapsed = c.collapsed()
            out.append((None, collapsed.postfix(), len(collapsed)))
    return out


def _candidates(draws, pool) -> tuple[dict[str, float], Counter, dict[str, tuple[float, int]]]:
    """(first log-probability of each distinct draw, static rejections by reason, the
    collapsed postfix of each concept kept -> (log-probability, length)); the distinct draws
    are screened in slices by `pool`'s workers. Static rejection, collapse and
    de-duplication come before execution: collapsing never changes a concept's truth, so
    filtering then collapsing (the paper's order) keeps the same set."""
    first: dict[str, float] = {}
    for text, logp in draws:
        first.setdefault(text, logp)
    texts = list(first)
    size = -(-len(texts) // 16) or 1
    slices = [texts[i : i + size] for i in range(0, len(texts), size)]
    reasons: Counter[str] = Counter()
    candidates: dict[str, tuple[float, int]] = {}
    screened = (x for part in _map(pool, _screen, slices) for x in part)
    for logp, (why, postfix, length) in zip(first.values(), screened, strict=True):
        if why is not None:
            reasons[why] += 1
            continue
        candidates.setdefault(postfix, (logp, length))
    return first, reasons, candidates


def _write_truth(path: Path, chunks: list, num_words: int) -> tuple[np.ndarray, np.ndarray]:
    """Write the kept rows chunk by chunk, freeing each (no second copy of the matrix in
    memory); returns the kept concepts' indices and the rows, memory-mapped from `path`."""
    keep = np.concatenate([k for k, _ in chunks]).astype(np.int64) if chunks else np.zeros(0, int)
    with open(path, "wb") as f:
        header = {"descr": "<u8", "fortran_order": False, "shape": (len(keep), num_words)}
        np.lib.format.write_array_header_1_0(f, header)
        while chunks:
            f.write(np.ascontiguousarray(chunks.pop(0)[1], dtype="<u8").tobytes())
    return keep, np.load(path, mmap_mode="r")


def _write_concepts(out: Path, kept: list[str], candidates: dict, groups, counts) -> None:
    """concepts.npz (group, length, priors, count of each kept concept) and concepts.txt."""
    lengths = np.array([candidates[s][1] for s in kept], np.int16)
    np.savez(
        out / "concepts.npz",
        group=groups,
        length=lengths,
        log_prior=length_log_prior(lengths),
        pcfg_logprob=np.array([candidates[s][0] for s in kept], np.float64),
        count=counts,
    )
    (out / "concepts.txt").write_text("".join(s + "\n" for s in kept), encoding="utf-8")


def _file_records(out: Path, config: dict) -> dict[str, dict]:
    """Every file under `out` -> its SHA-256, sample digest, size, shape and dtype."""
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    return {
        f: {
            "sha256": sha256(out / f),
            "sample_sha256": sample_sha256(out / f, config),
            **describe(out, f),
        }
        for f in names
    }


def _write_manifest(out, cfg: BankConfig, counts: dict, timings: dict, workers: int, files):
    """The sealed manifest, checked as `curi.bank.load_bank` checks it (a writer bug fails
    the build, so what load_bank checks holds for every bank published)."""
    from curi import __version__

    manifest = {
        "format": FORMAT_VERSION,
        "version": __version__,
        "config": cfg.identity(),
        "counts": counts,
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "workers": workers,
        "files": files,
    }
    text = json.dumps(seal(manifest), indent=2) + "\n"
    (out / MANIFEST).write_text(text, encoding="utf-8")
    checked_manifest(out, json.loads(text), verify=False)


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
            with worker_pool(mp.get_context("fork"), workers) as pool:
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

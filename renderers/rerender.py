"""Re-rendering exported episodes (`curi episodes ... out=FILE`) in one modality: a compressed
``.npz`` per episode with the support and query arrays, labels and ids, optional PNG or WAV
files per scene with a ``metadata.jsonl`` of their labels (so Hugging Face ``imagefolder``
reads the pictures with labels and episodes; the WAVs are read from the same table with the
``json`` loader and decoded with soundfile, as the README shows: ``audiofolder`` needs
torchcodec and FFmpeg), and an ``index.json`` that lists them."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import itertools
import json
import logging
import multiprocessing
import os
import signal
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

from curi.atomic import atomic_dir, atomic_path, remove, write_text
from curi.errors import CuriError
from curi.export import EpisodeFileError, card_path, count_episodes, read_episode_file
from curi.export.parts import (
    Part,
    check_jobs,
    parts_folder,
    plan_parts,
    run_parts,
    staging_folder,
)
from curi.machine import available_cores
from curi.renderers.base import Renderer
from curi.signals import worker_signals

__all__ = [
    "MAX_WORKERS",
    "METADATA",
    "NPZ_LEVEL",
    "MediaFiles",
    "default_workers",
    "media",
    "render_episode_file",
]

log = logging.getLogger(__name__)


_FEATURES = {".png": "Image", ".wav": "Audio"}  # Hugging Face feature of each file type


class MediaFiles:
    """Rendered files of scene records for exports (`curi.export.Media`): PNG (image) or WAV
    (sound) bytes per record, from a renderer with per-scene files; `imap` renders many sets
    in worker processes, as `render_episode_file` does."""

    def __init__(self, renderer: Renderer) -> None:
        if renderer.file_suffix not in _FEATURES or not hasattr(renderer, "file_bytes"):
            raise ValueError(
                f"the {renderer.name} renderer writes no per-scene files; use image or sound"
            )
        self.renderer = renderer
        self.suffix = renderer.file_suffix
        self.feature = _FEATURES[self.suffix]

    def __call__(self, records) -> list[bytes]:
        return self.renderer.file_bytes(records)

    def imap(
        self, sets: Iterable[Sequence[dict]], *, workers: int | None = 1, threads: int | None = None
    ) -> Iterator[list[bytes]]:
        """The files of each set of records, in order: here with `threads` torch threads, or
        in `workers` processes with one thread each, which take at most two sets each ahead
        (a renderer on a GPU renders here). The bytes are the same for any number of either.

        Args:
            sets: scene records, one list per episode.
            workers: processes (None: `default_workers`, one per core); 1: this process.
            threads: torch CPU threads while rendering here (None: leave them as they are).
        """
        workers = default_workers() if workers is None else workers
        if torch.device(getattr(self.renderer, "device", "cpu")).type != "cpu":
            workers = 1  # a forked process cannot use the parent's CUDA context
        jobs = ((records,) for records in sets)
        with _torch_threads(threads if workers == 1 else None):
            yield from _in_order(self.renderer, _file_bytes, jobs, workers)


def _file_bytes(renderer: Renderer, records: Sequence[dict]) -> list[bytes]:
    return renderer.file_bytes(records)


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """Torch CPU threads set to `threads` for the block (None: unchanged), then put back."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def media(modality: str | Renderer, **options) -> MediaFiles:
    """The rendered files of `modality` (``image`` or ``sound``, with the renderer's options,
    or a renderer) for `curi.export.export_episodes` (``media=``).

    Raises:
        ValueError: an unknown modality, a bad option, or one without files (schema).
    """
    from curi.renderers import get_renderer

    renderer = modality if isinstance(modality, Renderer) else get_renderer(modality, **options)
    return MediaFiles(renderer)


METADATA = "metadata.jsonl"
"""The per-file table of re-rendered files, in the name and format that Hugging Face's
``imagefolder`` (and, with torchcodec, ``audiofolder``) read beside the files: one JSON
object per file with ``file_name`` (relative to the folder), ``episode``, ``set`` (support /
query), ``label`` (1 positive, 0 negative), ``scene_id`` and ``concept_text``."""


def _metadata_rows(ep: dict, episode: int, folder: str, names: list[str], suffix: str) -> str:
    """The `METADATA` lines of one episode's files, in file order."""
    ns = len(ep["support_records"])
    labels = list(ep["support_labels"]) + list(ep["query_labels"])
    ids = list(ep.get("support_ids", [])) + list(ep.get("query_ids", []))
    rows = []
    for i, name in enumerate(names):
        row = {
            "file_name": f"{folder}/{name}{suffix}",
            "episode": episode,
            "set": "support" if i < ns else "query",
            "label": int(labels[i]),
            "scene_id": int(ids[i]) if ids else None,
            "concept_text": ep["concept_text"],
        }
        rows.append(json.dumps(row) + "\n")
    return "".join(rows)


NPZ_LEVEL = 1
"""zlib level of the ``.npz`` arrays: 1 wrote an episode of 240 x 160 images in a third of the
CPU time of ``np.savez_compressed`` (level 6; 0.8 against 2.5 ms per image) for a file 1.5x
larger (1.04 against 0.69 MB), the same arrays to the bit (docs/benchmarks.md)."""

MAX_WORKERS = 8
"""Most processes `default_workers` starts, each with its own renderer, on a machine with
more cores (a bound on memory; ask for more with ``workers``)."""


def default_workers() -> int:
    """One worker process per core this process may run on, at most `MAX_WORKERS`."""
    return min(available_cores(), MAX_WORKERS)


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez_compressed`` at zlib level `NPZ_LEVEL` (numpy fixes level 6): a zip of one
    ``<key>.npy`` per array, which ``np.load`` reads; written atomically."""
    with (
        atomic_path(path) as tmp,
        zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=NPZ_LEVEL) as z,
    ):
        for key, a in arrays.items():
            with z.open(f"{key}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=False)


def render_episode_file(
    path: str | Path,
    out: str | Path,
    renderer: Renderer,
    *,
    files: bool = True,
    limit: int | None = None,
    progress: bool = True,
    options: dict | None = None,
    workers: int = 1,
    jobs: int = 1,
    launcher=None,
) -> Path:
    """Re-render the episodes of an exported file with `renderer`.

    Each episode is published in one step: its files are written into a temporary folder
    renamed into place once (`curi.atomic.atomic_dir`), then its ``.npz``; ``index.json``
    comes last. An interrupted run leaves no half-written episode under a final name and no
    ``index.json``; running again replaces what it left.

    Args:
        path: the exported file (`curi.export.export_episodes`).
        out: output directory (created). Per episode k: ``episode_<k>.npz`` with ``support``,
            ``query`` (see ``index.json`` for dtypes and shapes), ``support_labels``,
            ``query_labels``, ``support_ids``, ``query_ids``, ``concept_text`` (and the masks
            of per-object modalities); with `files`, ``episode_<k>/support_<NN>.png`` (image)
            or ``.wav`` (sound) per scene (`Renderer.export`, `Renderer.file_suffix`), listed
            with their labels in `METADATA` (``datasets.load_dataset("imagefolder",
            data_dir=out)`` then reads images with ``label``, ``episode``, ``set``, ...).
        renderer: the modality's renderer (`curi.renderers.get_renderer`).
        files: also write the per-scene PNG / WAV files.
        limit: render only the first `limit` episodes.
        progress: show a progress bar.
        options: the renderer's options, recorded in the index.
        workers: processes rendering episodes side by side (`default_workers`: one per core),
            each with one torch thread; the output is the same for any number. 1: render in
            this process (with its torch threads), as does a renderer on a GPU.
        jobs: split the episodes into that many ranges, each rendered by a job of `launcher`
            (a `curi.jobs.Launcher`; None: one after another in this process) in its own
            process with the launcher's threads; each job records its index entries in a part
            of the hidden staging folder ``.<out name>.parts/`` beside `out`
            (`curi.export.parts`), reused by the next call with the same settings, and this
            process then writes `METADATA` and ``index.json``: the same files as one job.

    Returns:
        The path of ``index.json``, written last.

    Raises:
        EpisodeFileError: a missing, empty or corrupt episode file, or bad scene records.
        ValueError: `limit` or `workers` below 1.
    """
    _check_counts(limit, workers)
    path, out = Path(path), Path(out)
    episodes = read_episode_file(path, limit=limit)
    first = next(episodes)  # fails early and cleanly on a missing or corrupt file
    out.mkdir(parents=True, exist_ok=True)
    with_files = bool(files and renderer.file_suffix)
    total = count_episodes(path, limit)
    workers = _usable_workers(renderer, workers, total)
    jobs = check_jobs(jobs)
    if jobs > 1 and total is None:
        for _ in episodes:  # the reader says what is wrong with the file
            pass
    if jobs > 1 and total is not None and total > 1:
        episodes.close()
        entries = _render_in_jobs(path, out, renderer, with_files, total, options, jobs, launcher)
    else:
        episodes = itertools.chain([first], episodes)
        entries = _render_here(path, out, renderer, episodes, with_files, total, workers, progress)
    index = _write_index(path, out, renderer, options, with_files, entries)
    if jobs > 1:
        remove(staging_folder(out), root=out.parent)
    log.info("re-rendered %d episodes as %s into %s", len(entries), renderer.name, out)
    return index


def _check_counts(limit: int | None, workers: int) -> None:
    """Refuse a `limit` or a number of `workers` below 1 (`render_episode_file`).

    Raises:
        ValueError: naming the argument and its value.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")


def _write_index(
    path: Path, out: Path, renderer: Renderer, options, with_files: bool, entries: list[dict]
) -> Path:
    """Write ``index.json`` of the re-rendered episodes `entries` of `path` into `out` (last,
    once every episode is in place): the source, the renderer and its `options`, the items'
    shape and format, and `METADATA` with `with_files`. Returns its path."""
    index = {
        "source": str(path.resolve()),
        "modality": renderer.name,
        "options": options or {},
        "item_shape": list(renderer.item_shape),
        "format": renderer.storage_format,
        "count": len(entries),
        "metadata": METADATA if with_files else None,
        "episodes": entries,
    }
    return write_text(out / "index.json", json.dumps(index, indent=1))


def _usable_workers(renderer: Renderer, workers: int, total: int | None) -> int:
    """`workers`, but 1 for a renderer off the CPU and at most the number of episodes."""
    if torch.device(getattr(renderer, "device", "cpu")).type != "cpu":
        workers = 1  # a forked process cannot use the parent's CUDA context
    if total is not None:
        workers = min(workers, total)
    return workers


def _render_here(
    path: Path, out: Path, renderer: Renderer, episodes, with_files, total, workers, progress
) -> list[dict]:
    """Render `episodes` in this process (and `workers` side by side) into `out`, streaming
    `METADATA` with `with_files`; returns their index entries in order."""
    tasks = ((path, out, k, ep, with_files) for k, ep in enumerate(episodes))
    with contextlib.ExitStack() as stack:
        table = None
        if with_files:  # streamed to a temporary name, renamed into place when all is written
            tmp = stack.enter_context(atomic_path(out / METADATA))
            table = stack.enter_context(open(tmp, "w"))
        done = stack.enter_context(
            contextlib.closing(_in_order(renderer, _render_episode, tasks, workers))
        )
        return _collect(done, table, total, progress, renderer.name)


def _render_in_jobs(
    path: Path,
    out: Path,
    renderer: Renderer,
    with_files: bool,
    total: int,
    options: dict | None,
    jobs: int,
    launcher,
) -> list[dict]:
    """Render episodes 0..total-1 of `path` into `out` in `jobs` jobs of ranges (the parts
    earlier calls with the same settings finished, their files unchanged, are reused), then
    write `METADATA` from the parts, in order, each checked again first; returns the index
    entries.

    Raises:
        CuriError: a part that changed after its job was checked.
    """
    import dataclasses

    from curi.jobs import Job, Launcher

    source = path if path.is_file() else card_path(path)
    stat = source.stat() if source.is_file() else None
    settings = {
        "curi_render_parts": 1,
        "source": str(path.resolve()),
        "source_file": [source.name, stat.st_size, stat.st_mtime_ns] if stat else None,
        "renderer": type(renderer).__name__,
        "renderer_options": {
            k: v if isinstance(v, bool | int | float | str | type(None)) else str(v)
            for k, v in sorted(vars(renderer).items())
            if not k.startswith("_") and isinstance(v, bool | int | float | str | torch.device)
        },
        "options": options or {},
        "files": with_files,
        "episodes": total,
        "jobs": min(jobs, total),
    }
    parts = plan_parts(parts_folder(out, settings), total, jobs, tar=False)
    launcher = launcher or Launcher("basic")
    if launcher.folder is None:
        launcher = dataclasses.replace(launcher, folder=staging_folder(out))

    def job(part: Part) -> Job:
        return Job(
            f"{out.name}:{part.name}", _render_range, (renderer, path, out, with_files, part)
        )

    run_parts(parts, job, launcher, what=f"render {path} into {out}")
    entries: list[dict] = []
    with contextlib.ExitStack() as stack:
        table = None
        if with_files:
            table = stack.enter_context(open(stack.enter_context(atomic_path(out / METADATA)), "w"))
        for part in parts:
            meta = part.marker()
            if meta is None:
                raise CuriError(
                    f"render {path} into {out}: {part.name} changed after it was checked (its "
                    "marker or files); run the same command again to redo it"
                )
            entries += meta["entries"]
            if table is not None:
                table.write(meta["rows"])
    return entries


def _render_range(renderer: Renderer, path: Path, out: Path, with_files: bool, part: Part) -> int:
    """A job of `render_episode_file`: episodes ``part.start..part.stop-1`` of `path` rendered
    into `out` (here, with the torch threads the launcher set), their index entries and
    `METADATA` rows kept in the part's completion marker with the size and SHA-256 of every
    file they wrote."""
    episodes = read_episode_file(path, start=part.start, limit=part.stop)
    entries, rows, files = [], [], []
    for k, ep in enumerate(episodes, part.start):
        entry, row = _render_episode(renderer, path, out, k, ep, with_files)
        entries.append(entry)
        rows.append(row)
        files.append(out / entry["npz"])
        if entry["files"]:
            files += sorted(p for p in (out / entry["files"]).iterdir() if p.is_file())
    part.finish(files, entries=entries, rows="".join(rows))
    return len(entries)


def _collect(done, table, total, progress, name: str) -> list[dict]:
    """The index entries of the rendered episodes `done` (in order), writing their `METADATA`
    rows to `table` when given."""
    from tqdm import tqdm

    entries = []
    with tqdm(total=total, desc=f"render {name}", unit="episode", disable=not progress) as bar:
        for entry, rows in done:
            entries.append(entry)
            if table is not None:
                table.write(rows)
            bar.update()
    return entries


_RENDERER: Renderer | None = None  # a worker process's renderer (`_start_worker`)


def _start_worker(renderer: Renderer, parent: int) -> None:
    """Set up a worker process of the process `parent`: its renderer (inherited when forked),
    one torch thread (a forked process hangs in OpenMP if its parent started OpenMP threads:
    seen with ``threads=null``; and one thread per process was the fastest on 2 cores), a
    `_keep_freed_memory` allocator, and its end with its parent's (`_die_with_parent`)."""
    global _RENDERER
    _RENDERER = renderer
    worker_signals()
    torch.set_num_threads(1)
    _keep_freed_memory()
    _die_with_parent(parent)


_PR_SET_PDEATHSIG = 1  # Linux's prctl option (sys/prctl.h)


def _die_with_parent(parent: int) -> bool:
    """Have the kernel kill this worker when its parent process ends, even by SIGKILL: the
    workers of a killed parent otherwise waited forever on their job queue, holding what
    they inherited (an export's lock, `curi.atomic.exclusive`). Returns whether it was set
    (only on Linux); a parent already gone ends the worker at once."""
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError, TypeError):  # not Linux
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong]
    if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        return False
    if os.getppid() != parent:  # it ended before the line above
        os._exit(1)
    return True


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def _keep_freed_memory() -> bool:
    """Have glibc's malloc keep the memory a worker frees for its next episode instead of
    handing it back to the system: an episode's images and their temporaries (tens of MB) were
    otherwise mapped afresh each time, and the page faults cost about 0.7 ms of system CPU time
    per image (of 6-7 in all). The price: a worker's resident memory stays at its peak, about
    35 MB above (690 against 655 MB over 40 episodes). Returns whether it was set (only on
    glibc: elsewhere nothing is done)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # not glibc (or no C library to load)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    # Blocks up to 32 MiB (glibc's most) from the heap, not from a mapping of their own; and
    # free memory at the heap's top is kept up to 1 GiB.
    heap = mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    return bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30) and heap)


def _work(task: tuple[Callable, tuple]):
    """``fn(renderer, *job)`` in a worker process, with its renderer."""
    fn, job = task
    return fn(_RENDERER, *job)


def _in_order(renderer: Renderer, fn: Callable, jobs: Iterator[tuple], workers: int) -> Iterator:
    """``fn(renderer, *job)`` of every job (`fn` a module-level function, so a worker can be
    sent it), in job order: here, or in `workers` processes with at most two jobs each in
    flight (so a long file is read as it is rendered)."""
    if workers == 1:
        yield from (fn(renderer, *job) for job in jobs)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = ProcessPoolExecutor(workers, context, _start_worker, (renderer, os.getpid()))
    try:
        pending = collections.deque(
            pool.submit(_work, (fn, job)) for job in itertools.islice(jobs, 2 * workers)
        )
        while pending:
            result = pending.popleft().result()
            pending.extend(pool.submit(_work, (fn, job)) for job in itertools.islice(jobs, 1))
            yield result
    finally:
        pool.shutdown(cancel_futures=True)


def _render_episode(renderer: Renderer, path: Path, out: Path, k: int, ep: dict, with_files: bool):
    """Render episode `ep`, the `k`-th of the file `path`, into `out`: its files (when
    `with_files`) in a folder published at once, then its ``.npz``. Returns its index entry
    and its `METADATA` rows."""
    stem = f"episode_{k:05d}"
    ns, nq = len(ep["support_records"]), len(ep["query_records"])
    names = [f"support_{i + 1:02d}" for i in range(ns)]
    names += [f"query_{i + 1:02d}" for i in range(nq)]
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(atomic_dir(out / stem)) if with_files else None
        try:
            arr = renderer.export(ep["support_records"] + ep["query_records"], folder, names)
        except (ValueError, KeyError, TypeError) as e:  # pack_records on malformed records
            raise EpisodeFileError(f"{path} episode {k}: bad scene records: {e!s}") from None
    npz = {
        "concept_text": np.asarray(ep["concept_text"]),
        "support_labels": np.asarray(ep["support_labels"], np.int8),
        "query_labels": np.asarray(ep["query_labels"], np.int8),
        "support_ids": np.asarray(ep.get("support_ids", []), np.int64),
        "query_ids": np.asarray(ep.get("query_ids", []), np.int64),
    }
    for key, a in arr.items():
        suffix = "" if key == "data" else f"_{key}"
        npz[f"support{suffix}"], npz[f"query{suffix}"] = a[:ns], a[ns:]
    _save_npz(out / f"{stem}.npz", npz)
    index = ep.get("index", k)
    entry = {
        "index": index,
        "concept_text": ep["concept_text"],
        "npz": f"{stem}.npz",
        "files": f"{stem}/" if with_files else None,
    }
    rows = _metadata_rows(ep, index, stem, names, renderer.file_suffix) if with_files else ""
    return entry, rows

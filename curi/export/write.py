"""Writing an export: the checks of its options, the episodes (with their rendered files)
sampled here or by jobs (`curi.export.parts`), the files written in their format
(`curi.export.formats`) and published as a whole, and the card written last.

An export is published as a whole: its files (the JSON-lines file, or every tar shard) are
written under temporary names and renamed into place only once all are complete, and the
dataset card comes last. An export replaces only the files that earlier exports to the same
path wrote (its card's list), never another export's or a user's file beside it, and two
exports to the same path at once are refused (a lock)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from curi import validate
from curi.atomic import exclusive, remove, write_text
from curi.episodes import Episode, EpisodeSampler, EpisodeSpec
from curi.errors import ConfigError
from curi.export.card import CARD_FORMAT, card_path, card_text
from curi.export.files import (
    FORMAT_LIST,
    brace_pattern,
    format_of,
    kind,
    owned,
    publishing,
    remove_dead_temporaries,
)
from curi.export.formats import Item, stage, stage_shards, write_lines, write_parquet
from curi.export.media import NO_FILES_IN_LINES, Media
from curi.export.parts import (
    Part,
    check_jobs,
    parts_folder,
    plan_parts,
    read_items,
    run_parts,
    staging_folder,
    write_items,
)
from curi.paths import output_path
from curi.splits import Split

__all__ = [
    "check_export_options",
    "check_export_path",
    "check_render_options",
    "export_episodes",
]


def check_export_options(n, shard_size, seed) -> tuple[int, int, int]:
    """(n, shard_size, seed) as ints once in range: 1 <= n <= `curi.validate.MAX_EPISODES`
    (``n=10**12`` would fill the disk, ``n=-1`` wrote an empty file), shard_size >= 1 and a
    non-negative integer seed; cheap, so `curi episodes` checks them before opening the bank.

    Raises:
        ConfigError: naming the key, the value and the allowed range.
    """
    n = validate.integer(n, "n", low=1, high=validate.MAX_EPISODES)
    shard_size = validate.integer(shard_size, "shard_size", low=1, high=validate.MAX_EPISODES)
    return n, shard_size, validate.seed(seed)


def check_export_path(out) -> Path:
    """`out` as a path, once it names a file an export can be written to: not empty, not a
    folder, ending in one of `FORMATS` (``eps.xyz`` wrote JSON lines, ``x.tar.gz`` gzipped
    JSON lines, not a tar), its nearest existing parent a folder; cheap, so `curi episodes`
    checks it before opening the bank.

    Raises:
        ConfigError: naming ``out=``, the value and what to give instead.
    """
    if not isinstance(out, str | Path) or not str(out).strip():
        raise ConfigError(
            f"out={out!r} names no file; give the export to write, e.g. out=episodes.jsonl "
            f"(formats: {FORMAT_LIST})"
        )
    path = Path(out)
    if os.path.isdir(path):  # False for a name too long, as for any path that cannot exist
        raise ConfigError(
            f"out={out} is a folder; give a file in it, e.g. out={path / 'episodes.jsonl'}"
        )
    if format_of(path) is None:
        raise ConfigError(
            f"out={out}: unknown format; the file name must end in one of {FORMAT_LIST} "
            "(JSON lines, gzip-compressed JSON lines, parquet, WebDataset tar shards)"
        )
    # a parent that is a file, a folder that cannot be written in, a name too long
    return output_path(path, folder=False)


def check_render_options(workers, threads) -> tuple[int | None, int | None]:
    """(workers, threads) of the rendering of an export's files, each None or an int from 1
    to 1024; cheap, so `curi episodes` checks them before opening the bank.

    Raises:
        ConfigError: naming the key, the value and the allowed range.
    """
    return tuple(
        None if v is None else validate.integer(v, key, low=1, high=1024)
        for key, v in (("workers", workers), ("threads", threads))
    )


def export_episodes(
    bank,
    split: Split,
    subset: str,
    out: str | Path,
    *,
    n: int,
    negatives: str = "hard",
    query_negatives: str | None = None,
    negative_sampler: str = "paper",
    seed: int = 0,
    shard_size: int = 10_000,
    progress: bool = True,
    media: Media | None = None,
    workers: int | None = 1,
    threads: int | None = None,
    jobs: int = 1,
    launcher=None,
) -> dict:
    """Write episodes 0..n-1 of (split, subset) with ids, labels, the concept and the scene
    records, and a dataset card beside them (``<out>.card.md``).

    ``out`` ending in ``.jsonl`` / ``.jsonl.gz``: one JSON object per line. ``.parquet``: one
    row per episode with typed columns (`parquet_schema`), readable by
    ``datasets.load_dataset("parquet", data_files=...)``, pandas or any arrow reader.
    ``.tar``: WebDataset shards ``<name>-00000.tar``, ... of `shard_size` episodes, one sample
    per episode (``<index>.json``, plus its rendered files with `media`), readable by the
    `webdataset` library and ``datasets.load_dataset("webdataset", data_files=...)``.

    With `media` (``get_media("image")``, or ``curi.renderers.rerender.media("image", ...)``
    for a renderer with other options), parquet and tar exports also hold every scene's
    rendered file (PNG or WAV bytes), in set order, rendered in `workers` processes with one
    torch thread each (None: one per core; 1: in this process with `threads` torch threads,
    None: as they are); the export is the same bytes for any number of either.

    The export replaces an earlier one to the same `out` as a whole: its files are written
    under temporary names and renamed into place once all are complete, the earlier export's
    surplus files removed (only files earlier exports to `out` wrote, never another export's
    or a user's file beside them), and the card, which lists every file with its episode
    count, size and SHA-256, written last. A kill at any point leaves the old export or files
    the reader refuses, which the next export cleans up; a second export to the same `out`
    while one runs fails at once (`curi.atomic.exclusive`).

    With ``jobs`` > 1 the episodes are split into that many ranges (at most `n`, whatever
    `shard_size`), each written by a job of `launcher` (a `curi.jobs.Launcher`; None: one
    after another in this process, with `threads` torch threads) as a part in the hidden
    staging folder ``.<out name>.parts/`` (`curi.export.parts`), its files rendered in the
    job's process with the launcher's threads; then this process, holding the lock all the
    while, streams the parts in order into the same writer, so the export is the single-job
    export byte for byte. A finished part is reused by the next call with the same settings
    (a failed or killed job's part alone is redone); the staging folder is removed once the
    export is published.

    Returns:
        ``episodes``: the path written (for tar: its one shard, or the brace pattern
        ``<name>-{00000..NNNNN}.tar`` of its shards), ``files``: every file written, and
        ``card``: the dataset card.

    Raises:
        ConfigError: bad options; an `out` of no known format or a folder; `media` with a
            JSON-lines export; another export to `out` running.
    """
    n, shard_size, seed = check_export_options(n, shard_size, seed)
    workers, threads = check_render_options(workers, threads)
    jobs = check_jobs(jobs)
    out = check_export_path(out)
    if media is not None and kind(out) == "lines":
        raise ConfigError(NO_FILES_IN_LINES.format(name=out.name))
    kinds = {"query_negatives": query_negatives, "negative_sampler": negative_sampler}
    spec = EpisodeSpec(split, subset, negatives, seed=seed, size=n, **kinds)
    sampler = EpisodeSampler.from_spec(bank, spec)
    with exclusive(out, what=f"out={out}", error=ConfigError):
        items = _export_items(sampler, out, media, jobs, launcher, workers, threads, progress)
        files, card = _publish_with_card(sampler, split, out, items, shard_size, media, jobs)
    paths = [out.with_name(f["name"]) for f in files]
    written_path = brace_pattern(out, len(files)) if kind(out) == "tar" else out
    return {"episodes": written_path, "files": paths, "card": card}


def _export_items(
    sampler: EpisodeSampler,
    out: Path,
    media: Media | None,
    jobs: int,
    launcher,
    workers: int | None,
    threads: int | None,
    progress: bool,
) -> Iterator[Item]:
    """The items of the export `out` (locked by the caller): with more than one job, read from
    the parts the jobs wrote (`_run_export_jobs`); else sampled here, their files rendered in
    `workers` processes (no more than episodes)."""
    n = sampler.size
    if min(jobs, n) > 1:
        parts = _run_export_jobs(sampler, out, media, jobs, launcher, threads, progress)
        return read_items(parts, what=f"out={out}")
    if media is not None and workers is not None:
        workers = min(workers, n)  # no more processes than episodes
    return _items(_sampled(sampler, progress), media, workers, threads)


def _publish_with_card(
    sampler: EpisodeSampler,
    split: Split,
    out: Path,
    items: Iterator[Item],
    shard_size: int,
    media: Media | None,
    jobs: int,
) -> tuple[list[dict], Path]:
    """Publish `items` as the files of the export `out` (`_publish_files`; locked by the
    caller), write its card, then remove the list of the files it published and, after jobs,
    their staging folder. Returns the card entries of the files and the card's path."""
    with contextlib.closing(items):
        files, written = _publish_files(out, items, shard_size, media)
    meta = _card_meta(sampler, out, media, files)
    card = write_text(card_path(out), card_text(meta, sampler.bank, split, written))
    remove(publishing(out), root=out.parent, link=True)
    if min(jobs, sampler.size) > 1:
        remove(staging_folder(out), root=out.parent)
    return files, card


def _sampled(sampler: EpisodeSampler, progress: bool) -> Iterator[Episode]:
    """Episodes 0..n-1 of `sampler`, sampled here, with a progress bar."""
    from tqdm import tqdm

    n = sampler.size
    return (sampler[i] for i in tqdm(range(n), desc="episodes", disable=not progress))


def _card_meta(sampler: EpisodeSampler, out: Path, media: Media | None, files: list[dict]) -> dict:
    """The front matter of the card of the export `out` of `sampler`'s episodes: what makes
    them again, and the card entry of each of its `files`."""
    meta = {
        "curi_export": CARD_FORMAT,
        "export": out.name,
        "episodes": sampler.size,
        "split": str(sampler.split.name),
        "subset": str(sampler.subset),
        "negatives": str(sampler.negatives),
        "query_negatives": str(sampler.query_negatives),
        "seed": sampler.seed,
        "media": media.suffix if media is not None else None,
        "files": files,
    }
    if sampler.negative_sampler != "paper":  # (the paper's cards stay as they were)
        meta["negative_sampler"] = sampler.negative_sampler
    return meta


def _run_export_jobs(
    sampler: EpisodeSampler,
    out: Path,
    media: Media | None,
    jobs: int,
    launcher,
    threads: int | None,
    progress: bool,
) -> list[Part]:
    """Write the parts of the export `out` (`curi.export.parts`) that earlier runs with the
    same settings did not finish, one job per range; returns every part, in order."""
    import dataclasses

    from curi.jobs import Job, Launcher

    split = sampler.split
    settings = {
        "curi_parts": 1,
        "bank": str(Path(sampler.bank.path).resolve()),
        "bank_manifest": sampler.bank.manifest.get("manifest_sha256"),
        "split": str(split.name),
        "split_concepts": _split_digest(split),
        "subset": sampler.subset,
        "negatives": sampler.negatives,
        "query_negatives": sampler.query_negatives,
        "seed": sampler.seed,
        "n": sampler.size,
        "jobs": min(jobs, sampler.size),
        "media": _media_key(media),
    }
    if sampler.negative_sampler != "paper":
        settings["negative_sampler"] = sampler.negative_sampler
    parts = plan_parts(parts_folder(out, settings), sampler.size, jobs)
    if launcher is None:
        launcher = Launcher("basic", threads=threads)
    if launcher.folder is None:
        launcher = dataclasses.replace(launcher, folder=staging_folder(out))
    args = (sampler.bank, sampler.spec, media)

    def job(part: Part) -> Job:
        return Job(f"{out.name}:{part.name}", _export_range, (*args, part))

    run_parts(parts, job, launcher, what=f"out={out}", progress=progress)
    return parts


def _export_range(bank, spec: EpisodeSpec, media, part: Part) -> int:
    """A job of a sharded export: episodes ``part.start..part.stop-1`` of `spec` written as
    `part`, their files rendered in this process (with the torch threads the launcher set)."""
    sampler = EpisodeSampler.from_spec(bank, spec)
    episodes = (sampler[i] for i in range(part.start, part.stop))
    with contextlib.closing(_items(episodes, media, 1, None)) as items:
        return write_items(part, items)


def _split_digest(split: Split) -> str:
    """A digest of the concepts of each subset of `split` (its name alone may be reused)."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    for subset in ("train", "val", "test", "dropped"):
        h.update(np.ascontiguousarray(getattr(split, subset), np.int64).tobytes() + b"|")
    return h.hexdigest()[:16]


def _media_key(media: Media | None) -> dict | None:
    """What identifies the rendered files of `media`: its suffix and the plain options of its
    renderer (sizes, device, flags)."""
    if media is None:
        return None
    renderer = getattr(media, "renderer", media)
    plain = (bool, int, float, str, type(None))
    opts = {
        k: v if isinstance(v, plain) else str(v)
        for k, v in sorted(vars(renderer).items())
        if not k.startswith("_") and (isinstance(v, plain) or type(v).__name__ == "device")
    }
    return {"suffix": media.suffix, "renderer": type(renderer).__name__, "options": opts}


def _publish_files(
    out: Path, items: Iterable[Item], shard_size: int, media: Media | None
) -> tuple[list[dict], str]:
    """Write `items` as the files of the export `out` (locked by the caller) and rename them
    into place, replacing only the files that earlier exports to `out` wrote (`owned`); its
    card is removed and left to the caller to write. Returns the card's entries of the files
    and a line that says what they hold."""
    remove_dead_temporaries(out)
    earlier = owned(out)
    with contextlib.ExitStack() as publish:
        files, written = _stage_files(out, items, shard_size, media, publish)
        new = {f["name"] for f in files}
        write_text(publishing(out), json.dumps(sorted(earlier | new)))
        # until the new card, the export reads as broken
        remove(card_path(out), root=out.parent, link=True)
    # Leaving the stack renamed every staged file into place.
    for name in earlier - new:
        remove(out.with_name(name), root=out.parent, link=True)
    return files, written


def _stage_files(
    out: Path,
    items: Iterable[Item],
    shard_size: int,
    media: Media | None,
    publish: contextlib.ExitStack,
) -> tuple[list[dict], str]:
    """Stage `items` as the files of `out`'s format, renamed into place at the end of
    `publish`; returns their card entries and a line that says what they hold."""
    fmt = kind(out)
    if fmt == "tar":
        files = stage_shards(out, items, shard_size, publish)
        written = f"{len(files)} WebDataset shards {out.stem}-NNNNN.tar of up to {shard_size}"
    elif fmt == "parquet":
        files = [stage(out, publish, lambda tmp: write_parquet(tmp, items, media, 1000))]
        written = f"one row per episode in {out.name} (parquet)"
    else:
        gz = out.suffix == ".gz"
        texts = (json.dumps(ep) for _, ep, _ in items)
        files = [stage(out, publish, lambda tmp: write_lines(tmp, texts, compressed=gz))]
        written = f"one JSON object per line in {out.name}"
    return files, written


def _items(
    episodes: Iterator[Episode], media: Media | None, workers: int | None, threads: int | None
) -> Iterator[Item]:
    """(index, JSON-ready episode, rendered files named ``support_NN<suffix>`` ...) of each
    episode, the files rendered by ``media.imap`` (in `workers` processes)."""
    pairs = ((ep.index, ep.to_dict()) for ep in episodes)
    if media is None:
        yield from ((index, d, []) for index, d in pairs)
        return
    pairs, ahead = itertools.tee(pairs)
    sets = (d["support_records"] + d["query_records"] for _, d in ahead)
    with contextlib.closing(media.imap(sets, workers=workers, threads=threads)) as rendered:
        for (index, d), blobs in zip(pairs, rendered, strict=True):
            ns = len(d["support_records"])
            names = [f"support_{k:02d}" for k in range(ns)]
            names += [f"query_{k:02d}" for k in range(len(blobs) - ns)]
            files = [(n + media.suffix, data) for n, data in zip(names, blobs, strict=True)]
            yield index, d, files

"""Exporting episodes with their scene records, so they can be re-rendered in any modality later:
JSON lines (optionally gzip-compressed), parquet (typed columns that Hugging Face `datasets`
and any arrow reader load) or WebDataset tar shards, each with a small dataset card, optionally
with every scene's rendered file (PNG or WAV bytes); and the one reader of those files, which
checks every episode.

An export is published as a whole: its files (the JSON-lines file, or every tar shard) are
written under temporary names and renamed into place only once all are complete, and the
dataset card comes last. The card's YAML front matter (the dataset-card convention of the
Hugging Face Hub) lists every file with its episode count, size and SHA-256, and the reader
checks the files against it, so that an interrupted or altered export is refused rather than
read as a shorter dataset (docs/reliability.md, "Exports"). An export replaces only the files
that earlier exports to the same path wrote (its card's list), never another export's or a
user's file beside it, and two exports to the same path at once are refused (a lock)."""

from __future__ import annotations

import contextlib
import glob
import gzip
import io
import itertools
import json
import os
import re
import tarfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol

from curi import validate
from curi.atomic import atomic_path, exclusive, owner_alive, remove, temporaries, write_text
from curi.bank_format import sha256
from curi.episodes import Episode, EpisodeSampler
from curi.errors import ConfigError, CuriError, EpisodeFileError
from curi.export_parts import (
    Part,
    check_jobs,
    parts_folder,
    plan_parts,
    read_items,
    run_parts,
    staging_folder,
    write_items,
)
from curi.paths import output_path, read_text, regular_file
from curi.splits import Split

__all__ = [
    "CARD_FORMAT",
    "EpisodeFileError",
    "FORMATS",
    "MEDIA_GROUP",
    "Media",
    "parquet_schema",
    "check_episode_file",
    "check_export_options",
    "check_export_path",
    "check_media",
    "check_render_options",
    "count_episodes",
    "export_episodes",
    "get_media",
    "list_media",
    "read_episode_file",
]

_KEYS = ("concept_text", "support_labels", "query_labels", "support_records", "query_records")
CARD_FORMAT = 1  # version of the card's front matter (the list of files and their checksums)
_DIGITS = "[0-9]" * 5  # shard numbers: <name>-00000.tar, ...
_AGAIN = "export it again with `curi episodes ... out=FILE`"

FORMATS = (".jsonl", ".jsonl.gz", ".parquet", ".tar")
"""The endings of the names an export is written and read as: JSON lines (optionally
gzip-compressed), parquet, WebDataset tar shards (``<name>-00000.tar``, ...)."""
_FORMAT_LIST = ", ".join(FORMATS)


class Media(Protocol):
    """Rendered files to store beside each episode (`curi.renderers.rerender.media`): called
    with scene records, returns one file's bytes per record; `imap` does so for each of many
    sets of records, in order, in this process with `threads` torch threads or in `workers`
    processes (None: one per core), the same bytes for any number; `suffix` is ``.png`` or
    ``.wav`` and `feature` the Hugging Face feature type of the files (``Image`` or
    ``Audio``)."""

    suffix: str
    feature: str

    def __call__(self, records: Sequence[dict]) -> list[bytes]: ...

    def imap(
        self, sets: Iterable[Sequence[dict]], *, workers: int | None, threads: int | None
    ) -> Iterator[list[bytes]]: ...


MEDIA_GROUP = "curi.media"
"""The entry-point group that names the rendered files an export can carry (``image``,
``sound``): each entry is a factory ``(name) -> Media`` of the renderers layer, so the core
finds them without importing it (as `curi.cli` finds the commands)."""


def list_media() -> list[str]:
    """The names `get_media` accepts (``image``, ``sound``), sorted."""
    return sorted({ep.name for ep in entry_points(group=MEDIA_GROUP)})


def get_media(name: str, out: str | Path | None = None) -> Media:
    """The rendered files called `name` (``media=image`` on the command line), built by the
    renderers layer through the `MEDIA_GROUP` entry points.

    Args:
        name: ``image`` (PNG per scene) or ``sound`` (WAV per scene).
        out: the export they are meant for, checked to be a ``.parquet`` or ``.tar`` export.

    Raises:
        ConfigError: an unknown name, or an `out` that cannot hold files (JSON lines).
    """
    found = check_media(name, out)
    try:
        return found.load()(name)
    except ValueError as e:  # the renderer refuses (e.g. its options)
        raise ConfigError(f"media={name}: {e}") from None


def check_media(name: str, out: str | Path | None = None):
    """The entry point of the rendered files `name`, once `out` can hold them; cheap (the
    renderers are not imported), so `curi episodes` checks it before its work.

    Raises:
        ConfigError: an unknown name, or an `out` that cannot hold files (JSON lines).
    """
    found = {ep.name: ep for ep in entry_points(group=MEDIA_GROUP)}
    if not isinstance(name, str) or name not in found:
        valid = ", ".join(sorted(found)) or "none installed (reinstall curi)"
        raise ConfigError(f"media={name!r} is not a kind of rendered file; valid: {valid}, or null")
    if out is not None and _kind(Path(out)) == "lines":
        raise ConfigError(_NO_FILES_IN_LINES.format(name=Path(out).name))
    return found[name]


# --- file names ------------------------------------------------------------------------------
def _format(path: Path) -> str | None:
    """The ending of `path`'s name among `FORMATS` (after a name of one character or more)."""
    return next((f for f in FORMATS if path.name.endswith(f) and path.name != f), None)


def _card_path(out: Path) -> Path:
    """The dataset card of the export ``out``: ``<out>.card.md`` beside it."""
    return out.with_name(out.name + ".card.md")


def _brace_pattern(out: Path, count: int) -> Path:
    """The path written for ``out=<name>.tar``: its one shard, or WebDataset's brace pattern
    ``<name>-{00000..NNNNN}.tar`` of its shards (which `read_episode_file` also reads)."""
    if count == 1:
        return out.with_name(f"{out.stem}-00000.tar")
    return out.with_name(f"{out.stem}-{{00000..{count - 1:05d}}}.tar")


def _shards(out: Path) -> list[Path]:
    """The shards present for ``out=<dir>/<name>.tar``: ``<name>-00000.tar``, ... in order."""
    return sorted(out.parent.glob(f"{glob.escape(out.stem)}-{_DIGITS}.tar"))


def _export_of(path: Path) -> Path:
    """The export a file belongs to: ``<name>.tar`` for its shard ``<name>-NNNNN.tar``, else
    the file itself."""
    m = re.fullmatch(r"(.+)-\d{5}\.tar", path.name)
    return path.with_name(m.group(1) + ".tar") if m else path


def _unbrace(path: Path) -> Path:
    """``<name>.tar`` for the brace pattern ``<name>-{00000..NNNNN}.tar`` `export_episodes`
    reports, else `path`."""
    m = re.fullmatch(r"(.+)-\{\d{5}\.\.\d{5}\}\.tar", path.name)
    return path.with_name(m.group(1) + ".tar") if m else path


def _publishing(out: Path) -> Path:
    """The hidden list ``.<out>.card.md.publishing`` of every file an export of ``out`` is
    renaming into place or replacing, written before the old card goes and removed after the
    new card is written: an export killed in between leaves it, so the next one knows which
    files are its own to replace (`_owned`)."""
    card = _card_path(out)
    return card.with_name(f".{card.name}.publishing")


def _owned(out: Path) -> set[str]:
    """Names of the files earlier exports to ``out`` wrote, the only files an export of ``out``
    may delete: those its card lists and those an interrupted export was publishing
    (`_publishing`), each a plain name in the folder of ``out`` that belongs to it (``out``
    itself, or for ``<name>.tar`` a shard ``<name>-NNNNN.tar``). A card or list that cannot
    be read lists nothing."""
    names: set[str] = set()
    card, pending = _card_path(out), _publishing(out)
    if card.is_file():
        with contextlib.suppress(EpisodeFileError):
            meta = _card_of(out, card)
            names |= {f["name"] for f in meta["files"]} if meta is not None else set()
    if pending.is_file():
        with contextlib.suppress(CuriError, ValueError, TypeError, RecursionError):
            names |= set(json.loads(read_text(pending, "publishing list", CuriError)))
    plain = {n for n in names if isinstance(n, str) and n not in ("", ".", "..")}
    return {n for n in plain if Path(n).name == n and _export_of(out.with_name(n)) == out}


def _remove_dead_temporaries(out: Path) -> None:
    """Remove the temporaries (``.<file>.tmp-<pid>``, `curi.atomic`) of the files, shards and
    card of the export ``out`` that killed processes left; a live process's are its own."""
    stale = temporaries(out) + temporaries(_card_path(out)) + temporaries(_publishing(out))
    if out.suffix == ".tar":
        stale += out.parent.glob(f".{glob.escape(out.stem)}-{_DIGITS}.tar.tmp-*")
    for tmp in stale:
        if tmp.is_file() and not owner_alive(tmp):
            remove(tmp, root=out.parent, link=True)


# --- writing ---------------------------------------------------------------------------------
_NO_FILES_IN_LINES = "rendered files go into .parquet or .tar exports, not {name}"


def _kind(out: Path) -> str:
    """``tar``, ``parquet`` or ``lines`` (JSON lines, optionally gzip-compressed)."""
    fmt = _format(out)
    return "tar" if fmt == ".tar" else "parquet" if fmt == ".parquet" else "lines"


def _stage(path: Path, publish: contextlib.ExitStack, write) -> dict:
    """Write `path` under its temporary name (``write(tmp)`` returns the episodes written) and
    leave its renaming to the end of `publish`; returns its card entry."""
    tmp = publish.enter_context(atomic_path(path))
    episodes = write(tmp)
    return {
        "name": path.name,
        "episodes": episodes,
        "bytes": tmp.stat().st_size,
        "sha256": sha256(tmp),
    }


def _write_lines(tmp: Path, texts: Iterable[str], *, compressed: bool) -> int:
    """One JSON object per line; gzip without the time or a file name in its header, so the
    same export is the same bytes."""
    count = 0
    with open(tmp, "wb") as raw:
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if compressed else None
        with gz or contextlib.nullcontext():
            for text in texts:
                (gz or raw).write(text.encode() + b"\n")
                count += 1
    return count


_Item = tuple[int, dict, list[tuple[str, bytes]]]  # (index, episode, rendered files)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)  # mtime 0, no owner: the same export is the same bytes
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _write_shard(tmp: Path, items: list[_Item]) -> int:
    """One WebDataset sample per episode, key ``<index:08d>``: ``<key>.json`` (the episode)
    and, with rendered files, ``<key>.support_00.png`` ... ``<key>.query_24.png`` (or .wav)."""
    with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
        for index, ep, files in items:
            key = f"{index:08d}"
            _add(tar, f"{key}.json", json.dumps(ep).encode())
            for name, data in files:
                _add(tar, f"{key}.{name}", data)
    return len(items)


def _stage_shards(
    out: Path, items: Iterable[_Item], shard_size: int, publish: contextlib.ExitStack
) -> list[dict]:
    """Stage the shards ``<name>-00000.tar``, ... of `shard_size` episodes each."""
    files: list[dict] = []
    batch: list[_Item] = []

    def flush() -> None:
        path = out.with_name(f"{out.stem}-{len(files):05d}.tar")
        files.append(_stage(path, publish, lambda tmp: _write_shard(tmp, batch)))
        batch.clear()

    for item in items:
        batch.append(item)
        if len(batch) == shard_size:
            flush()
    if batch:
        flush()
    return files


# --- parquet ---------------------------------------------------------------------------------
def parquet_schema(media: Media | None = None):
    """The arrow schema of a parquet export: ``index``, ``concept`` int64, ``concept_text``
    string, ``support_ids`` / ``query_ids`` list<int64>, ``support_labels`` / ``query_labels``
    list<int8> (1 positive), ``support_records`` / ``query_records`` list of scene structs
    (``id``, ``objects``: shape, color, material, size strings, location bins ``x``, ``y``,
    ``position`` [x, y, z], ``rotation`` degrees, ``pixel`` [px, py]); with `media` also
    ``support_<feature>s`` / ``query_<feature>s`` lists of ``{bytes, path}`` (the storage of
    Hugging Face ``Image`` / ``Audio`` features). The Hugging Face feature types ride in the
    schema's metadata, so `datasets.load_dataset("parquet", ...)` decodes the files."""
    import pyarrow as pa

    obj = pa.struct(
        [
            ("shape", pa.string()),
            ("color", pa.string()),
            ("material", pa.string()),
            ("size", pa.string()),
            ("x", pa.int64()),
            ("y", pa.int64()),
            ("position", pa.list_(pa.float64())),
            ("rotation", pa.float64()),
            ("pixel", pa.list_(pa.float64())),
        ]
    )
    record = pa.struct([("id", pa.int64()), ("objects", pa.list_(obj))])
    fields = [("index", pa.int64()), ("concept", pa.int64()), ("concept_text", pa.string())]
    for s in ("support", "query"):
        fields += [
            (f"{s}_ids", pa.list_(pa.int64())),
            (f"{s}_labels", pa.list_(pa.int8())),
            (f"{s}_records", pa.list_(record)),
        ]
    if media is not None:
        blob = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
        fields += [(_media_column(s, media), blob) for s in ("support", "query")]
    schema = pa.schema(fields)
    hf = {"info": {"features": {f.name: _hf_feature(f.type, media) for f in schema}}}
    return schema.with_metadata({"huggingface": json.dumps(hf)})


def _media_column(subset: str, media: Media) -> str:
    return f"{subset}_{media.feature.lower()}s"  # support_images, query_audios


def _hf_feature(t, media: Media | None):
    """Hugging Face feature (its dict form) of an arrow type; lists as ``[feature]``, which
    every `datasets` version reads as a list; ``{bytes, path}`` structs as `media`'s type."""
    import pyarrow as pa

    if pa.types.is_list(t):
        return [_hf_feature(t.value_type, media)]
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        if names == ["bytes", "path"] and media is not None:
            return {"_type": media.feature}
        return {t.field(i).name: _hf_feature(t.field(i).type, media) for i in range(t.num_fields)}
    return {"dtype": str(t).replace("double", "float64"), "_type": "Value"}


def _write_parquet(tmp: Path, items: Iterable[_Item], media: Media | None, rows: int) -> int:
    """Episodes as parquet row groups of `rows` episodes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema(media)
    count, batch = 0, []
    with pq.ParquetWriter(tmp, schema) as writer:
        for _, ep, files in items:
            if media is not None:
                ns = len(ep["support_ids"])
                blobs = [{"bytes": data, "path": name} for name, data in files]
                ep = {
                    **ep,
                    _media_column("support", media): blobs[:ns],
                    _media_column("query", media): blobs[ns:],
                }
            batch.append(ep)
            count += 1
            if len(batch) == rows:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        if batch or count == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    return count


def _parquet_episodes(path: Path) -> Iterator[dict]:
    """The episodes of a parquet export as dicts, without rendered files."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    cols = [n for n in f.schema_arrow.names if not n.endswith(("_images", "_audios"))]
    for batch in f.iter_batches(batch_size=256, columns=cols):
        yield from batch.to_pylist()


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
            f"(formats: {_FORMAT_LIST})"
        )
    path = Path(out)
    if path.is_dir():
        raise ConfigError(
            f"out={out} is a folder; give a file in it, e.g. out={path / 'episodes.jsonl'}"
        )
    if _format(path) is None:
        raise ConfigError(
            f"out={out}: unknown format; the file name must end in one of {_FORMAT_LIST} "
            "(JSON lines, gzip-compressed JSON lines, parquet, WebDataset tar shards)"
        )
    folder = next((p for p in path.parents if p.exists()), None)
    if folder is not None and not folder.is_dir():
        raise ConfigError(f"out={out}: {folder} is not a folder; give a path in a folder")
    return output_path(path, folder=False)  # a folder that is not writable, a name too long


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

    The export replaces an earlier one to the same `out` as a whole: every file is written
    under a temporary name first; once all are complete the list of the files it replaces
    and publishes is written (`_publishing`), the old card is removed, the files are renamed
    into place, the old export's surplus files removed (only those its card or list named:
    never another export's or a user's file beside it), and the new card, which lists every
    file with its episode count, size and SHA-256, written last. A kill at any point leaves
    the old export or files the reader refuses, and the next export removes the killed
    process's temporaries and surplus files. A second export to the same `out` while one
    runs fails at once (`curi.atomic.exclusive`).

    With ``jobs`` > 1 the episodes are split into that many ranges (at most `n`, whatever
    `shard_size`), each written by a job of `launcher` (a `curi.jobs.Launcher`; None: one
    after another in this process, with `threads` torch threads) as a part in the hidden
    staging folder ``.<out name>.parts/`` (`curi.export_parts`), its files rendered in the
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
    if media is not None and _kind(out) == "lines":
        raise ConfigError(_NO_FILES_IN_LINES.format(name=out.name))
    from tqdm import tqdm

    sampler = EpisodeSampler(
        bank,
        split,
        subset,
        negatives,
        seed=seed,
        query_negatives=query_negatives,
        size=n,
        negative_sampler=negative_sampler,
    )
    if media is not None and workers is not None:
        workers = min(workers, n)  # no more processes than episodes
    with exclusive(out, what=f"out={out}", error=ConfigError):
        if min(jobs, n) > 1:
            parts = _run_export_jobs(sampler, out, media, jobs, launcher, threads, progress)
            items = read_items(parts, what=f"out={out}")
        else:
            episodes = (sampler[i] for i in tqdm(range(n), desc="episodes", disable=not progress))
            items = _items(episodes, media, workers, threads)
        with contextlib.closing(items):
            files, written = _publish_files(out, items, shard_size, media)
        meta = {
            "curi_export": CARD_FORMAT,
            "export": out.name,
            "episodes": n,
            "split": str(split.name),
            "subset": str(subset),
            "negatives": str(negatives),
            "query_negatives": str(sampler.query_negatives),
            "seed": seed,
            "media": media.suffix if media is not None else None,
            "files": files,
        }
        if negative_sampler != "paper":  # (the paper's cards stay as they were)
            meta["negative_sampler"] = negative_sampler
        card = write_text(_card_path(out), _card_text(meta, bank, split, written))
        remove(_publishing(out), root=out.parent, link=True)
        if min(jobs, n) > 1:
            remove(staging_folder(out), root=out.parent)
    paths = [out.with_name(f["name"]) for f in files]
    written_path = _brace_pattern(out, len(files)) if _kind(out) == "tar" else out
    return {"episodes": written_path, "files": paths, "card": card}


def _run_export_jobs(
    sampler: EpisodeSampler,
    out: Path,
    media: Media | None,
    jobs: int,
    launcher,
    threads: int | None,
    progress: bool,
) -> list[Part]:
    """Write the parts of the export `out` (`curi.export_parts`) that earlier runs with the
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
    args = (sampler.bank, split, sampler.subset, sampler.negatives, sampler.query_negatives)
    args += (sampler.seed, sampler.size, media, sampler.negative_sampler)

    def job(part: Part) -> Job:
        return Job(f"{out.name}:{part.name}", _export_range, (*args, part))

    run_parts(parts, job, launcher, what=f"out={out}", progress=progress)
    return parts


def _export_range(
    bank,
    split,
    subset,
    negatives,
    query_negatives,
    seed,
    n,
    media,
    negative_sampler,
    part: Part,
) -> int:
    """A job of a sharded export: episodes ``part.start..part.stop-1`` written as `part`,
    their files rendered in this process (with the torch threads the launcher set)."""
    sampler = EpisodeSampler(
        bank,
        split,
        subset,
        negatives,
        seed=seed,
        query_negatives=query_negatives,
        size=n,
        negative_sampler=negative_sampler,
    )
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
    out: Path, items: Iterable[_Item], shard_size: int, media: Media | None
) -> tuple[list[dict], str]:
    """Write `items` as the files of the export `out` (locked by the caller) and rename them
    into place, replacing only the files that earlier exports to `out` wrote (`_owned`); its
    card is removed and left to the caller to write. Returns the card's entries of the files
    and a line that says what they hold."""
    _remove_dead_temporaries(out)
    owned = _owned(out)
    kind = _kind(out)
    with contextlib.ExitStack() as publish:
        if kind == "tar":
            files = _stage_shards(out, items, shard_size, publish)
            written = f"{len(files)} WebDataset shards {out.stem}-NNNNN.tar of up to {shard_size}"
        elif kind == "parquet":
            files = [_stage(out, publish, lambda tmp: _write_parquet(tmp, items, media, 1000))]
            written = f"one row per episode in {out.name} (parquet)"
        else:
            gz = out.suffix == ".gz"
            texts = (json.dumps(ep) for _, ep, _ in items)
            files = [_stage(out, publish, lambda tmp: _write_lines(tmp, texts, compressed=gz))]
            written = f"one JSON object per line in {out.name}"
        new = {f["name"] for f in files}
        write_text(_publishing(out), json.dumps(sorted(owned | new)))
        # until the new card, the export reads as broken
        remove(_card_path(out), root=out.parent, link=True)
    # Leaving the stack renamed every staged file into place.
    for name in owned - new:
        remove(out.with_name(name), root=out.parent, link=True)
    return files, written


def _items(
    episodes: Iterator[Episode], media: Media | None, workers: int | None, threads: int | None
) -> Iterator[_Item]:
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


def _card_text(meta: dict, bank, split: Split, written: str) -> str:
    import yaml

    n = meta["episodes"]
    return (
        f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n\n"
        f"# CURI episodes: {split.name} / {meta['subset']}\n\n"
        f"- episodes: {n} (indices 0..{n - 1} of `EpisodeSampler`), {written}\n"
        f"- negatives: {meta['negatives']} (query: {meta['query_negatives']}); "
        f"seed: {meta['seed']}\n"
        f"- bank: {bank.path} ({len(bank)} concepts, {bank.num_scenes} scenes, "
        f"curi {bank.manifest['version']})\n"
        f"- split sizes: {split.sizes()}\n"
        "- format: each episode is a JSON object: `concept_text` (canonical postfix), "
        "`support_ids`, `support_labels`, `query_ids`, `query_labels` (1 positive, 0 "
        "negative, in a seeded random order), `support_records` / `query_records` (every "
        "object's shape, color, material, size, location bins x / y, 3D position, rotation "
        "and pixel centre).\n"
        + (
            f"- rendered files: `<key>.support_NN{meta['media']}` per scene (tar), or the "
            "`support_*s` / `query_*s` columns (parquet)\n"
            if meta["media"]
            else ""
        )
        + "- files: the front matter above lists each with its episode count, size in bytes and "
        "SHA-256; readers check them.\n"
        "- regenerate exactly: the same bank config, split, subset, negatives and seed.\n"
    )


# --- reading ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Part:
    """One file of an export and its card's entry for it (None: no card to check against),
    and the index of its first episode in the export (None: unknown, a shard without card)."""

    path: Path
    entry: dict | None
    card: Path | None = None
    first: int | None = 0


def _load_card(card: Path) -> dict | None:
    """The front matter of a card; None when it has none (a card written before curi listed
    the files of an export)."""
    import yaml

    text = read_text(card, "card", EpisodeFileError)
    if not text.startswith("---\n"):
        return None
    end = text.find("\n---\n", 3)
    try:
        meta = yaml.safe_load(text[4:end]) if end > 0 else None
    except yaml.YAMLError:
        meta = None
    files = meta.get("files") if isinstance(meta, dict) else None
    entry = {"name": str, "episodes": int, "bytes": int, "sha256": str}
    ok = (
        isinstance(files, list)
        and meta.get("curi_export") == CARD_FORMAT
        and isinstance(meta.get("export"), str)
        and all(
            isinstance(f, dict) and all(isinstance(f.get(k), t) for k, t in entry.items())
            for f in files
        )
        and meta.get("episodes") == sum(f["episodes"] for f in files)
    )
    if not ok:
        raise EpisodeFileError(f"the card {card} is malformed (its file list); {_AGAIN}")
    return meta


def _card_of(export: Path, card: Path) -> dict | None:
    meta = _load_card(card)
    if meta is not None and meta["export"] != export.name:
        raise EpisodeFileError(
            f"the card {card} describes the export {meta['export']!r}, not {export.name}; {_AGAIN}"
        )
    return meta


def _plan(path: Path) -> list[_Part]:
    """The files to read for `path` (a file, or ``<name>.tar`` meaning all its shards), each
    with its card entry; the set of shards and every size already checked against the card.

    Raises:
        EpisodeFileError: a name of no known format, nothing there, shards without a card, a
            shard missing or not listed, a size that differs from the card.
    """
    if _format(path) is None:
        raise EpisodeFileError(
            f"{path} is not an episode export: the name must end in one of {_FORMAT_LIST} "
            "(as `curi episodes ... out=FILE` writes)"
        )
    if path.suffix == ".tar" and not path.exists():
        card, shards = _card_path(path), _shards(path)
        if not shards and not card.is_file():
            raise EpisodeFileError(
                f"episode file not found at {path}; export one with "
                "`curi episodes split=... subset=test n=... out=FILE`"
            )
        if not card.is_file():
            raise EpisodeFileError(
                f"{path}: {len(shards)} shard(s) but no card {card.name}: the export was "
                f"interrupted or its card removed; {_AGAIN}"
            )
        meta = _card_of(path, card)
        if meta is None:
            raise EpisodeFileError(
                f"{path}: its card {card.name} does not list the shards (written by an older "
                f"curi), so they cannot be checked; {_AGAIN}"
            )
        listed = [f["name"] for f in meta["files"]]
        missing = [name for name in listed if not (path.parent / name).is_file()]
        if missing:
            raise EpisodeFileError(
                f"{path}: shard {missing[0]} is missing ({len(missing)} of the {len(listed)} "
                f"its card lists): the export was interrupted or changed; {_AGAIN}"
            )
        extra = sorted({s.name for s in shards} - set(listed))
        if extra:
            raise EpisodeFileError(
                f"{path}: shard {extra[0]} is not listed in its card {card.name} (left by "
                f"another export?); remove it, or {_AGAIN}"
            )
        parts = [_Part(path.parent / f["name"], f, card) for f in meta["files"]]
    else:
        if not path.is_file():
            if os.path.lexists(path):  # a FIFO, a folder ...: say what is there
                regular_file(path, "episode file", EpisodeFileError)
            raise EpisodeFileError(
                f"episode file not found at {path}; export one with "
                "`curi episodes split=... subset=test n=... out=FILE`"
            )
        card = _card_path(_export_of(path))
        meta = _card_of(_export_of(path), card) if card.is_file() else None
        if meta is None:  # a lone file: published whole, nothing to check it against
            return [_Part(path, None, first=None if path.suffix == ".tar" else 0)]
        entry = next((f for f in meta["files"] if f["name"] == path.name), None)
        if entry is None:
            raise EpisodeFileError(
                f"{path} is not listed in its card {card.name} (left by another export?); {_AGAIN}"
            )
        before = meta["files"][: meta["files"].index(entry)]
        parts = [_Part(path, entry, card, sum(f["episodes"] for f in before))]
    for part in parts:
        size = part.path.stat().st_size
        if size != part.entry["bytes"]:
            raise _differs(path, part, f"{size} bytes, the card says {part.entry['bytes']}")
    return parts


def _differs(path: Path, part: _Part, what: str) -> EpisodeFileError:
    return EpisodeFileError(
        f"{path}: {part.path.name} differs from its card {part.card.name} ({what}): the export "
        f"was interrupted or changed after it was written; {_AGAIN}"
    )


def _part_texts(part: _Part) -> Iterator[tuple[str, str]]:
    if part.path.suffix == ".parquet":
        for k, ep in enumerate(_parquet_episodes(part.path)):
            yield f"row {k}", json.dumps(ep)
        return
    if part.path.suffix == ".tar":
        with tarfile.open(part.path) as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(".json"):
                    text = tar.extractfile(member).read().decode()
                    yield f"{part.path.name}:{member.name}", text
        return
    gz = part.path.suffix == ".gz"
    with gzip.open(part.path, "rt", encoding="utf-8") if gz else open(part.path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield f"line {n}", line


try:  # a corrupt parquet file raises ArrowInvalid (a ValueError) or ArrowException
    from pyarrow import ArrowException as _ArrowError
except ImportError:  # pragma: no cover - pyarrow is a dependency
    _ArrowError = OSError


def _texts(path: Path, parts: list[_Part]) -> Iterator[tuple[str, str]]:
    """(location, JSON text) of every episode in `parts`, each file's checksum checked before
    it is read and its episode count after."""
    try:
        for part in parts:
            if part.entry is not None and sha256(part.path) != part.entry["sha256"]:
                raise _differs(path, part, "its SHA-256")
            count = 0
            for item in _part_texts(part):
                count += 1
                yield item
            if part.entry is not None and count != part.entry["episodes"]:
                raise _differs(
                    path, part, f"{count} episodes, the card says {part.entry['episodes']}"
                )
    except (OSError, EOFError, UnicodeDecodeError, zlib.error, tarfile.TarError, _ArrowError) as e:
        raise EpisodeFileError(f"cannot read episode file {path}: {e}") from None


def read_episode_file(
    path: str | Path, *, limit: int | None = None, start: int = 0
) -> Iterator[dict]:
    """Yield the episodes of an export (``.jsonl``, ``.jsonl.gz``, ``.parquet``, a ``.tar``
    shard, or the ``<name>.tar`` given to `export_episodes` or the brace pattern it returned,
    meaning all its shards; any other name is refused), without rendered files, checked:
    against the export's card when there is one (every file listed and present, none added,
    sizes, SHA-256 and episode counts), and each episode's keys and lengths. `start` skips
    the first episodes (whole files, by their card's counts, are not even read), `limit`
    stops before episode `limit` of the export: ``start=10, limit=20`` yields episodes 10..19.

    Raises:
        EpisodeFileError: the name is of no known format (`FORMATS`), the file is missing,
            unreadable, empty, does not match its card, or an entry is not an episode (not
            JSON, a missing key, labels and records of different lengths, an ``index`` other
            than its position: the episodes are 0..n-1 in order).
    """
    path = _unbrace(Path(path))
    parts, count = _plan(path), 0
    first = parts[0].first
    while (
        len(parts) > 1
        and parts[0].entry is not None
        and count + parts[0].entry["episodes"] <= start
    ):
        count += parts[0].entry["episodes"]  # a whole file before `start`: not read
        parts = parts[1:]
    for where, text in _texts(path, parts):
        if limit is not None and count >= limit:
            return
        if count < start:
            count += 1
            continue
        try:
            ep = json.loads(text)
        except json.JSONDecodeError as e:
            raise EpisodeFileError(
                f"{path} {where} is not valid JSON ({e.msg}, column {e.colno}); re-export it"
            ) from None
        missing = [k for k in _KEYS if not isinstance(ep, dict) or k not in ep]
        if missing:
            raise EpisodeFileError(
                f"{path} {where} is not an exported episode: missing {missing} (export with "
                "`curi episodes ... out=FILE`, which writes the scene records)"
            )
        for s in ("support", "query"):
            if len(ep[f"{s}_labels"]) != len(ep[f"{s}_records"]):
                raise EpisodeFileError(f"{path} {where}: {s} labels and records differ in length")
        if first is None:  # a lone shard: its episodes run on from the first one read
            index = ep.get("index")
            first = index - count if type(index) is int else 0
        _check_index(path, where, ep, first + count)
        count += 1
        yield ep
    if count == 0:
        raise EpisodeFileError(f"{path} holds no episodes")


def _check_index(path: Path, where: str, ep: dict, position: int) -> None:
    """Refuse an episode whose ``index`` is not its position in the export: the episodes of an
    export are 0..n-1 in order, so a part repeated, missing or moved is caught even where no
    card lists checksums. An episode without ``index`` (written by hand) is read by position.

    Raises:
        EpisodeFileError: naming the location, the index found and the one expected.
    """
    index = ep.get("index", position)
    if type(index) is not int or index != position:
        raise EpisodeFileError(
            f"{path} {where}: episode index {index!r} where {position} belongs (an export holds "
            f"episodes 0..n-1 in order: one is repeated, missing or moved); {_AGAIN}"
        )


def check_episode_file(path: str | Path) -> None:
    """Refuse what `read_episode_file` would refuse before reading an episode: a name of no
    known format, nothing there (or not a regular file), shards that do not match their
    card. Cheap (no file is read but the card), so `curi episodes render` checks it first.

    Raises:
        EpisodeFileError: naming the file and what is wrong.
    """
    _plan(_unbrace(Path(path)))


def count_episodes(path: str | Path, limit: int | None = None) -> int | None:
    """Episodes in an export (for progress bars): its card's count, else counted; None when
    it cannot be read (the reader reports why, with the location)."""
    path = _unbrace(Path(path))
    try:
        parts = _plan(path)
        if all(p.entry is not None for p in parts):
            n = sum(p.entry["episodes"] for p in parts)
        else:
            n = sum(1 for _ in _texts(path, parts))
    except EpisodeFileError:
        return None
    return n if limit is None else min(n, limit)

"""The three formats an export is written as: JSON lines (optionally gzip-compressed),
parquet (typed columns that Hugging Face `datasets` and any arrow reader load) and WebDataset
tar shards; each file staged under its temporary name with its card entry, and each written
the same bytes for the same episodes (no time, owner or file name in a header)."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from curi.atomic import atomic_path
from curi.bank_format import sha256
from curi.export.media import Media

__all__ = [
    "Item",
    "parquet_episodes",
    "parquet_schema",
    "stage",
    "stage_shards",
    "write_lines",
    "write_parquet",
]

Item = tuple[int, dict, list[tuple[str, bytes]]]  # (index, episode, rendered files)


def stage(path: Path, publish: contextlib.ExitStack, write) -> dict:
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


# --- JSON lines ------------------------------------------------------------------------------
def write_lines(tmp: Path, texts: Iterable[str], *, compressed: bool) -> int:
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


# --- WebDataset tar shards -------------------------------------------------------------------
def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)  # mtime 0, no owner: the same export is the same bytes
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _write_shard(tmp: Path, items: list[Item]) -> int:
    """One WebDataset sample per episode, key ``<index:08d>``: ``<key>.json`` (the episode)
    and, with rendered files, ``<key>.support_00.png`` ... ``<key>.query_24.png`` (or .wav)."""
    with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
        for index, ep, files in items:
            key = f"{index:08d}"
            _add(tar, f"{key}.json", json.dumps(ep).encode())
            for name, data in files:
                _add(tar, f"{key}.{name}", data)
    return len(items)


def stage_shards(
    out: Path, items: Iterable[Item], shard_size: int, publish: contextlib.ExitStack
) -> list[dict]:
    """Stage the shards ``<name>-00000.tar``, ... of `shard_size` episodes each."""
    files: list[dict] = []
    batch: list[Item] = []

    def flush() -> None:
        path = out.with_name(f"{out.stem}-{len(files):05d}.tar")
        files.append(stage(path, publish, lambda tmp: _write_shard(tmp, batch)))
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


def write_parquet(tmp: Path, items: Iterable[Item], media: Media | None, rows: int) -> int:
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


def parquet_episodes(path: Path) -> Iterator[dict]:
    """The episodes of a parquet export as dicts, without rendered files."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    cols = [n for n in f.schema_arrow.names if not n.endswith(("_images", "_audios"))]
    for batch in f.iter_batches(batch_size=256, columns=cols):
        yield from batch.to_pylist()

"""Exporting episodes with their scene records, so they can be re-rendered in any modality later:
JSON lines (optionally gzip-compressed) or WebDataset-style tar shards, each with a small
dataset card; and the one reader of those files, which checks every episode."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from curi.atomic import atomic_path, write_text
from curi.episodes import EpisodeSampler
from curi.errors import CuriError
from curi.splits import Split

__all__ = ["EpisodeFileError", "export_episodes", "read_episode_file", "count_episodes"]

_KEYS = ("concept_text", "support_labels", "query_labels", "support_records", "query_records")


class EpisodeFileError(CuriError, ValueError):
    """An exported episode file that is missing, empty or corrupt."""


def _open(path: Path, mode: str, *, compressed: bool | None = None):
    compressed = path.suffix == ".gz" if compressed is None else compressed
    return gzip.open(path, mode + "t") if compressed else open(path, mode)


def _shards(out: Path) -> list[Path]:
    """The shards written for ``out=<dir>/<name>.tar``: ``<name>-00000.tar``, ... in order."""
    return sorted(out.parent.glob(f"{out.stem}-[0-9][0-9][0-9][0-9][0-9].tar"))


def _write_shard(path: Path, items: list[tuple[int, str]]) -> None:
    with atomic_path(path) as tmp, tarfile.open(tmp, "w") as tar:
        for index, text in items:
            data = text.encode()
            info = tarfile.TarInfo(f"{index:08d}.json")  # WebDataset: key.extension
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def export_episodes(
    bank,
    split: Split,
    subset: str,
    out: str | Path,
    *,
    n: int,
    negatives: str = "hard",
    query_negatives: str | None = None,
    seed: int = 0,
    shard_size: int = 10_000,
    progress: bool = True,
) -> dict[str, Path]:
    """Write episodes 0..n-1 of (split, subset) with ids, labels, the concept and the scene
    records, and a dataset card beside them (``<out>.card.md``).

    ``out`` ending in ``.jsonl`` / ``.jsonl.gz``: one JSON object per line. Ending in ``.tar``:
    WebDataset-style shards ``<name>-00000.tar``, ... of `shard_size` episodes, one member
    ``<index>.json`` per episode (for large exports). Every file is written to a temporary name
    and renamed into place.
    """
    from tqdm import tqdm

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sampler = EpisodeSampler(
        bank, split, subset, negatives, seed=seed, query_negatives=query_negatives, size=n
    )
    texts = (
        json.dumps(sampler[i].to_dict())
        for i in tqdm(range(n), desc="episodes", disable=not progress)
    )
    if out.suffix == ".tar":
        for old in _shards(out):
            old.unlink()
        batch: list[tuple[int, str]] = []
        for i, text in enumerate(texts):
            batch.append((i, text))
            if len(batch) == shard_size or i == n - 1:
                _write_shard(out.with_name(f"{out.stem}-{i // shard_size:05d}.tar"), batch)
                batch = []
        written = f"{len(_shards(out))} shards {out.stem}-NNNNN.tar of up to {shard_size}"
    else:
        with atomic_path(out) as tmp, _open(tmp, "w", compressed=out.suffix == ".gz") as f:
            for text in texts:
                f.write(text + "\n")
        written = f"one JSON object per line in {out.name}"
    card = out.with_name(out.name + ".card.md")
    write_text(
        card,
        f"# CURI episodes: {split.name} / {subset}\n\n"
        f"- episodes: {n} (indices 0..{n - 1} of `EpisodeSampler`), {written}\n"
        f"- negatives: {negatives} (query: {sampler.query_negatives}); seed: {seed}\n"
        f"- bank: {bank.path} ({len(bank)} concepts, {bank.num_scenes} scenes, "
        f"curi {bank.manifest['version']})\n"
        f"- split sizes: {split.sizes()}\n"
        "- format: each episode is a JSON object: `concept_text` (canonical postfix), "
        "`support_ids`, `support_labels`, `query_ids`, `query_labels` (1 positive, 0 negative, "
        "positives first), `support_records` / `query_records` (every object's shape, color, "
        "material, size, location bins x / y, 3D position, rotation and pixel centre).\n"
        "- regenerate exactly: the same bank config, split, subset, negatives and seed.\n",
    )
    return {"episodes": out, "card": card}


def _texts(path: Path) -> Iterator[tuple[str, str]]:
    """(location, JSON text) of every episode in a JSON-lines file, a tar shard, or the shards
    of ``<name>.tar``."""
    tars = [path] if path.is_file() and path.suffix == ".tar" else []
    if not path.exists() and path.suffix == ".tar":
        tars = _shards(path)
    try:
        if tars:
            for shard in tars:
                with tarfile.open(shard) as tar:
                    for member in tar:
                        if member.isfile() and member.name.endswith(".json"):
                            text = tar.extractfile(member).read().decode()
                            yield f"{shard.name}:{member.name}", text
            return
        with _open(path, "r") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    yield f"line {n}", line
    except (OSError, EOFError, UnicodeDecodeError, zlib.error, tarfile.TarError) as e:
        raise EpisodeFileError(f"cannot read episode file {path}: {e}") from None


def read_episode_file(path: str | Path, *, limit: int | None = None) -> Iterator[dict]:
    """Yield the episodes of an export (``.jsonl``, ``.jsonl.gz``, a ``.tar`` shard, or the
    ``<name>.tar`` given to `export_episodes`, meaning all its shards), checked.

    Raises:
        EpisodeFileError: the file is missing, unreadable, empty, or an entry is not an episode
            (not JSON, a missing key, labels and records of different lengths).
    """
    path = Path(path)
    if not path.is_file() and not (path.suffix == ".tar" and _shards(path)):
        raise EpisodeFileError(
            f"episode file not found at {path}; export one with "
            "`curi episodes split=... subset=test n=... out=FILE`"
        )
    count = 0
    for where, text in _texts(path):
        if limit is not None and count >= limit:
            return
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
        count += 1
        yield ep
    if count == 0:
        raise EpisodeFileError(f"{path} holds no episodes")


def count_episodes(path: str | Path, limit: int | None = None) -> int | None:
    """Episodes in an export (for progress bars); None when it cannot be read (the reader
    reports why, with the location)."""
    try:
        n = sum(1 for _ in _texts(Path(path)))
    except EpisodeFileError:
        return None
    return n if limit is None else min(n, limit)

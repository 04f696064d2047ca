"""Exporting episodes with their scene records, so they can be re-rendered in any modality later:
JSON lines (optionally gzip-compressed) or WebDataset-style tar shards, each with a small
dataset card; and the one reader of those files, which checks every episode.

An export is published as a whole: its files (the JSON-lines file, or every tar shard) are
written under temporary names and renamed into place only once all are complete, and the
dataset card comes last. The card's YAML front matter (the dataset-card convention of the
Hugging Face Hub) lists every file with its episode count, size and SHA-256, and the reader
checks the files against it, so that an interrupted or altered export is refused rather than
read as a shorter dataset (docs/reliability.md, "Exports")."""

from __future__ import annotations

import contextlib
import glob
import gzip
import hashlib
import io
import json
import re
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from curi import validate
from curi.atomic import atomic_path, owner_alive, temporaries, write_text
from curi.episodes import EpisodeSampler
from curi.errors import CuriError
from curi.splits import Split

__all__ = [
    "CARD_FORMAT",
    "EpisodeFileError",
    "check_export_options",
    "count_episodes",
    "export_episodes",
    "read_episode_file",
]

_KEYS = ("concept_text", "support_labels", "query_labels", "support_records", "query_records")
CARD_FORMAT = 1  # version of the card's front matter (the list of files and their checksums)
_DIGITS = "[0-9]" * 5  # shard numbers: <name>-00000.tar, ...
_AGAIN = "export it again with `curi episodes ... out=FILE`"


class EpisodeFileError(CuriError, ValueError):
    """An exported episode file that is missing, empty or corrupt, or does not match its card."""


# --- file names ------------------------------------------------------------------------------
def _card_path(out: Path) -> Path:
    """The dataset card of the export ``out``: ``<out>.card.md`` beside it."""
    return out.with_name(out.name + ".card.md")


def _shards(out: Path) -> list[Path]:
    """The shards present for ``out=<dir>/<name>.tar``: ``<name>-00000.tar``, ... in order."""
    return sorted(out.parent.glob(f"{glob.escape(out.stem)}-{_DIGITS}.tar"))


def _export_of(path: Path) -> Path:
    """The export a file belongs to: ``<name>.tar`` for its shard ``<name>-NNNNN.tar``, else
    the file itself."""
    m = re.fullmatch(r"(.+)-\d{5}\.tar", path.name)
    return path.with_name(m.group(1) + ".tar") if m else path


def _remove_dead_temporaries(out: Path) -> None:
    """Remove the temporaries (``.<file>.tmp-<pid>``, `curi.atomic`) of the files, shards and
    card of the export ``out`` that killed processes left; a live process's are its own."""
    stale = temporaries(out) + temporaries(_card_path(out))
    if out.suffix == ".tar":
        stale += out.parent.glob(f".{glob.escape(out.stem)}-{_DIGITS}.tar.tmp-*")
    for tmp in stale:
        if tmp.is_file() and not owner_alive(tmp):
            tmp.unlink(missing_ok=True)


# --- writing ---------------------------------------------------------------------------------
def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _stage(path: Path, publish: contextlib.ExitStack, write) -> dict:
    """Write `path` under its temporary name (``write(tmp)`` returns the episodes written) and
    leave its renaming to the end of `publish`; returns its card entry."""
    tmp = publish.enter_context(atomic_path(path))
    episodes = write(tmp)
    return {"name": path.name, "episodes": episodes, "bytes": tmp.stat().st_size,
            "sha256": _digest(tmp)}  # fmt: skip


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


def _write_shard(tmp: Path, items: list[tuple[int, str]]) -> int:
    with tarfile.open(tmp, "w") as tar:
        for index, text in items:
            data = text.encode()
            info = tarfile.TarInfo(f"{index:08d}.json")  # WebDataset: key.extension
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return len(items)


def _stage_shards(out: Path, texts: Iterable[str], shard_size: int,
                  publish: contextlib.ExitStack) -> list[dict]:  # fmt: skip
    """Stage the shards ``<name>-00000.tar``, ... of `shard_size` episodes each."""
    files: list[dict] = []
    batch: list[tuple[int, str]] = []

    def flush() -> None:
        path = out.with_name(f"{out.stem}-{len(files):05d}.tar")
        files.append(_stage(path, publish, lambda tmp: _write_shard(tmp, batch)))
        batch.clear()

    for i, text in enumerate(texts):
        batch.append((i, text))
        if len(batch) == shard_size:
            flush()
    if batch:
        flush()
    return files


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
    ``<index>.json`` per episode (for large exports).

    The export replaces an earlier one to the same `out` as a whole: every file is written
    under a temporary name first; once all are complete the old card is removed, the files
    are renamed into place, the old export's surplus shards removed, and the new card, which
    lists every file with its episode count, size and SHA-256, written last. A kill at any
    point leaves the old export or files the reader refuses, and the next export removes the
    killed process's temporaries.
    """
    from tqdm import tqdm

    n, shard_size, seed = check_export_options(n, shard_size, seed)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_temporaries(out)
    sampler = EpisodeSampler(
        bank, split, subset, negatives, seed=seed, query_negatives=query_negatives, size=n
    )
    texts = (
        json.dumps(sampler[i].to_dict())
        for i in tqdm(range(n), desc="episodes", disable=not progress)
    )
    card = _card_path(out)
    with contextlib.ExitStack() as publish:
        if out.suffix == ".tar":
            files = _stage_shards(out, texts, shard_size, publish)
            written = f"{len(files)} shards {out.stem}-NNNNN.tar of up to {shard_size}"
        else:
            gz = out.suffix == ".gz"
            files = [_stage(out, publish, lambda tmp: _write_lines(tmp, texts, compressed=gz))]
            written = f"one JSON object per line in {out.name}"
        card.unlink(missing_ok=True)  # from here until the new card, the export reads as broken
    # Leaving the stack renamed every staged file into place.
    for old in set(_shards(out)) - {out.with_name(f["name"]) for f in files}:
        old.unlink()
    meta = {
        "curi_export": CARD_FORMAT, "export": out.name, "episodes": n, "split": str(split.name),
        "subset": str(subset), "negatives": str(negatives),
        "query_negatives": str(sampler.query_negatives), "seed": seed, "files": files,
    }  # fmt: skip
    write_text(card, _card_text(meta, bank, split, written))
    return {"episodes": out, "card": card}


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
        "`support_ids`, `support_labels`, `query_ids`, `query_labels` (1 positive, 0 negative, "
        "positives first), `support_records` / `query_records` (every object's shape, color, "
        "material, size, location bins x / y, 3D position, rotation and pixel centre).\n"
        "- files: the front matter above lists each with its episode count, size in bytes and "
        "SHA-256; readers check them.\n"
        "- regenerate exactly: the same bank config, split, subset, negatives and seed.\n"
    )


# --- reading ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Part:
    """One file of an export and its card's entry for it (None: no card to check against)."""

    path: Path
    entry: dict | None
    card: Path | None = None


def _load_card(card: Path) -> dict | None:
    """The front matter of a card; None when it has none (a card written before curi listed
    the files of an export)."""
    import yaml

    try:
        text = card.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise EpisodeFileError(f"cannot read the card {card}: {e}") from None
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
        )  # fmt: skip
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
        EpisodeFileError: nothing there, shards without a card, a shard missing or not listed,
            a size that differs from the card.
    """
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
            raise EpisodeFileError(
                f"episode file not found at {path}; export one with "
                "`curi episodes split=... subset=test n=... out=FILE`"
            )
        card = _card_path(_export_of(path))
        meta = _card_of(_export_of(path), card) if card.is_file() else None
        if meta is None:  # a lone file: published whole, nothing to check it against
            return [_Part(path, None)]
        entry = next((f for f in meta["files"] if f["name"] == path.name), None)
        if entry is None:
            raise EpisodeFileError(
                f"{path} is not listed in its card {card.name} (left by another export?); {_AGAIN}"
            )
        parts = [_Part(path, entry, card)]
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


def _texts(path: Path, parts: list[_Part]) -> Iterator[tuple[str, str]]:
    """(location, JSON text) of every episode in `parts`, each file's checksum checked before
    it is read and its episode count after."""
    try:
        for part in parts:
            if part.entry is not None and _digest(part.path) != part.entry["sha256"]:
                raise _differs(path, part, "its SHA-256")
            count = 0
            for item in _part_texts(part):
                count += 1
                yield item
            if part.entry is not None and count != part.entry["episodes"]:
                raise _differs(path, part, f"{count} episodes, the card says "
                                           f"{part.entry['episodes']}")  # fmt: skip
    except (OSError, EOFError, UnicodeDecodeError, zlib.error, tarfile.TarError) as e:
        raise EpisodeFileError(f"cannot read episode file {path}: {e}") from None


def read_episode_file(path: str | Path, *, limit: int | None = None) -> Iterator[dict]:
    """Yield the episodes of an export (``.jsonl``, ``.jsonl.gz``, a ``.tar`` shard, or the
    ``<name>.tar`` given to `export_episodes`, meaning all its shards), checked: against the
    export's card when there is one (every file listed and present, none added, sizes,
    SHA-256 and episode counts), and each episode's keys and lengths.

    Raises:
        EpisodeFileError: the file is missing, unreadable, empty, does not match its card, or
            an entry is not an episode (not JSON, a missing key, labels and records of
            different lengths).
    """
    path = Path(path)
    count = 0
    for where, text in _texts(path, _plan(path)):
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
    """Episodes in an export (for progress bars): its card's count, else counted; None when
    it cannot be read (the reader reports why, with the location)."""
    path = Path(path)
    try:
        parts = _plan(path)
        if all(p.entry is not None for p in parts):
            n = sum(p.entry["episodes"] for p in parts)
        else:
            n = sum(1 for _ in _texts(path, parts))
    except EpisodeFileError:
        return None
    return n if limit is None else min(n, limit)

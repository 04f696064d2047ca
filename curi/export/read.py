"""The one reader of exports: every file checked against the export's card (each file listed
and present, none added, sizes, SHA-256 and episode counts) and every episode's keys, lengths
and index, so that an interrupted or altered export is refused rather than read as a shorter
dataset (docs/reliability.md, "Exports")."""

from __future__ import annotations

import gzip
import json
import os
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from curi.bank_format import sha256
from curi.errors import EpisodeFileError
from curi.export.card import AGAIN, card_of, card_path
from curi.export.files import FORMAT_LIST, export_of, format_of, shards, unbrace
from curi.export.formats import parquet_episodes
from curi.paths import regular_file

__all__ = ["check_episode_file", "count_episodes", "read_episode_file"]

_KEYS = ("concept_text", "support_labels", "query_labels", "support_records", "query_records")
_FIRST_CHARS = 1 << 24  # a first line longer than this (no episode is) is left to the reader
_FIRST_LINES = 1000  # blank lines skipped before the first episode, at most
_NOT_FOUND = (
    "episode file not found at {path}; export one with "
    "`curi episodes split=... subset=test n=... out=FILE`"
)


@dataclass(frozen=True)
class _Part:
    """One file of an export and its card's entry for it (None: no card to check against),
    and the index of its first episode in the export (None: unknown, a shard without card)."""

    path: Path
    entry: dict | None
    card: Path | None = None
    first: int | None = 0


def _plan(path: Path) -> list[_Part]:
    """The files to read for `path` (a file, or ``<name>.tar`` meaning all its shards), each
    with its card entry; the set of shards and every size already checked against the card.

    Raises:
        EpisodeFileError: a name of no known format, nothing there, shards without a card, a
            shard missing or not listed, a size that differs from the card.
    """
    if format_of(path) is None:
        raise EpisodeFileError(
            f"{path} is not an episode export: the name must end in one of {FORMAT_LIST} "
            "(as `curi episodes ... out=FILE` writes)"
        )
    if path.suffix == ".tar" and not path.exists():
        parts = _plan_shards(path)
    else:
        parts = _plan_file(path)
        if parts[0].entry is None:  # a lone file: published whole, nothing to check it against
            return parts
    for part in parts:
        size = part.path.stat().st_size
        if size != part.entry["bytes"]:
            raise _differs(path, part, f"{size} bytes, the card says {part.entry['bytes']}")
    return parts


def _plan_shards(path: Path) -> list[_Part]:
    """The shards of the export ``<name>.tar``, as its card lists them, once the shards there
    are those it lists."""
    card, found = card_path(path), shards(path)
    if not found and not card.is_file():
        raise EpisodeFileError(_NOT_FOUND.format(path=path))
    if not card.is_file():
        raise EpisodeFileError(
            f"{path}: {len(found)} shard(s) but no card {card.name}: the export was "
            f"interrupted or its card removed; {AGAIN}"
        )
    meta = card_of(path, card)
    if meta is None:
        raise EpisodeFileError(
            f"{path}: its card {card.name} does not list the shards (written by an older "
            f"curi), so they cannot be checked; {AGAIN}"
        )
    listed = [f["name"] for f in meta["files"]]
    missing = [name for name in listed if not (path.parent / name).is_file()]
    if missing:
        raise EpisodeFileError(
            f"{path}: shard {missing[0]} is missing ({len(missing)} of the {len(listed)} "
            f"its card lists): the export was interrupted or changed; {AGAIN}"
        )
    extra = sorted({s.name for s in found} - set(listed))
    if extra:
        raise EpisodeFileError(
            f"{path}: shard {extra[0]} is not listed in its card {card.name} (left by "
            f"another export?); remove it, or {AGAIN}"
        )
    return [_Part(path.parent / f["name"], f, card) for f in meta["files"]]


def _plan_file(path: Path) -> list[_Part]:
    """The one file `path`, with its entry in its export's card (none without a card)."""
    if not path.is_file():
        if os.path.lexists(path):  # a FIFO, a folder ...: say what is there
            regular_file(path, "episode file", EpisodeFileError)
        raise EpisodeFileError(_NOT_FOUND.format(path=path))
    card = card_path(export_of(path))
    meta = card_of(export_of(path), card) if card.is_file() else None
    if meta is None:  # a lone file: published whole, nothing to check it against
        return [_Part(path, None, first=None if path.suffix == ".tar" else 0)]
    entry = next((f for f in meta["files"] if f["name"] == path.name), None)
    if entry is None:
        raise EpisodeFileError(
            f"{path} is not listed in its card {card.name} (left by another export?); {AGAIN}"
        )
    before = meta["files"][: meta["files"].index(entry)]
    return [_Part(path, entry, card, sum(f["episodes"] for f in before))]


def _differs(path: Path, part: _Part, what: str) -> EpisodeFileError:
    return EpisodeFileError(
        f"{path}: {part.path.name} differs from its card {part.card.name} ({what}): the export "
        f"was interrupted or changed after it was written; {AGAIN}"
    )


def _part_texts(part: _Part) -> Iterator[tuple[str, str]]:
    if part.path.suffix == ".parquet":
        for k, ep in enumerate(parquet_episodes(part.path)):
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
        raise EpisodeFileError(f"cannot read episode file {path}: {_one_line(e)}") from None


def _one_line(e: BaseException) -> str:
    """`e`'s message on one line: tarfile's lists each compression it tried on a line."""
    return " ".join(str(e).split()) or type(e).__name__


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
    path = unbrace(Path(path))
    parts = _plan(path)
    first = parts[0].first
    parts, count = _skip_files(parts, start)
    for where, text in _texts(path, parts):
        if limit is not None and count >= limit:
            return
        if count < start:
            count += 1
            continue
        ep = _episode(path, where, text)
        if first is None:  # a lone shard: its episodes run on from the first one read
            index = ep.get("index")
            first = index - count if type(index) is int else 0
        _check_index(path, where, ep, first + count)
        count += 1
        yield ep
    if count == 0:
        raise EpisodeFileError(f"{path} holds no episodes")


def _skip_files(parts: list[_Part], start: int) -> tuple[list[_Part], int]:
    """`parts` less the whole files before episode `start` (by their card's counts, so they
    are not even read; the last file is always kept), and the episodes they hold."""
    count = 0
    while (
        len(parts) > 1
        and parts[0].entry is not None
        and count + parts[0].entry["episodes"] <= start
    ):
        count += parts[0].entry["episodes"]
        parts = parts[1:]
    return parts, count


def _episode(path: Path, where: str, text: str) -> dict:
    """The episode of the JSON `text` at `where`, once it has an episode's keys and each set's
    labels and records are of one length.

    Raises:
        EpisodeFileError: naming the location and what is wrong.
    """
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
    return ep


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
            f"episodes 0..n-1 in order: one is repeated, missing or moved); {AGAIN}"
        )


def check_episode_file(path: str | Path) -> None:
    """Refuse what `read_episode_file` would refuse before reading an episode: a name of no
    known format, nothing there (or not a regular file), shards that do not match their
    card; and a first episode that is not one (not JSON, missing keys), or none at all.
    Cheap (the card and the first episode are read, no checksum), so `curi episodes render`
    checks it first.

    Raises:
        EpisodeFileError: naming the file and what is wrong.
    """
    path = unbrace(Path(path))
    parts = _plan(path)
    try:
        first = _first_text(parts[0])
    except UnicodeDecodeError as e:
        raise EpisodeFileError(
            f"{path} is not an episode file: it is not text (byte {e.start} is not UTF-8); "
            "give a file written by `curi episodes ... out=FILE`"
        ) from None
    except (OSError, EOFError, zlib.error, tarfile.TarError, _ArrowError) as e:
        raise EpisodeFileError(f"cannot read episode file {path}: {_one_line(e)}") from None
    if first is None and len(parts) == 1:
        raise EpisodeFileError(f"{path} holds no episodes")
    if first is not None and first[1] is not None:
        ep = _episode(path, *first)
        if parts[0].first is not None:
            _check_index(path, first[0], ep, parts[0].first)


def _first_text(part: _Part) -> tuple[str, str | None] | None:
    """(location, JSON text) of the first episode of `part` (None: it holds none), read
    without the rest of the file; the text is None where a line is too long to take here
    (the reader checks it)."""
    if part.path.suffix in (".parquet", ".tar"):
        texts = _part_texts(part)
        try:
            return next(texts, None)
        finally:
            texts.close()  # the file it holds open
    gz = part.path.suffix == ".gz"
    with gzip.open(part.path, "rt", encoding="utf-8") if gz else open(part.path) as f:
        for n in range(1, _FIRST_LINES + 1):
            line = f.readline(_FIRST_CHARS)
            if not line:
                return None
            if len(line) == _FIRST_CHARS and not line.endswith("\n"):
                return f"line {n}", None
            if line.strip():
                return f"line {n}", line
    return f"line {_FIRST_LINES}", None  # blank lines only so far: the reader goes on


def count_episodes(path: str | Path, limit: int | None = None) -> int | None:
    """Episodes in an export (for progress bars): its card's count, else counted; None when
    it cannot be read (the reader reports why, with the location)."""
    path = unbrace(Path(path))
    try:
        parts = _plan(path)
        if all(p.entry is not None for p in parts):
            n = sum(p.entry["episodes"] for p in parts)
        else:
            n = sum(1 for _ in _texts(path, parts))
    except EpisodeFileError:
        return None
    return n if limit is None else min(n, limit)

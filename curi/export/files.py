"""The files of an export: the formats its name may end in, the names of its tar shards, and
which files beside it an export owns, so that it replaces only the files earlier exports to
the same path wrote (its card's list), never another export's or a user's file."""

from __future__ import annotations

import contextlib
import glob
import json
import re
from pathlib import Path

from curi.atomic import owner_alive, remove, temporaries
from curi.errors import CuriError, EpisodeFileError
from curi.export.card import card_path, read_card
from curi.paths import read_text

__all__ = [
    "DIGITS",
    "FORMATS",
    "FORMAT_LIST",
    "brace_pattern",
    "export_of",
    "format_of",
    "kind",
    "owned",
    "publishing",
    "remove_dead_temporaries",
    "shards",
    "unbrace",
]

DIGITS = "[0-9]" * 5  # shard numbers: <name>-00000.tar, ...

FORMATS = (".jsonl", ".jsonl.gz", ".parquet", ".tar")
"""The endings of the names an export is written and read as: JSON lines (optionally
gzip-compressed), parquet, WebDataset tar shards (``<name>-00000.tar``, ...)."""
FORMAT_LIST = ", ".join(FORMATS)


def format_of(path: Path) -> str | None:
    """The ending of `path`'s name among `FORMATS` (after a name of one character or more)."""
    return next((f for f in FORMATS if path.name.endswith(f) and path.name != f), None)


def kind(out: Path) -> str:
    """``tar``, ``parquet`` or ``lines`` (JSON lines, optionally gzip-compressed)."""
    fmt = format_of(out)
    return "tar" if fmt == ".tar" else "parquet" if fmt == ".parquet" else "lines"


def brace_pattern(out: Path, count: int) -> Path:
    """The path written for ``out=<name>.tar``: its one shard, or WebDataset's brace pattern
    ``<name>-{00000..NNNNN}.tar`` of its shards (which `read_episode_file` also reads)."""
    if count == 1:
        return out.with_name(f"{out.stem}-00000.tar")
    return out.with_name(f"{out.stem}-{{00000..{count - 1:05d}}}.tar")


def shards(out: Path) -> list[Path]:
    """The shards present for ``out=<dir>/<name>.tar``: ``<name>-00000.tar``, ... in order."""
    return sorted(out.parent.glob(f"{glob.escape(out.stem)}-{DIGITS}.tar"))


def export_of(path: Path) -> Path:
    """The export a file belongs to: ``<name>.tar`` for its shard ``<name>-NNNNN.tar``, else
    the file itself."""
    m = re.fullmatch(r"(.+)-\d{5}\.tar", path.name)
    return path.with_name(m.group(1) + ".tar") if m else path


def unbrace(path: Path) -> Path:
    """``<name>.tar`` for the brace pattern ``<name>-{00000..NNNNN}.tar`` `export_episodes`
    reports, else `path`."""
    m = re.fullmatch(r"(.+)-\{\d{5}\.\.\d{5}\}\.tar", path.name)
    return path.with_name(m.group(1) + ".tar") if m else path


def publishing(out: Path) -> Path:
    """The hidden list ``.<out>.card.md.publishing`` of every file an export of ``out`` is
    renaming into place or replacing, written before the old card goes and removed after the
    new card is written: an export killed in between leaves it, so the next one knows which
    files are its own to replace (`owned`)."""
    card = card_path(out)
    return card.with_name(f".{card.name}.publishing")


def owned(out: Path) -> set[str]:
    """Names of the files earlier exports to ``out`` wrote, the only files an export of ``out``
    may delete: those its card lists and those an interrupted export was publishing
    (`publishing`), each a plain name in the folder of ``out`` that belongs to it (``out``
    itself, or for ``<name>.tar`` a shard ``<name>-NNNNN.tar``). A card or list that cannot
    be read lists nothing."""
    names: set[str] = set()
    pending = publishing(out)
    with contextlib.suppress(EpisodeFileError):
        meta = read_card(out)
        names |= {f["name"] for f in meta["files"]} if meta is not None else set()
    if pending.is_file():
        with contextlib.suppress(CuriError, ValueError, TypeError, RecursionError):
            names |= set(json.loads(read_text(pending, "publishing list", CuriError)))
    plain = {n for n in names if isinstance(n, str) and n not in ("", ".", "..")}
    return {n for n in plain if Path(n).name == n and export_of(out.with_name(n)) == out}


def remove_dead_temporaries(out: Path) -> None:
    """Remove the temporaries (``.<file>.tmp-<pid>``, `curi.atomic`) of the files, shards and
    card of the export ``out`` that killed processes left; a live process's are its own."""
    stale = temporaries(out) + temporaries(card_path(out)) + temporaries(publishing(out))
    if out.suffix == ".tar":
        stale += out.parent.glob(f".{glob.escape(out.stem)}-{DIGITS}.tar.tmp-*")
    for tmp in stale:
        if tmp.is_file() and not owner_alive(tmp):
            remove(tmp, root=out.parent, link=True)

"""Sharded exports (``jobs=N``, docs/cluster.md "Sharded exports"): the episodes of an export
split into N ranges, each written by an independent job (`curi.jobs`) as a *part* in a hidden
staging folder beside the output, then published by one step in the calling process that
streams the parts in order into the ordinary writer, so the result is the single-job export
byte for byte.

The staging folder ``.<out name>.parts/`` holds one folder per set of settings, named by a
digest of them (`digest`), so a part written with other settings is never reused. A part is
its data (a tar of the range's items, or files the job published itself) and a completion
marker ``part-NNNNN.done`` written after them, atomically, that records the size and SHA-256
of every file of the part: a part whose marker and files agree is finished and skipped by the
next invocation; a killed job's part, or one whose files changed (a flipped byte, another
part's tar), is redone alone. The caller removes the staging folder once the export is
published. The staging folder and its settings' folder are the command's own: a symlink or
a file in the place of either is refused, never followed (docs/reliability.md, "Third round"
and "Fourth round")."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from curi import validate
from curi.atomic import atomic_path, remove, write_text
from curi.errors import ConfigError, CuriError
from curi.paths import foreign, open_regular, read_text

__all__ = [
    "MAX_JOBS",
    "Part",
    "check_jobs",
    "check_staging",
    "digest",
    "file_digest",
    "parts_folder",
    "plan_parts",
    "read_items",
    "run_parts",
    "staging_folder",
    "write_items",
]

log = logging.getLogger("curi")

MAX_JOBS = 10_000
"""Most jobs one export is split into."""

Item = tuple[int, dict, list[tuple[str, bytes]]]  # (index, JSON-ready episode, rendered files)


def check_jobs(jobs) -> int:
    """`jobs` as an int from 1 to `MAX_JOBS`.

    Raises:
        ConfigError: naming ``jobs``, the value and the allowed range.
    """
    return validate.integer(jobs, "jobs", low=1, high=MAX_JOBS)


def staging_folder(out: str | Path) -> Path:
    """The hidden staging folder of the export (or re-rendering) `out`: ``.<name>.parts``
    beside it; the submitit logs of its jobs go under it too."""
    out = Path(out)
    return out.with_name(f".{out.name}.parts")


def check_staging(out: str | Path) -> Path:
    """The staging folder of `out` (`staging_folder`), once it is missing or a folder of its
    own: a symlink there would have the parts written, and old parts deleted, in the folder
    it points to; a file there is none of curi's. Cheap, so the commands check it before
    opening the bank.

    Raises:
        ConfigError: naming the path and what is there instead.
    """
    folder = staging_folder(out)
    _own_folder(folder, "the staging folder")
    return folder


def _own_folder(folder: Path, what: str) -> None:
    """Nothing, once `folder` is missing or a folder (not a symlink to one): curi writes the
    parts of an export there, so a link would have them written, and files there replaced,
    in the folder it points to (`lstat`, never followed).

    Raises:
        ConfigError: naming `what`, the path and what is there instead.
    """
    found = foreign(folder, folder=True, cannot=f"cannot use {what} {folder}")
    if found is None:
        return
    if found.target is not None:
        raise ConfigError(
            f"{what} {folder} is a symlink (to {found.target}); curi keeps the parts "
            "of an export in a folder of its own there: remove the link"
        )
    raise ConfigError(
        f"{what} {folder} is a file, not a folder; remove it (curi keeps the parts of an "
        "export there)"
    )


def digest(settings: dict) -> str:
    """A short digest of an export's settings (JSON-ready), naming its parts' folder."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parts_folder(out: str | Path, settings: dict) -> Path:
    """The folder of the parts of `out` written with `settings` (created), after removing the
    parts left by runs with other settings (they can never be reused).

    Raises:
        ConfigError: the staging folder, or the folder of these settings in it, is a symlink
            or a file (`check_staging`), refused before anything is written or removed.
    """
    folder = check_staging(out)
    here = folder / digest(settings)
    _own_folder(here, "the parts folder")  # planted in advance: the digest is predictable
    if folder.is_dir():
        for old in folder.iterdir():
            if old.name != here.name and not old.name.startswith("."):  # .submitit: logs
                remove(old, root=folder, link=True)
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        here.mkdir()
    _own_folder(here, "the parts folder")  # again: one put there since the check is refused
    write_text(here / "settings.json", json.dumps(settings, indent=1, default=str))
    return here


@dataclass(frozen=True)
class Part:
    """Episodes ``start..stop-1`` of an export, written into `folder` as ``<name>.tar`` (or,
    without `tar`, files the job publishes itself) and ``<name>.done``, its marker."""

    folder: Path
    number: int
    start: int
    stop: int
    tar: bool = True

    @property
    def name(self) -> str:
        return f"part-{self.number:05d}"

    @property
    def data(self) -> Path:
        return self.folder / f"{self.name}.tar"

    @property
    def done(self) -> Path:
        return self.folder / f"{self.name}.done"

    @property
    def root(self) -> Path:
        """The folder of the output and of its staging folder: the marker names the part's
        files relative to it."""
        return self.folder.parent.parent

    def marker(self) -> dict | None:
        """The completion marker's content when the part is finished: its range as planned,
        and every file it records (the tar, or the files the job published) of the size and
        SHA-256 recorded; else None (missing, unreadable, not a marker, or a file changed),
        and the part is to be redone."""
        meta = self._recorded()
        if meta is None:
            return None
        ok = all(
            file_digest(self.root / name) == (rec["bytes"], rec["sha256"])
            for name, rec in meta["files"].items()
        )
        return meta if ok else None

    def _recorded(self) -> dict | None:
        """The marker's content when it is one of this part, not yet checked against the
        files; None when it is missing, not a regular file, not JSON or not of this part."""
        try:
            meta = json.loads(read_text(self.done, "part marker", CuriError))
            ok = isinstance(meta, dict) and meta.get("sha256") == _content_digest(meta)
        except (CuriError, ValueError, RecursionError):  # RecursionError: nested too deeply
            return None
        if not ok or [meta.get("start"), meta.get("stop")] != [self.start, self.stop]:
            return None
        files = meta.get("files")
        if not isinstance(files, dict) or not all(
            _plain(name) and isinstance(rec, dict) and set(rec) == {"bytes", "sha256"}
            for name, rec in files.items()
        ):
            return None
        return meta if not self.tar or self._key(self.data) in files else None

    def _key(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def finish(self, files: Sequence[Path] = (), **extra: Any) -> dict:
        """Write the completion marker, after the data: the range, the size and SHA-256 of
        the tar (with `tar`) and of `files` (those the job published itself, under `root`),
        `extra` (JSON-ready) and the SHA-256 of all that (`_content_digest`)."""
        paths = [self.data] if self.tar else []
        records = {}
        for path in [*paths, *files]:
            size, sha = file_digest(path)
            records[self._key(path)] = {"bytes": size, "sha256": sha}
        meta = {"start": self.start, "stop": self.stop, "files": records, **extra}
        meta["sha256"] = _content_digest(meta)
        write_text(self.done, json.dumps(meta))
        return meta


def _content_digest(meta: dict) -> str:
    """SHA-256 of a marker's content less its own ``sha256`` (canonical JSON): a byte changed
    in the marker (its index entries, say) makes the part one to redo."""
    body = {k: v for k, v in meta.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _plain(name: object) -> bool:
    """Whether `name` is a relative path that stays under the folder it is relative to."""
    if not isinstance(name, str) or not name:
        return False
    parts = PurePosixPath(name).parts
    return not PurePosixPath(name).is_absolute() and all(p not in (".", "..") for p in parts)


def file_digest(path: Path) -> tuple[int, str] | None:
    """(size, SHA-256) of the regular file `path`, read from one open descriptor; None when it
    is missing or no regular file (never blocking on a FIFO)."""
    try:
        with open_regular(path, "file", CuriError) as f:
            return _digest(f)
    except (CuriError, OSError):
        return None


def _digest(f) -> tuple[int, str]:
    """(size, SHA-256) of the open file `f`, read from its start."""
    return os.fstat(f.fileno()).st_size, hashlib.file_digest(f, "sha256").hexdigest()


def plan_parts(folder: Path, n: int, jobs: int, *, tar: bool = True) -> list[Part]:
    """`jobs` parts (at most `n`) of near-equal ranges covering episodes 0..n-1, each written
    as a tar (or, without `tar`, as files its job publishes itself)."""
    jobs = min(jobs, n)
    bounds = [n * k // jobs for k in range(jobs + 1)]
    return [Part(folder, k, bounds[k], bounds[k + 1], tar) for k in range(jobs)]


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_items(part: Part, items: Iterable[Item]) -> int:
    """Write `items` as the part's tar (atomically: ``<key>.json`` then ``<key>.<file>`` per
    item, as a WebDataset shard) and its completion marker; returns the items written."""
    count = 0
    with atomic_path(part.data) as tmp, tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for index, ep, files in items:
            key = f"{index:08d}"
            _add(tar, f"{key}.json", json.dumps(ep).encode())
            for name, data in files:
                _add(tar, f"{key}.{name}", data)
            count += 1
    part.finish(episodes=count)
    return count


def read_items(parts: Sequence[Part], *, what: str) -> Iterator[Item]:
    """The items of finished `parts`, in order, streamed from their tars, each tar checked
    against its marker (size and SHA-256, on the descriptor it is then read from) before its
    first item, and its items checked to be its range in order.

    Raises:
        CuriError: a part that changed since `run_parts` checked it, or holds other episodes.
    """
    for part in parts:
        meta = part._recorded()
        rec = meta["files"][part._key(part.data)] if meta is not None else None
        with open_regular(part.data, f"{what}: part", CuriError) as f:
            if rec is None or _digest(f) != (rec["bytes"], rec["sha256"]):
                raise _changed(part, what, "its size or SHA-256 differs from its marker")
            f.seek(0)
            yield from _part_items(part, tarfile.open(fileobj=f, mode="r:"), what)


def _part_items(part: Part, tar: tarfile.TarFile, what: str) -> Iterator[Item]:
    """The items of one part's open tar, checked to be episodes ``start..stop-1`` in order."""
    expected = part.start
    item: Item | None = None
    for member in tar:
        key, _, name = member.name.partition(".")
        data = tar.extractfile(member).read()
        if name == "json":
            if item is not None:
                yield item
            if key != f"{expected:08d}":
                raise _changed(part, what, f"it holds episode {key} where {expected} belongs")
            item, expected = (int(key), json.loads(data), []), expected + 1
        else:
            item[2].append((name, data))
    if item is not None:
        yield item
    if expected != part.stop:
        raise _changed(part, what, f"it ends before episode {expected}")


def _changed(part: Part, what: str, why: str) -> CuriError:
    """The error for a part found changed while it is published; its marker is removed first,
    so the next run redoes it."""
    remove(part.done, root=part.folder, link=True)
    return CuriError(
        f"{what}: {part.name} (episodes {part.start}..{part.stop - 1}) in {part.folder} changed "
        f"after it was checked ({why}); run the same command again to redo it"
    )


def run_parts(
    parts: Sequence[Part],
    job: Callable[[Part], Any],
    launcher,
    *,
    what: str,
    progress: bool = True,
) -> None:
    """Run the jobs of the parts not finished yet (``job(part)`` makes each part's
    `curi.jobs.Job`) with `launcher`; finished parts are kept.

    Raises:
        CuriError: one line naming the first failed job, its range and error, and where the
            finished parts are kept.
    """
    from curi.jobs import run_jobs

    todo = [p for p in parts if p.marker() is None]
    if len(todo) < len(parts):
        log.info(
            "%s: %d of %d parts already done, reused", what, len(parts) - len(todo), len(parts)
        )
    if not todo:
        return
    outcomes = run_jobs([job(p) for p in todo], launcher, progress=progress)
    bad = [(p, o) for p, o in zip(todo, outcomes, strict=True) if not o.ok or p.marker() is None]
    if bad:
        p, o = bad[0]
        error = o.error or ("submitted, not waited for" if o.status == "submitted" else "no part")
        others = f" (and {len(bad) - 1} other jobs)" if len(bad) > 1 else ""
        done = len(parts) - len(bad)
        raise CuriError(
            f"{what}: job {p.name} (episodes {p.start}..{p.stop - 1}) failed: {error}{others}; "
            f"the {done} finished parts of {len(parts)} are kept in {p.folder}: run the same "
            "command again to redo only the others"
        )

"""Sharded exports (``jobs=N``, docs/cluster.md "Sharded exports"): the episodes of an export
split into N ranges, each written by an independent job (`curi.jobs`) as a *part* in a hidden
staging folder beside the output, then published by one step in the calling process that
streams the parts in order into the ordinary writer, so the result is the single-job export
byte for byte.

The staging folder ``.<out name>.parts/`` holds one folder per set of settings, named by a
digest of them (`digest`), so a part written with other settings is never reused. A part is
its data (a tar of the range's items, or files the job published itself) and a completion
marker ``part-NNNNN.done`` written after them, atomically: a part with its marker is finished
and skipped by the next invocation, a killed job's part is redone alone. The caller removes
the staging folder once the export is published."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curi import validate
from curi.atomic import atomic_path, remove, write_text
from curi.errors import ConfigError, CuriError

__all__ = [
    "MAX_JOBS",
    "Part",
    "check_jobs",
    "check_staging",
    "digest",
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
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return folder
    except OSError as e:
        raise ConfigError(f"cannot use the staging folder {folder}: {e.strerror or e}") from None
    if stat.S_ISLNK(mode):
        raise ConfigError(
            f"the staging folder {folder} is a symlink (to {os.readlink(folder)}); curi keeps "
            "the parts of an export in a folder of its own there: remove the link"
        )
    if not stat.S_ISDIR(mode):
        raise ConfigError(
            f"the staging folder {folder} is a file, not a folder; remove it (curi keeps the "
            "parts of an export there)"
        )
    return folder


def digest(settings: dict) -> str:
    """A short digest of an export's settings (JSON-ready), naming its parts' folder."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parts_folder(out: str | Path, settings: dict) -> Path:
    """The folder of the parts of `out` written with `settings` (created), after removing the
    parts left by runs with other settings (they can never be reused).

    Raises:
        ConfigError: the staging folder is a symlink or a file (`check_staging`).
    """
    folder = check_staging(out)
    here = folder / digest(settings)
    if folder.is_dir():
        for old in folder.iterdir():
            if old.name != here.name and not old.name.startswith("."):  # .submitit: logs
                remove(old, root=folder, link=True)
    here.mkdir(parents=True, exist_ok=True)
    write_text(here / "settings.json", json.dumps(settings, indent=1, default=str))
    return here


@dataclass(frozen=True)
class Part:
    """Episodes ``start..stop-1`` of an export, written into `folder` as ``<name>.tar`` (or
    files of the job's own) and ``<name>.done``."""

    folder: Path
    number: int
    start: int
    stop: int

    @property
    def name(self) -> str:
        return f"part-{self.number:05d}"

    @property
    def data(self) -> Path:
        return self.folder / f"{self.name}.tar"

    @property
    def done(self) -> Path:
        return self.folder / f"{self.name}.done"

    def marker(self) -> dict | None:
        """The completion marker's content when the part is finished (its range as planned,
        its data file of the size recorded), else None."""
        try:
            meta = json.loads(self.done.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        if not isinstance(meta, dict) or [meta.get("start"), meta.get("stop")] != [
            self.start,
            self.stop,
        ]:
            return None
        size = meta.get("bytes")
        if size is not None and (not self.data.is_file() or self.data.stat().st_size != size):
            return None
        return meta

    def finish(self, **extra: Any) -> dict:
        """Write the completion marker (after the data): the range, the data's size when there
        is a data file, and `extra` (JSON-ready)."""
        meta = {"start": self.start, "stop": self.stop, **extra}
        if self.data.is_file():
            meta["bytes"] = self.data.stat().st_size
        write_text(self.done, json.dumps(meta))
        return meta


def plan_parts(folder: Path, n: int, jobs: int) -> list[Part]:
    """`jobs` parts (at most `n`) of near-equal ranges covering episodes 0..n-1."""
    jobs = min(jobs, n)
    bounds = [n * k // jobs for k in range(jobs + 1)]
    return [Part(folder, k, bounds[k], bounds[k + 1]) for k in range(jobs)]


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


def read_items(parts: Sequence[Part]) -> Iterator[Item]:
    """The items of finished `parts`, in order, streamed from their tars."""
    for part in parts:
        with tarfile.open(part.data, "r:") as tar:
            item: Item | None = None
            for member in tar:
                key, _, name = member.name.partition(".")
                data = tar.extractfile(member).read()
                if name == "json":
                    if item is not None:
                        yield item
                    item = (int(key), json.loads(data), [])
                else:
                    item[2].append((name, data))
            if item is not None:
                yield item


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

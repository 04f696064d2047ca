"""The rendered files an export can carry beside each episode (PNG or WAV bytes per scene),
found by name through entry points of the renderers layer, so that the core never imports
it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol

from curi.errors import ConfigError
from curi.export.files import kind

__all__ = ["MEDIA_GROUP", "NO_FILES_IN_LINES", "Media", "check_media", "get_media", "list_media"]

NO_FILES_IN_LINES = "rendered files go into .parquet or .tar exports, not {name}"


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
    if out is not None and kind(Path(out)) == "lines":
        raise ConfigError(NO_FILES_IN_LINES.format(name=Path(out).name))
    return found[name]

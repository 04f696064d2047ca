"""A gap table's output folder (`curi gap`): the settings that made it (``gap.settings.json``),
the rows finished so far (``gap.json``, a list of rows rewritten after each row, and ``gap.md``,
titled partial) and, until the last row is in, a ``gap.partial`` marker. The same command run
again into the folder computes only the missing rows; a run with other settings is refused,
as the sweeps refuse a folder made with other settings."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from curi.atomic import remove, write_text
from curi.errors import ConfigError
from curi.oracles.report import markdown_table, write_report
from curi.paths import read_text
from curi.schema import check_shape
from curi.splits import Split

__all__ = ["PARTIAL", "SETTINGS", "GapFolder", "again", "gap_settings"]

SETTINGS = "gap.settings.json"
PARTIAL = "gap.partial"
_ROWS = [{"split": str, "negatives": str, "map_strong": (float, None)}]
_REDO = "remove it (or the folder) to compute the table again"


def gap_settings(bank, splits: list[Split], negatives: list[str], **options) -> dict:
    """What makes a gap table's numbers: the bank (its files' digests), every split (its
    name and concepts), the negatives and the scoring `options` (episodes, prior,
    likelihood, seed, negative sampler, divergences); not where it runs (workers)."""
    files = {k: v["sha256"] for k, v in sorted(bank.manifest["files"].items())}
    return {
        "bank": {"name": bank.path.name, "sha256": _digest(json.dumps(files).encode())},
        "splits": {sp.name: _split_digest(sp) for sp in splits},
        "negatives": list(negatives),
        **options,
    }


def again(out: str | Path) -> str:
    """How to finish the table of folder `out` (a new run has a new folder unless told)."""
    return f"the same command with output_dir={out} computes the rest"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _split_digest(split: Split) -> str:
    parts = (np.asarray(s, np.int64).tobytes() for s in (split.train, split.val, split.test))
    return _digest(b"|".join(parts))


class GapFolder:
    """The folder `out` of a gap table with `settings` (`gap_settings`).

    Args:
        out: the output folder.
        settings: the table's settings.
        total: the number of rows of the whole table.
    """

    def __init__(self, out: str | Path, settings: dict, total: int):
        self.out, self.settings, self.total = Path(out), settings, total
        self.written = 0  # rows in gap.json

    def claim(self) -> list[dict]:
        """The rows already finished in the folder with these settings (none in a new
        folder); records the settings.

        Raises:
            ConfigError: the folder holds a table made with other settings, a gap.json
                without its settings, or a damaged settings or rows file.
        """
        saved = self._read(SETTINGS)
        rows = self._read("gap.json")
        if saved is None and rows is not None:
            raise ConfigError(f"{self.out} holds a gap table without its {SETTINGS}; {_REDO}")
        if saved is not None and saved != self.settings:
            diff = sorted(
                k for k in {*saved, *self.settings} if saved.get(k) != self.settings.get(k)
            )
            raise ConfigError(
                f"{self.out} holds a gap table made with other settings ({', '.join(diff)}); "
                "use another output_dir, or the same settings to finish it"
            )
        if saved is None:
            write_text(self.out / SETTINGS, json.dumps(self.settings, indent=2) + "\n")
        rows = check_shape(rows or [], _ROWS, f"rows file '{self.out / 'gap.json'}'", fix=_REDO)
        self.written = len(rows)
        return rows

    def _read(self, name: str):
        """The JSON in the folder's file `name`, None when missing.

        Raises:
            ConfigError: not a regular file, unreadable or not JSON.
        """
        path = self.out / name
        text = read_text(path, "gap table file", missing_ok=True)
        if text is None:
            return None
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            raise ConfigError(f"{path} is not the JSON curi gap wrote; {_REDO}") from None

    def save(self, rows: list[dict], *, meta: dict) -> None:
        """Write the rows finished so far: gap.json and gap.md (titled partial), and the
        partial marker."""
        text = f"{len(rows)} of {self.total} rows; {again(self.out)}\n"
        write_text(self.out / PARTIAL, text)
        write_text(self.out / "gap.json", _json(rows))
        self.written = len(rows)  # kept from here: a signal while gap.md is written says so
        title = f"# Compositionality gap (partial: {len(rows)} of {self.total} rows)\n\n"
        write_text(self.out / "gap.md", title + _meta(meta) + markdown_table(rows))

    def finish(self, rows: list[dict], *, meta: dict, title: str) -> dict[str, Path]:
        """Write the whole table (gap.json, gap.md, gap.png) and remove the partial marker."""
        paths = write_report(rows, self.out, meta=meta, title=title)
        self.written = len(rows)
        remove(self.out / PARTIAL, root=self.out)
        return paths


def _json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=2) + "\n"


def _meta(meta: dict) -> str:
    return "".join(f"- {k}: {v}\n" for k, v in meta.items()) + "\n"

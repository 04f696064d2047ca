"""A gap table's output folder (`curi gap`): the settings that made it (``gap.settings.json``),
the rows finished so far (``gap.json``, a list of rows rewritten after each row, and ``gap.md``,
titled partial), the SHA-256 of each row as it was written (``gap.rows.sha256``) and, until
the last row is in, a ``gap.partial`` marker. The same command run again into the folder
computes only the missing rows, once the finished ones pass their checks (a row that fails one
is scored again); a run with other settings is refused, as the sweeps refuse a folder made with
other settings (docs/reliability.md, "Fourth round")."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from collections import Counter
from pathlib import Path

import numpy as np

from curi.atomic import owner_alive, remove, temporaries, write_text
from curi.errors import ConfigError
from curi.oracles.report import markdown_table, write_report
from curi.paths import foreign, read_text
from curi.schema import check_shape
from curi.splits import Split

__all__ = ["DIGESTS", "PARTIAL", "SETTINGS", "GapFolder", "again", "gap_settings", "row_digest"]

log = logging.getLogger(__name__)
SETTINGS = "gap.settings.json"
PARTIAL = "gap.partial"
DIGESTS = "gap.rows.sha256"
_FILES = ("gap.json", "gap.md", "gap.png", PARTIAL, SETTINGS, DIGESTS)  # all curi gap writes
_ORACLES = ("strong", "weak", "random", "prior")
# rates in [0, 1]: the oracles' mAP and class-balanced accuracy (per episode, and pooled)
_RATES = (
    *(f"map_{o}" for o in _ORACLES),
    *(f"cba_{o}" for o in _ORACLES),
    *(f"cba_pooled_{o}" for o in ("strong", "weak", "prior")),
)
_DIVERGENCES = ("d_atom", "d_compound", "d_atom_random", "d_compound_random")
_ROUNDING = 1e-9  # a divergence is 1 - C, in [0, 1] up to rounding
# the keys and types of a row of `curi.oracles.gap.compositionality_gap` (its divergences
# join it once computed; a split without test concepts has none)
_ROW = {
    "split": str,
    "negatives": str,
    "n_train": int,
    "n_test": int,
    **dict.fromkeys(_RATES, float),
    "episodes": int,
    "seconds": float,
    "stage_seconds": {str: float},
    "map_gap": float,
    "cba_gap": float,
    **{f"{k}?": float for k in _DIVERGENCES},
}
_KEYS = {k.removesuffix("?") for k in _ROW}
_ROWS = [_ROW]
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


def row_digest(row: dict) -> str:
    """The SHA-256 of a row's canonical JSON (keys sorted, no spaces): the same for the row
    in memory and the row read back from gap.json (floats are written to the last bit)."""
    return _digest(json.dumps(row, sort_keys=True, separators=(",", ":")).encode())


def _fault(row: dict, settings: dict) -> str | None:
    """What is wrong with the values of a finished row that has the keys and types of a
    fresh one (None: nothing): a key no row has, a row of another table, another number of
    episodes, a negative count, a rate outside [0, 1] or not finite, a gap that is not
    strong minus weak (as `compositionality_gap` computes it, to the bit), some divergences
    without the others or one outside [0, 1], a time that is negative or not finite."""
    extra = sorted(set(row) - _KEYS)
    if extra:
        return f"has keys no row has ({', '.join(extra)})"
    if row["split"] not in settings.get("splits", {}) or row["negatives"] not in settings.get(
        "negatives", ()
    ):
        return "is no row of this table"
    if row["episodes"] != settings.get("episodes", row["episodes"]):
        return f"counts {row['episodes']} episodes, not {settings['episodes']}"
    if min(row["n_train"], row["n_test"]) < 0:
        return "has a negative number of concepts"
    for key in _RATES:
        if not 0 <= row[key] <= 1:  # NaN too
            return f"has {key} = {row[key]!r}, not a rate in [0, 1]"
    for kind in ("map", "cba"):
        if row[f"{kind}_gap"] != row[f"{kind}_strong"] - row[f"{kind}_weak"]:
            return f"has {kind}_gap = {row[f'{kind}_gap']!r}, not {kind}_strong - {kind}_weak"
    found = [k for k in _DIVERGENCES if k in row]
    if found and len(found) < len(_DIVERGENCES):
        return f"has {', '.join(found)} without the other divergences"
    for key in found:
        if not -_ROUNDING <= row[key] <= 1 + _ROUNDING:
            return f"has {key} = {row[key]!r}, not a divergence in [0, 1]"
    if not all(0 <= t < float("inf") for t in (row["seconds"], *row["stage_seconds"].values())):
        return "has a time that is not a finite number of seconds"
    return None


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
        self._digests: list[str] = []  # of the rows in gap.json

    def claim(self) -> list[dict]:
        """The rows already finished in the folder with these settings (none in a new
        folder), less those that fail a check (logged, to be scored again); records the
        settings and deletes the temporaries of writers that are gone.

        Raises:
            ConfigError: the folder holds a table made with other settings, a gap.json
                without its settings, a damaged settings, rows or digests file (rows of
                the wrong keys or types), or something not a file under one of the names
                curi gap writes.
        """
        self._check_files()
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
        rows = [] if rows is None else rows  # `{}` or `0` are no rows file
        rows = check_shape(rows, _ROWS, f"rows file '{self.out / 'gap.json'}'", fix=_REDO)
        digests = self._read(DIGESTS)
        if digests is not None:
            what, fix = f"digests file '{self.out / DIGESTS}'", "remove the folder to start again"
            digests = set(check_shape(digests, {"sha256": [str]}, what, fix=fix)["sha256"])
        self._clean()
        if saved is None:
            write_text(self.out / SETTINGS, json.dumps(self.settings, indent=2) + "\n")
        kept = self._kept(rows, digests)
        self._digests, self.written = [row_digest(r) for r in kept], len(kept)
        if len(kept) == self.total:
            log.info("%s: all %d rows done: the table is complete", self.out, self.total)
        elif kept:
            log.info("%s: %d of %d rows done; computing the rest", self.out, len(kept), self.total)
        return kept

    def _kept(self, rows: list[dict], digests: set[str] | None) -> list[dict]:
        """The `rows` that pass every check: their key once in the file, their values
        (`_fault`) and, where the folder has its digests (`digests`), their SHA-256 among
        them; one line is logged for each row dropped. Rows of a folder without digests (an
        older curi wrote it) are kept on their values alone, with one line saying so."""
        count = Counter((r["split"], r["negatives"]) for r in rows)
        kept, named = [], set()
        for row in rows:
            key = (row["split"], row["negatives"])
            why = f"is in the file {count[key]} times" if count[key] > 1 else None
            why = why or _fault(row, self.settings)
            if why is None and digests is not None and row_digest(row) not in digests:
                why = f"differs from the row written (its SHA-256 is not in {DIGESTS})"
            if why is None:
                kept.append(row)
            elif key not in named:
                named.add(key)
                log.warning("%s: row %s/%s %s; scoring it again", self.out / "gap.json", *key, why)
        if digests is None and kept:
            log.warning(
                "%s: no %s (an older curi wrote the table): %d rows kept on their values, "
                "unchecked against digests",
                self.out,
                DIGESTS,
                len(kept),
            )
        return kept

    def _check_files(self) -> None:
        """Refuse anything but a file (a folder, a symlink) under a name curi gap writes: it
        would be written over or deleted, or end the command after the work.

        Raises:
            ConfigError: naming it.
        """
        for name in _FILES:
            path = self.out / name
            found = foreign(path, folder=False, cannot=f"cannot read {path}")
            if found is not None:
                plain = found.kind in ("a symlink", "a folder")
                kind = found.kind if plain else "not a regular file"
                raise ConfigError(
                    f"{path} is {kind}, not the file curi gap writes there; move it out of "
                    "the folder (curi gap deletes nothing of yours), or use another output_dir"
                )

    def _clean(self) -> None:
        """Delete the temporaries of this folder's files left by writers that are gone
        (killed while writing); a live writer's stay."""
        for name in _FILES:
            for tmp in temporaries(self.out / name):
                if not owner_alive(tmp):
                    remove(tmp, root=self.out, link=True)
                    log.info("removed %s, left by a writer that is gone", tmp)

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

    def _record(self, rows: list[dict]) -> list[str]:
        """Write the digests of `rows` before the rows are written, together with those of the
        rows written last, so that a stop between the two files leaves every row of gap.json
        with its digest; returns the digests of `rows`."""
        new = [row_digest(r) for r in rows]
        text = json.dumps({"sha256": sorted({*new, *self._digests})}, indent=1) + "\n"
        write_text(self.out / DIGESTS, text)
        return new

    def save(self, rows: list[dict], *, meta: dict) -> None:
        """Write the rows finished so far: their digests, gap.json and gap.md (titled
        partial), and the partial marker."""
        text = f"{len(rows)} of {self.total} rows; {again(self.out)}\n"
        write_text(self.out / PARTIAL, text)
        digests = self._record(rows)
        write_text(self.out / "gap.json", _json(rows))
        self._digests, self.written = digests, len(rows)  # a signal from here on says so
        title = f"# Compositionality gap (partial: {len(rows)} of {self.total} rows)\n\n"
        write_text(self.out / "gap.md", title + _meta(meta) + markdown_table(rows))

    def finish(self, rows: list[dict], *, meta: dict, title: str) -> dict[str, Path]:
        """Write the whole table (its digests, gap.json, gap.md, gap.png) and remove the
        partial marker (a file: never a folder or link put there since the start)."""
        digests = self._record(rows)
        paths = write_report(rows, self.out, meta=meta, title=title)
        self._digests, self.written = digests, len(rows)
        marker = self.out / PARTIAL
        if os.path.lexists(marker) and stat.S_ISREG(os.lstat(marker).st_mode):
            remove(marker, root=self.out)
        return paths


def _json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=2) + "\n"


def _meta(meta: dict) -> str:
    return "".join(f"- {k}: {v}\n" for k, v in meta.items()) + "\n"

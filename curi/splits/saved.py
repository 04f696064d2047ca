"""Saved splits: `save_split` writes a split to a small JSON file and the ``file`` rule reads it
back, refusing a bank whose concepts differ from the one it was made on (indices would then
name other concepts). Useful for generated splits that are costly to search again."""

from __future__ import annotations

import hashlib
import json
import os
import reprlib
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from curi.atomic import write_text
from curi.errors import SplitError
from curi.paths import regular_file
from curi.splits.base import SUBSETS, Split, check_name, check_split
from curi.splits.rules import register_split_rule
from curi.splits.spec import SplitSpec

__all__ = ["FileOptions", "bank_identity", "check_split_file", "load_split", "save_split"]

FORMAT = "curi-split"
VERSION = 1
PARTS = (*SUBSETS, "dropped")


@dataclass(frozen=True)
class FileOptions:
    """Options of ``file``.

    Attributes:
        path: the JSON file written by `Split.save` (``~`` is expanded; a relative path is
            relative to the working directory).
    """

    path: str = ""

    def __post_init__(self) -> None:
        if not str(self.path or ""):
            raise SplitError("rule file needs the path of a saved split (path: my_split.json)")
        object.__setattr__(self, "path", str(self.path))


def bank_identity(bank) -> dict:
    """What a saved split records of its bank: the number of concepts and a sha256 of the
    concept strings in order, which together fix what each concept index means."""
    return _identity(bank.concepts)


def _identity(concepts: list[str]) -> dict:
    digest = hashlib.sha256("\n".join(concepts).encode()).hexdigest()
    return {"num_concepts": len(concepts), "concepts_sha256": digest}


def save_split(split: Split, bank, path: str | Path) -> Path:
    """Write `split` of `bank` to `path` (JSON) atomically (`curi.atomic`): a reader never sees
    half a file.

    Returns:
        The path written.
    """
    path = Path(path).expanduser()
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "name": split.name,
        "bank": bank_identity(bank),
        **{part: np.asarray(getattr(split, part)).astype(int).tolist() for part in PARTS},
    }
    write_text(path, json.dumps(doc) + "\n")
    return path


def load_split(bank, path: str | Path, *, name: str | None = None) -> Split:
    """Read a split saved by `save_split` for `bank`.

    Args:
        bank: the bank to split; it must hold the same concepts as the one saved with the split.
        path: the JSON file.
        name: the split's name; default: the name saved in the file.

    Raises:
        SplitError: a missing or malformed file, or one saved for another bank.
    """
    path = Path(path).expanduser()
    doc = _read(path)
    parts = _parts_on(doc, path, bank.concepts)
    try:
        name = check_name(name or doc["name"])
    except SplitError as e:
        raise SplitError(f"split file {str(path)!r}: {e}") from None
    split = Split(name, *(parts[p] for p in PARTS))
    used = np.concatenate([parts[p] for p in SUBSETS])
    if np.intersect1d(parts["dropped"], used).size:
        raise SplitError(f"split file {str(path)!r} drops concepts it also uses")
    if not np.array_equal(parts["train"], parts["test"]):  # Instance IID has train = test
        check_split(split, bank, grouped=False)
    return split


def check_split_file(path: str | Path, concepts: list[str] | None = None) -> dict:
    """The document of the split file at `path`, once everything a bank is not needed for
    passes (a regular file of JSON, the format and version, the parts, each a list of distinct
    non-negative integers, the name), and, given the `concepts` of the bank it will split
    (`curi.bank.bank_concepts`), what `load_split` checks of that bank: saved for it, every
    index one of its concepts. Cheap, so a command checks a split file before its work.

    Raises:
        SplitError: naming the file and what is wrong, in `load_split`'s words.
    """
    path = Path(path).expanduser()
    doc = _read(path)
    if concepts is not None:
        _parts_on(doc, path, concepts)
    for part in PARTS:
        _indices(doc[part], sys.maxsize, path, part)
    try:
        check_name(doc["name"])
    except SplitError as e:
        raise SplitError(f"split file {str(path)!r}: {e}") from None
    return doc


def _parts_on(doc: dict, path: Path, concepts: list[str]) -> dict[str, np.ndarray]:
    """The parts of the split file `doc` (read from `path`) as index arrays, once it was saved
    for the bank of `concepts` and each index is one of them.

    Raises:
        SplitError: saved for another bank, or an index outside it.
    """
    want, have = doc["bank"], _identity(concepts)
    if {k: want.get(k) for k in have} != have:
        raise SplitError(
            f"split file {str(path)!r} was saved for another bank ({want.get('num_concepts')} "
            f"concepts, sha256 {str(want.get('concepts_sha256'))[:12]}); this bank has "
            f"{have['num_concepts']} concepts (sha256 {have['concepts_sha256'][:12]}). Use the "
            "bank the split was made on, or make the split again on this one"
        )
    return {p: _indices(doc[p], len(concepts), path, p) for p in PARTS}


def _read(path: Path) -> dict:
    if not os.path.exists(path):  # a dangling symlink too; regular_file says the rest
        raise SplitError(f"split file {str(path)!r} not found; write one with Split.save")
    regular_file(path, "split file", SplitError)  # a FIFO would block the read forever
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        what = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise SplitError(f"split file {str(path)!r} is not readable JSON: {what}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SplitError(f"split file {str(path)!r} is not a saved curi split")
    if doc.get("version") != VERSION:
        raise SplitError(
            f"split file {str(path)!r} has format version {doc.get('version')!r}; this curi "
            f"reads version {VERSION}"
        )
    missing = [k for k in ("name", "bank", *PARTS) if k not in doc]
    if missing or not isinstance(doc["bank"], dict):
        raise SplitError(f"split file {str(path)!r} lacks {missing or ['bank']}")
    return doc


def _indices(values, n: int, path: Path, part: str) -> np.ndarray:
    """One part's indices as a sorted int64 array: a flat list of plain integers (no float,
    even 3.0, no bool, no nested list: `save_split` writes none), each a concept of the bank.

    Raises:
        SplitError: naming the file, the part and the first bad entry.
    """
    where = f"split file {str(path)!r}: {part}"
    if not isinstance(values, list):
        raise SplitError(f"{where} is {type(values).__name__}, not a list of concept indices")
    for i, v in enumerate(values):
        if type(v) is not int:  # bool is a subclass of int: refused too
            raise SplitError(
                f"{where}[{i}] is {type(v).__name__} {reprlib.repr(v)}, not an integer concept "
                "index; write split files with Split.save (curi split ... save=FILE.json)"
            )
        if not 0 <= v < n:
            raise SplitError(
                f"{where}[{i}] = {reprlib.repr(v)} is outside the bank's concept indices 0..{n - 1}"
            )
    arr = np.array(values, dtype=np.int64)
    if np.unique(arr).size != arr.size:
        raise SplitError(f"{where} repeats a concept")
    return np.sort(arr)


@register_split_rule("file", options=FileOptions)
def saved(spec: SplitSpec, bank) -> Split:
    """The split saved at ``path`` (its val policy is the saved one)."""
    return load_split(bank, spec.options.path, name=spec.name)

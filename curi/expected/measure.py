"""What a bank and its episodes are, measured the same way when the expected files are made
(`curi.expected.generate`) and when an installation is checked (`curi.expected.check`): the
bank's files (bytes, and the arrays they hold), its manifest's counts, the split's concepts,
and digests of episodes drawn by each path that makes them (docs/design.md, "Stored expected
numbers")."""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

__all__ = [
    "CASES",
    "EPISODES",
    "EXPORT_EPISODES",
    "FIRST",
    "PATHS",
    "SEEDS",
    "SPLIT",
    "SUBSET",
    "bank_record",
    "episode_digests",
    "measure_bank",
    "measure_episodes",
    "split_digest",
]

SPLIT, SUBSET = "concept_iid", "test"  # the split and subset of every stored stream
#: case -> (negatives, negative_sampler): the paper's hard and easy negatives, and the matched
#: sampler (hard pools, each negative with a positive's object count and colours)
CASES = {"hard": ("hard", "paper"), "easy": ("easy", "paper"), "matched": ("hard", "matched")}
SEEDS = (0, 1)
#: the paths that make episodes: ``EpisodeSampler[i]`` (the reference), ``.stacked`` (many at
#: once, compiled) and the export (`curi.export.export_episodes`, read back). The device
#: sampler is not one: it follows the distribution, not the draws.
PATHS = ("reference", "stacked", "export")
EPISODES = 256  # episodes of each stream by the reference and stacked paths
EXPORT_EPISODES = 64  # of them, by the export path (its scene records make it the slowest)
FIRST = 2  # episodes of each stream stored as raw values, to say which field moved
FIELDS = ("concept", "support_ids", "support_labels", "query_ids", "query_labels")
_MANIFEST = "manifest.json"  # holds the version and timings: its counts are compared instead


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def _array_digest(arrays: Iterable[tuple[str, np.ndarray]]) -> str:
    """SHA-256 of named arrays' names, dtypes, shapes and values (not of how a file stores
    them: another numpy may write other headers or zip entries around the same arrays)."""
    h = hashlib.sha256()
    for name, a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def _content(path: Path) -> str:
    """The digest of what the file holds: its arrays for ``.npy`` / ``.npz``, else its bytes."""
    if path.suffix == ".npy":
        return _array_digest([("", np.load(path, mmap_mode="r", allow_pickle=False))])
    if path.suffix == ".npz":
        with zipfile.ZipFile(path) as z, np.load(path, allow_pickle=False) as npz:
            names = sorted(n.removesuffix(".npy") for n in z.namelist())
            return _array_digest((n, npz[n]) for n in names)
    return _sha256_file(path)


def measure_bank(path: str | Path) -> dict:
    """The bank folder `path`, measured: ``files`` (each file but the manifest -> its
    ``sha256`` and ``content``, the digest of its arrays), the manifest's ``config`` and
    ``counts``."""
    path = Path(path)
    names = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    files = {
        n: {"sha256": _sha256_file(path / n), "content": _content(path / n)}
        for n in names
        if n != _MANIFEST
    }
    manifest = json.loads((path / _MANIFEST).read_text(encoding="utf-8"))
    return {"config": manifest["config"], "counts": manifest["counts"], "files": files}


def split_digest(split) -> str:
    """A digest of the concepts of each subset of `split`."""
    return _array_digest(
        (s, np.asarray(getattr(split, s), np.int64)) for s in ("train", "val", "test")
    )


def _digest(fields: tuple) -> str:
    """The 12-hex digest of one episode's concept, ids and labels (as int64)."""
    return _array_digest(
        (name, np.asarray(v, np.int64)) for name, v in zip(FIELDS, fields, strict=True)
    )[:12]


def episode_digests(eps: dict[str, np.ndarray]) -> list[str]:
    """The digest of each episode of `eps` (`FIELDS` -> (E, ...) arrays, as
    `EpisodeSampler.stacked` returns them)."""
    return [_digest(tuple(eps[k][i] for k in FIELDS)) for i in range(len(eps["concept"]))]


def _raw(eps: dict[str, np.ndarray], n: int) -> list[dict]:
    """The first `n` episodes of `eps` as plain values (JSON)."""
    return [
        {k: np.asarray(eps[k][i]).tolist() for k in FIELDS}
        for i in range(min(n, len(eps["concept"])))
    ]


def _sampler(bank, split, case: str, seed: int, size: int):
    from curi.episodes import EpisodeSampler

    negatives, negative_sampler = CASES[case]
    return EpisodeSampler(
        bank, split, SUBSET, negatives, seed, size=size, negative_sampler=negative_sampler
    )


def _reference(bank, split, case: str, seed: int, folder: Path) -> tuple[dict, dict]:
    """Episodes one by one (``sampler[i]``), and the digest of their alternates."""
    eps = [_sampler(bank, split, case, seed, EPISODES)[i] for i in range(EPISODES)]
    arrays = {k: np.stack([np.asarray(getattr(e, k)) for e in eps]) for k in FIELDS}
    alternates = _array_digest(
        (f"{e.index}|{s}", getattr(e, f"{s}_alternates")) for e in eps for s in ("support", "query")
    )
    return arrays, {"alternates": alternates}


def _stacked(bank, split, case: str, seed: int, folder: Path) -> tuple[dict, dict]:
    """Episodes many at once (`EpisodeSampler.stacked`)."""
    return _sampler(bank, split, case, seed, EPISODES).stacked(0, EPISODES), {}


def _export(bank, split, case: str, seed: int, folder: Path) -> tuple[dict, dict]:
    """Episodes exported as JSON lines and read back, and the digest of the file's bytes."""
    from curi.export import export_episodes, read_episode_file

    negatives, negative_sampler = CASES[case]
    out = folder / f"{case}-{seed}.jsonl"
    export_episodes(
        bank,
        split,
        SUBSET,
        out,
        n=EXPORT_EPISODES,
        negatives=negatives,
        negative_sampler=negative_sampler,
        seed=seed,
        progress=False,
    )
    rows = list(read_episode_file(out))
    arrays = {k: np.array([r[k] for r in rows], np.int64) for k in FIELDS}
    return arrays, {"export": _sha256_file(out)}


_PATH_FUNCTIONS = {"reference": _reference, "stacked": _stacked, "export": _export}


def measure_episodes(bank, split, case: str, seed: int, path: str, folder: Path) -> dict:
    """The stream (`SPLIT`, `SUBSET`, `CASES[case]`, `seed`) as `path` (`PATHS`) makes it:
    ``episodes`` (each one's digest), ``first`` (the first `FIRST` as raw values) and the
    path's own digest (``alternates`` of the reference, ``export`` of the file's bytes);
    `folder` is a scratch folder (the export's file)."""
    arrays, extra = _PATH_FUNCTIONS[path](bank, split, case, seed, folder)
    return {"episodes": episode_digests(arrays), "first": _raw(arrays, FIRST), **extra}


def bank_record(bank, folder: Path, *, paths: Iterable[str] = PATHS) -> dict:
    """Everything measured of the loaded `bank`: ``bank`` (`measure_bank`), ``split`` (name,
    subset, digest) and ``streams``: case -> seed (a string) -> path -> `measure_episodes`."""
    from curi.splits import make_split

    split = make_split(bank, SPLIT)
    streams = {
        case: {
            str(seed): {p: measure_episodes(bank, split, case, seed, p, folder) for p in paths}
            for seed in SEEDS
        }
        for case in CASES
    }
    return {
        "bank": measure_bank(bank.path),
        "split": {"name": SPLIT, "subset": SUBSET, "digest": split_digest(split)},
        "streams": streams,
    }

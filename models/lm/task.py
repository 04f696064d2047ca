"""The functions of an exported lm-evaluation-harness task folder (`curi.models.lm.export`):
its ``utils.py`` is a few lines that hand its own folder to these. They load the documents,
join an episode's support text (stored once per episode) with each query scene, turn the two
answers' log-likelihoods into a score, and average class-balanced accuracy and average
precision over episodes with curi's metric functions (CURI paper, section 3: metrics per
episode, then their mean)."""

from __future__ import annotations

import contextlib
import gzip
import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from curi.atomic import (
    atomic_path,
    exclusive,
    owner_alive,
    remove,
    rename_into,
    temporaries,
    temporary_name,
    write_text,
)
from curi.errors import BankError, ConfigError, CuriError
from curi.models.lm.prompt import REQUEST
from curi.paths import open_regular, read_text

__all__ = [
    "MANIFEST",
    "TaskFiles",
    "aggregate_ap",
    "aggregate_cba",
    "aggregate_eval_ap",
    "check_manifest",
    "doc_to_text",
    "episode_metrics",
    "load_documents",
    "process_results",
    "read_manifest",
    "read_table",
    "replacing",
    "write_table",
]

MANIFEST = "curi_tasks.json"
FORMAT = 1


def read_table(path: Path) -> list[dict]:
    """The rows of a ``.jsonl.gz`` table of a task folder (never blocking on a FIFO).

    Raises:
        ConfigError: the table is missing or not a regular file.
    """
    with open_regular(path, "task table") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def write_table(path: Path, rows) -> int:
    """Rows as a ``.jsonl.gz`` table of a task folder (fixed mtime: the same rows give the same
    bytes); its size in bytes."""
    with atomic_path(path) as tmp, open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=6, mtime=0) as f:
            f.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode())
    return path.stat().st_size


@lru_cache(maxsize=16)
def _manifest(path: str, stamp: int) -> dict:
    return json.loads(read_text(path, "manifest"))


@dataclass(frozen=True)
class TaskFiles:
    """The files one kind of export writes in a task folder (`curi lm export`'s or `curi lm
    rules`'), as its manifest names them: `fixed` names, and per task ``<task><suffix>`` for
    each of `suffixes` and its ``split_file``."""

    manifest: str
    fixed: tuple[str, ...]
    suffixes: tuple[str, ...]

    def named_by(self, manifest: object) -> set[str]:
        """The names of the files the export `manifest` (its JSON) wrote."""
        tasks = manifest.get("tasks") if isinstance(manifest, dict) else None
        names = {self.manifest, *self.fixed}
        for task, info in tasks.items() if isinstance(tasks, dict) else ():
            names |= {f"{task}{suffix}" for suffix in self.suffixes}
            if isinstance(info, dict) and isinstance(info.get("split_file"), str):
                names.add(info["split_file"])
        return names

    def owns(self, name: object) -> bool:
        """Whether `name` is a plain name of a form this kind of export writes (a fixed name,
        or ``curi_...`` with a task's suffix or ``_split.json``): a manifest or list that
        names a user's file never gets it removed."""
        if not isinstance(name, str) or Path(name).name != name or name.startswith("."):
            return False
        ends = (*self.suffixes, "_split.json")
        return name in (self.manifest, *self.fixed) or (
            name.startswith("curi_") and name.endswith(ends)
        )


@contextmanager
def replacing(out: str | Path, files: TaskFiles) -> Iterator[Path]:
    """Replace one kind of export in the task folder `out` as a whole: yield an empty staging
    folder inside it to write every file into, the manifest too; when the block ends without
    error, the files of the earlier export of that kind (those its manifest names) are
    replaced by the new ones, so no stale task stays tagged in the folder, and nothing else
    there is touched (a user's files, the other kind's tasks). The whole runs under a lock
    (`curi.atomic.exclusive`); the manifest is removed first and published last, and a hidden
    list ``.<manifest>.publishing`` names every file being replaced until then, so a kill
    leaves a folder without a manifest whose files the next export knows to replace.

    Raises:
        ConfigError: `out` is a file, or another export of that kind to it is running.
    """
    folder = Path(out).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"out={out} is a file, not a folder; give the task folder to write")
    folder.mkdir(parents=True, exist_ok=True)
    with exclusive(folder / files.manifest, what=f"out={out}", error=ConfigError):
        new = folder / f"{files.manifest}.new"
        for old in temporaries(new):
            if not owner_alive(old):  # a killed export's (or this process's own)
                remove(old, root=folder, link=True)
        stage = temporary_name(new)
        stage.mkdir()
        try:
            yield stage
            _publish(folder, stage, files)
        finally:
            remove(stage, root=folder, link=True)


def _publish(folder: Path, stage: Path, files: TaskFiles) -> None:
    """Move the files of `stage` into `folder`, replacing the earlier export's (`replacing`)."""
    pending = folder / f".{files.manifest}.publishing"
    new = {p.name for p in stage.iterdir()}
    old = _owned(folder, files, pending)
    write_text(pending, json.dumps(sorted(old | new)))
    remove(folder / files.manifest, root=folder, link=True)
    for name in sorted(new - {files.manifest}):
        rename_into(stage / name, folder)
    for name in sorted(old - new):
        remove(folder / name, root=folder, link=True)
    rename_into(stage / files.manifest, folder)
    remove(pending, root=folder, link=True)


def _owned(folder: Path, files: TaskFiles, pending: Path) -> set[str]:
    """The files of the earlier export of this kind in `folder`: those its manifest names and
    those an export killed while publishing listed; a file that cannot be read names none."""
    names: set = set()
    with contextlib.suppress(CuriError, ValueError, RecursionError):
        text = read_text(folder / files.manifest, "manifest", missing_ok=True)
        names |= files.named_by(json.loads(text or "null"))
    with contextlib.suppress(CuriError, ValueError, TypeError, RecursionError):
        names |= set(json.loads(read_text(pending, "publishing list", missing_ok=True) or "[]"))
    return {n for n in names if files.owns(n)}


def read_manifest(
    folder: str | Path,
    bank=None,
    *,
    name: str = MANIFEST,
    what: str = "task folder",
    command: str = "curi lm export out=DIR",
) -> dict:
    """The manifest `name` of a task folder (read once per change of the file), checked
    against this curi and, given `bank`, the bank (`check_manifest`); `what` and `command` name
    the folder and the command that writes one in the error.

    Raises:
        ConfigError: no manifest, or one written by another curi version; BankError: another
            bank.
    """
    path = Path(folder) / name
    try:
        manifest = _manifest(str(path.resolve()), path.stat().st_mtime_ns)
    except (OSError, ValueError, RecursionError, CuriError) as e:
        raise ConfigError(
            f"{folder} is not a curi {what} (no readable {name}: {e}); write one with `{command}`"
        ) from None
    check_manifest(manifest, folder, bank)
    return manifest


def check_manifest(manifest: dict, folder, bank=None) -> None:
    """Refuse a task folder written by another curi version (its prompts or metrics may
    differ), or, given `bank`, for another bank.

    Raises:
        ConfigError: another curi version or folder format.
        BankError: another bank.
    """
    from curi import __version__

    if manifest.get("format") != FORMAT or manifest.get("curi_version") != __version__:
        raise ConfigError(
            f"task folder {folder} was written by curi {manifest.get('curi_version')}, this is "
            f"curi {__version__}; export it again with `curi lm export`"
        )
    if bank is not None:
        want = manifest["bank"]
        have = bank.manifest.get("manifest_sha256", "")[:16]
        if want["digest"] != have:
            raise BankError(
                f"task folder {folder} was exported from bank {want['name']!r} "
                f"(digest {want['digest']}), not from the bank at {bank.path} (digest {have}); "
                "pass that bank (bank=, data_dir=) or export again"
            )


@lru_cache(maxsize=64)
def _episodes(folder: str, task: str) -> list[str]:
    rows = read_table(Path(folder) / f"{task}.episodes.jsonl.gz")
    return [r["support"] for r in rows]


def load_documents(folder: str | Path, task: str, **_) -> dict:
    """lm-eval's ``custom_dataset`` of a task: ``{"test": Dataset}`` of its documents
    (``task``, ``episode``, ``set``, ``position``, ``scene``, ``label``)."""
    import datasets

    read_manifest(folder)
    rows = read_table(Path(folder) / f"{task}.docs.jsonl.gz")
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def doc_to_text(folder: str | Path, doc: dict) -> str:
    """The prompt of a document: its episode's support text, then the query scene."""
    return _episodes(str(Path(folder).resolve()), doc["task"])[doc["episode"]] + (
        REQUEST + doc["scene"]
    )


def process_results(doc: dict, results) -> dict:
    """One document's items: ``(episode, label, score)``, the score the log-odds of the
    positive answer, ``ll(positive) - ll(negative)`` (decision: score > 0)."""
    (ll_neg, _), (ll_pos, _) = results[0], results[1]
    item = (int(doc["episode"]), int(doc["label"]), float(ll_pos) - float(ll_neg))
    if doc["set"] == "eval":
        return {"eval_ap": item}
    return {"cba": item, "ap": item}


def episode_metrics(items, metric: str, threshold: float = 0.0) -> np.ndarray:
    """Per-episode ``cba`` or ``ap`` of ``(episode, label, score)`` items, episodes in
    ascending order (`curi.oracles.metrics`; NaN where undefined)."""
    from curi.oracles.metrics import average_precision, class_balanced_accuracy

    by: dict[int, list] = defaultdict(list)
    for episode, label, score in items:
        by[int(episode)].append((label, score))
    out = []
    for episode in sorted(by):
        y, s = np.array(by[episode], np.float64).T
        if metric == "cba":
            out.append(class_balanced_accuracy(s, y.astype(np.int8), threshold=threshold))
        else:
            out.append(average_precision(s, y.astype(np.int8)))
    return np.array(out, np.float64)


def _mean(values: np.ndarray) -> float:
    ok = values[~np.isnan(values)]
    return float(ok.mean()) if ok.size else float("nan")


def aggregate_cba(items) -> float:
    """Class-balanced accuracy of each episode's query set (score > 0), averaged over
    episodes."""
    return _mean(episode_metrics(items, "cba"))


def aggregate_ap(items) -> float:
    """Average precision of each episode's query set, averaged over episodes. Not the paper's
    mAP (`curi gap`), which ranks the whole evaluation set in every episode."""
    return _mean(episode_metrics(items, "ap"))


def aggregate_eval_ap(items) -> float:
    """Average precision of each episode on the seeded sample of the evaluation set (episodes
    whose concept has no positive in the sample are left out), averaged over episodes."""
    return _mean(episode_metrics(items, "ap"))

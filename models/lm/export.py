"""Writing CURI episodes as an lm-evaluation-harness task folder: one task per (split,
negatives), ``curi_<split>_<negatives>``, a group over them, the data, the task's functions and
a manifest. One document per query scene; an episode's support text is stored once, in the
task's episode table, and joined with each query scene by ``doc_to_text``."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from curi.atomic import write_text
from curi.episodes import EpisodeSpec
from curi.errors import ConfigError
from curi.models.lm.prompt import (
    DELIMITER,
    REQUEST,
    WORDINGS,
    check_answers,
    prompt_head,
    record_text,
)
from curi.models.lm.prompt import scene_texts as _scene_texts
from curi.models.lm.task import FORMAT, MANIFEST, TaskFiles, replacing, write_table
from curi.models.lm.task_yaml import Function, dump, group_fields, task_fields
from curi.rng import derive_rng
from curi.splits.saved import save_split

__all__ = ["GROUP", "export_tasks", "task_name"]

log = logging.getLogger(__name__)

GROUP = "curi"
FILES = TaskFiles(
    MANIFEST, ("utils.py", f"{GROUP}.yaml"), (".yaml", ".episodes.jsonl.gz", ".docs.jsonl.gz")
)
"""The files of an export in its task folder, replaced as a whole by the next export there."""

_UTILS = '''"""Functions of this lm-evaluation-harness task folder, written by `curi lm export`:
each hands this folder to `curi.models.lm.task` (curi must be installed where lm_eval runs)."""

from pathlib import Path

from curi.models.lm import task as _task

FOLDER = Path(__file__).resolve().parent


def load_documents(task, **kwargs):
    return _task.load_documents(FOLDER, task)


def doc_to_text(doc):
    return _task.doc_to_text(FOLDER, doc)


process_results = _task.process_results
aggregate_cba = _task.aggregate_cba
aggregate_ap = _task.aggregate_ap
aggregate_eval_ap = _task.aggregate_eval_ap
'''


def task_name(split: str, negatives: str) -> str:
    """``curi_<split>_<negatives>``, the split's name made a plain identifier."""
    return f"curi_{re.sub(r'[^A-Za-z0-9_]+', '_', split)}_{negatives}"


def _task_yaml(name: str, answers: Sequence[str], eval_scenes: int) -> str:
    metrics = ["cba", "ap", "eval_ap"] if eval_scenes else ["cba", "ap"]
    asked = {
        "doc_to_text": Function("utils.doc_to_text"),
        "doc_to_choice": list(answers),
        "doc_to_target": "label",
        "target_delimiter": DELIMITER,
    }
    task = task_fields(name, GROUP, "utils", "multiple_choice", metrics, asked)
    return dump(task, f"written by `curi lm export`; the documents are {name}.docs.jsonl.gz")


def _group_yaml(names: Sequence[str]) -> str:
    group = group_fields(GROUP, names, ("cba", "ap"), weight_by_size=False)
    return dump(group, "written by `curi lm export`: every task of this folder")


def _eval_sample(bank, k: int, seed: int) -> np.ndarray:
    ids = np.asarray(bank.eval_ids, np.int64)
    if not 0 <= k <= len(ids):
        raise ConfigError(f"eval_scenes must be 0..{len(ids)} (the evaluation set), got {k}")
    rng = derive_rng(seed, "lm-eval-sample")
    return np.sort(rng.choice(ids, size=k, replace=False)) if k else ids[:0]


def _sampled(bank, spec: EpisodeSpec, wording) -> list[dict]:
    """The episodes of `spec` as plain dicts with their scenes' text."""
    from curi.episodes import EpisodeSampler

    sampler = EpisodeSampler.from_spec(bank, spec)
    eps = [sampler[i].to_dict(records=False) for i in range(len(sampler))]
    for key in ("support", "query"):
        ids = np.concatenate([e[f"{key}_ids"] for e in eps])
        text = iter(_scene_texts(bank, ids, wording))
        for e in eps:
            e[f"{key}_text"] = [next(text) for _ in e[f"{key}_ids"]]
    return eps


def _write_task(bank, name, eps, *, answers, eval_ids, eval_text, folder) -> dict:
    """Write a task's episode table, documents and YAML; returns its manifest entry."""
    from curi.posterior import hypothesis_bits

    episodes, docs, chars = [], [], []
    for i, e in enumerate(eps):
        head = prompt_head(e["support_text"], e["support_labels"], answers)
        episodes.append(
            {
                "episode": i,
                "concept": e["concept_text"],
                "support": head,
                "support_ids": e.get("support_ids"),
                "support_labels": [int(y) for y in e["support_labels"]],
                "query_ids": e.get("query_ids"),
            }
        )
        sets = [("query", e["query_text"], e["query_labels"])]
        if len(eval_ids):
            labels = hypothesis_bits(bank, np.array([e["concept"]]), eval_ids)[:, 0]
            sets.append(("eval", eval_text, labels))
        for kind, texts, labels in sets:
            for j, (scene, y) in enumerate(zip(texts, labels, strict=True)):
                docs.append(
                    {
                        "task": name,
                        "episode": i,
                        "set": kind,
                        "position": j,
                        "scene": scene,
                        "label": int(y),
                    }
                )
                chars.append(len(head) + len(REQUEST) + len(scene))
    size = write_table(folder / f"{name}.episodes.jsonl.gz", episodes)
    size += write_table(folder / f"{name}.docs.jsonl.gz", docs)
    write_text(folder / f"{name}.yaml", _task_yaml(name, answers, len(eval_ids)))
    c = np.asarray(chars)
    return {
        "episodes": len(eps),
        "documents": len(docs),
        "bytes": int(size),
        "prompt_chars": {
            "median": float(np.median(c)),
            "mean": round(float(c.mean()), 1),
            "max": int(c.max()),
        },
    }


def _from_file(bank, path, wording) -> tuple[list[dict], dict]:
    """The episodes of an exported episode file (`curi episodes ... out=FILE`), their text
    written from the file's scene records, and its card's front matter ({} without one).

    Raises:
        EpisodeFileError: a file `curi.export.read_episode_file` refuses, or a card
            `curi.export.read_card` refuses.
        BankError: episodes whose scene ids are not these scenes of `bank`.
    """
    from curi.errors import BankError
    from curi.export import read_card, read_episode_file

    path = Path(path).expanduser()
    meta = read_card(path) or {}
    eps = list(read_episode_file(path))
    keys = ("shape", "color", "material", "size", "x", "y")
    for e in eps:
        for key in ("support", "query"):
            records = e.pop(f"{key}_records")
            e[f"{key}_text"] = [record_text(r, wording) for r in records]
            ids = e.get(f"{key}_ids")
            if ids is not None and e is eps[0]:  # the ids must be the bank's scenes
                ours = bank.scene_records(ids)
                same = all(
                    [{k: o[k] for k in keys} for o in a["objects"]]
                    == [{k: o[k] for k in keys} for o in b["objects"]]
                    for a, b in zip(records, ours, strict=True)
                )
                if not same:
                    raise BankError(
                        f"the episodes of {path} are not scenes of the bank at {bank.path}; "
                        "pass the bank they were exported from (bank=, data_dir=)"
                    )
    return eps, meta


def _file_task(bank, episode_file, meta: dict, negatives: str) -> tuple:
    """The one (split, negatives) job of an episode file: its card's split and negatives (else
    the file's name and `negatives`), the split itself when this bank can make it again (the
    weak oracle's hypotheses), else its name."""
    from curi.errors import CuriError
    from curi.splits import make_split

    name = str(meta.get("split") or Path(episode_file).name.split(".")[0])
    try:
        split = make_split(bank, name)
    except CuriError:
        split = None
    return split or name, str(meta.get("negatives") or negatives)


def _manifest(bank, options: dict, answers, eval_ids: np.ndarray, tasks: dict) -> dict:
    """The manifest of an export: curi's version, the bank, the episodes' `options`, the
    prompt's answers and delimiter, the evaluation-set sample and the `tasks`' entries."""
    from curi import __version__

    return {
        "format": FORMAT,
        "curi_version": __version__,
        "bank": {
            "name": bank.config.get("name") if isinstance(bank.config, dict) else None,
            "path": str(Path(bank.path).resolve()),
            "digest": bank.manifest.get("manifest_sha256", "")[:16],
        },
        **options,
        "answers": list(answers),
        "delimiter": DELIMITER,
        "eval_ids": eval_ids.tolist(),
        "group": GROUP,
        "tasks": tasks,
    }


def export_tasks(
    bank,
    splits: Sequence,
    out: str | Path,
    *,
    negatives: Sequence[str] = ("hard",),
    n: int = 100,
    seed: int = 0,
    subset: str = "test",
    wording: str = "full",
    answers: Sequence[str] = ("0", "1"),
    eval_scenes: int = 0,
    progress: bool = True,
    episode_file: str | Path | None = None,
    negative_sampler: str = "paper",
) -> Path:
    """Write an lm-evaluation-harness task folder for episodes 0..n-1 of each split (a
    `curi.splits.Split`) and kind of negatives, or for the episodes of an exported file.

    Files: per task ``<task>.yaml``, ``<task>.episodes.jsonl.gz`` (one row per episode: the
    support text once, the scene ids for `curi lm compare`), ``<task>.docs.jsonl.gz`` (one row
    per query scene, and per scene of the evaluation-set sample with `eval_scenes`),
    ``curi_<split>_split.json`` (the split, for the weak oracle); ``curi.yaml`` (the group),
    ``utils.py`` and the manifest ``curi_tasks.json`` (curi version, bank digest, options).
    They replace the files of an earlier export to `out` as a whole (`FILES`: no stale task
    stays tagged ``curi_tasks``), under a lock; nothing else in `out` is touched
    (`curi.models.lm.task.replacing`).

    Args:
        negatives, n, seed, subset, negative_sampler: each split's n episodes, one task per
            kind of negatives (a sampler other than ``paper`` is recorded in the manifest).
        eval_scenes: also ask about this many scenes of a seeded sample of the bank's
            evaluation set in every episode (metric ``eval_ap``); 0: the query set only.
        episode_file: instead of `splits`, the episodes of a file of `curi episodes ...
            out=FILE` (of this bank), as one task named by its card's split and negatives
            (else the file's name and ``negatives[0]``); its text is written from the file's
            scene records.

    Returns:
        The manifest's path.

    Raises:
        ConfigError: a bad option (an `OptionError` for `wording`, naming the closest),
            `out` a file, another export to `out` running;
        SplitError: a subset without concepts; EpisodeFileError, BankError: an episode file
        that cannot be read or is of another bank.
    """
    from curi.validate import choice

    choice(wording, "wording", WORDINGS)
    answers = check_answers(answers)
    eval_ids = _eval_sample(bank, int(eval_scenes), seed)
    eval_text = _scene_texts(bank, eval_ids, wording) if len(eval_ids) else []
    stream = {"seed": seed, "size": n, "negative_sampler": negative_sampler}
    jobs = [EpisodeSpec(s, subset, neg, **stream) for s in splits for neg in negatives]
    eps = None
    if episode_file is not None:
        eps, meta = _from_file(bank, episode_file, wording)
        split, neg = _file_task(bank, episode_file, meta, negatives[0])
        subset, n, seed = meta.get("subset", subset), len(eps), meta.get("seed", seed)
        jobs = [EpisodeSpec(split, subset, neg, seed=seed, size=max(n, 1))]
    with replacing(out, FILES) as folder:  # the folder's earlier export replaced as a whole
        tasks = _write_tasks(
            bank,
            jobs,
            folder,
            episodes=eps,
            wording=wording,
            answers=answers,
            eval_ids=eval_ids,
            eval_text=eval_text,
            progress=progress,
        )
        write_text(folder / "utils.py", _UTILS)
        write_text(folder / f"{GROUP}.yaml", _group_yaml(list(tasks)))
        options = {"subset": subset, "seed": seed, "episodes": n, "wording": wording}
        options |= {} if negative_sampler == "paper" else {"negative_sampler": negative_sampler}
        manifest = _manifest(bank, options, answers, eval_ids, tasks)
        write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return Path(out).expanduser() / MANIFEST


def _write_tasks(
    bank,
    jobs: list[EpisodeSpec],
    folder: Path,
    *,
    episodes: list[dict] | None,
    wording: str,
    answers: Sequence[str],
    eval_ids: np.ndarray,
    eval_text: list[str],
    progress: bool,
) -> dict:
    """Write the task of each episode stream of `jobs` (one per split and negatives) into
    `folder`: its episodes (`episodes`, those of an episode file, else sampled) and split;
    returns the manifest's entries of the tasks."""
    from tqdm import tqdm

    tasks = {}
    for spec in tqdm(jobs, desc="lm tasks", unit="task", disable=not progress):
        split, neg, split_name = spec.split, spec.negatives, spec.split_name
        name = task_name(split_name, neg)
        if name in tasks:
            raise ConfigError(f"two tasks would be named {name}: give the splits distinct names")
        eps = episodes or _sampled(bank, spec, wording)
        info = {"split": split_name, "split_file": None, "negatives": neg}
        info.update(
            _write_task(
                bank,
                name,
                eps,
                answers=answers,
                eval_ids=eval_ids,
                eval_text=eval_text,
                folder=folder,
            )
        )
        if not isinstance(split, str):
            info["split_file"] = f"{task_name(split_name, 'split')}.json"
            save_split(split, bank, folder / info["split_file"])
        tasks[name] = info
    return tasks

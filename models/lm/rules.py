"""The rule-query tasks of `curi rules` as lm-evaluation-harness generation tasks (docs/lm.md,
"Rule tasks"; docs/rules.md): one task ``curi_rules_<split>`` per split, one document per
request, its prompt the text input `curi rules` writes (`curi.renderers.text.TextRenderer`)
and ``" =>"``, the model's generation read as ``"<reply> <qualifier>"`` and scored with the
cSCAN metrics of `curi score` (`curi.oracles.rule_scores`, Conceptual SCAN, section 4).
A task's context is stored once, beside its gold requests and answer patterns (``worlds``,
all that consistency needs); the folder's ``curi_rules_utils.py`` hands the folder to the
functions here."""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from curi.atomic import write_text
from curi.errors import ConfigError
from curi.models.lm.task import FORMAT, TaskFiles, read_manifest, read_table, replacing, write_table
from curi.models.lm.task_yaml import Function, dump, group_fields, task_fields
from curi.splits.saved import save_split

__all__ = [
    "DESCRIPTION",
    "END",
    "GROUP",
    "MANIFEST",
    "METRICS",
    "aggregate",
    "doc_to_text",
    "export_rule_tasks_lm",
    "load_documents",
    "read_prediction",
    "read_rules_manifest",
    "rules_task_name",
]

GROUP = "curi_rules"
MANIFEST = "curi_rules_tasks.json"
FILES = TaskFiles(
    MANIFEST,
    ("curi_rules_utils.py", f"{GROUP}.yaml"),
    (".yaml", ".contexts.jsonl.gz", ".docs.jsonl.gz"),
)
"""The files of a rule export in its task folder, replaced as a whole by the next one there
(those of a `curi lm export` beside them are kept)."""
#: What ends every prompt: the model's generation is the answer, as after an example's " =>".
END = " =>"
#: The task's lm-eval ``description`` (with ``instructions``): the answer format, which the
#: examples of a context (labels 0 / 1 only) do not show.
DESCRIPTION = (
    "Each task gives a context: examples (a scene, then => 1 if a hidden rule accepts it, "
    "else => 0) and possibly rules the hidden rule is known to imply; then a request: a scene "
    "(does the hidden rule accept it?) or a rule r (implies r: does every scene the hidden rule "
    "accepts satisfy r? equals r: is the hidden rule r? excludes r: does it accept no scene "
    "that r accepts?). Answer with a reply, 1 (yes), 0 (no) or ? (unknown), and a qualifier, "
    "M if the context proves the reply or D if the reply is only the likelier, e.g. => 1 D\n\n"
)
#: lm-eval metrics (fractions): `curi score`'s exact, reply and qualifier accuracy, its
#: consistency and the reply against the hidden concept's label (scene requests).
METRICS = ("exact", "reply", "qualifier", "consistency", "label")

_UTILS = '''"""Functions of this lm-evaluation-harness rule task folder, written by `curi lm rules`:
each hands this folder to `curi.models.lm.rules` (curi must be installed where lm_eval runs)."""

from pathlib import Path

from curi.models.lm import rules as _rules

FOLDER = Path(__file__).resolve().parent


def load_documents(task, **kwargs):
    return _rules.load_documents(FOLDER, task)


def doc_to_text(doc):
    return _rules.doc_to_text(FOLDER, doc)


process_results = _rules.process_results

'''
_AGG = """
def aggregate_{m}(items):
    return _rules.aggregate(FOLDER, items, "{m}")
"""


def rules_task_name(split: str) -> str:
    """``curi_rules_<split>``, the split's name made a plain identifier."""
    return f"curi_rules_{re.sub(r'[^A-Za-z0-9_]+', '_', split)}"


def _task_yaml(name: str, instructions: bool, max_gen_toks: int) -> str:
    asked = {
        **({"description": DESCRIPTION} if instructions else {}),
        "doc_to_text": Function("curi_rules_utils.doc_to_text"),
        "doc_to_target": "target",
        "target_delimiter": " ",
        "generation_kwargs": {
            "until": ["\n"],
            "max_gen_toks": max_gen_toks,
            "do_sample": False,
            "temperature": 0.0,
        },
    }
    task = task_fields(name, GROUP, "curi_rules_utils", "generate_until", METRICS, asked)
    return dump(task, f"written by `curi lm rules`; the documents are {name}.docs.jsonl.gz")


def _group_yaml(names: Sequence[str]) -> str:
    # accuracies pooled over the requests of every split; consistency is per task set only
    group = group_fields(GROUP, names, ("exact", "reply", "qualifier"), weight_by_size=True)
    return dump(group, "written by `curi lm rules`: every rule task of this folder")


def export_rule_tasks_lm(
    bank,
    splits: Sequence,
    out: str | Path,
    *,
    n: int = 100,
    subset: str = "test",
    instructions: bool = True,
    max_gen_toks: int = 8,
    progress: bool = True,
    **sampler_options,
) -> Path:
    """Write tasks 0..n-1 of ``RuleTaskSampler(bank, split, **sampler_options)`` for each
    split (a `curi.splits.Split`) as an lm-evaluation-harness generation task folder.

    Files: per task ``<task>.yaml``, ``<task>.contexts.jsonl.gz`` (one row per rule task: its
    context text once, its gold requests and ``worlds`` for the metrics),
    ``<task>.docs.jsonl.gz`` (one row per request: the request line, the target ``"1 M"``),
    ``<task>_split.json`` (the split: the weak hypotheses); ``curi_rules.yaml`` (the group),
    ``curi_rules_utils.py`` and the manifest ``curi_rules_tasks.json`` (curi version, bank
    digest, the sampler's settings). Beside a `curi lm export` folder's files, none clashes.
    They replace the files of an earlier rule export to `out` as a whole (`FILES`), under a
    lock; nothing else in `out` is touched (`curi.models.lm.task.replacing`).

    Args:
        instructions: state the answer format in the task's ``description`` (`DESCRIPTION`).
        max_gen_toks: lm-eval's generation limit (the answer is one line, cut at ``\\n``).
        subset: ``train``, ``val`` or ``test`` (the split's held-out concepts are in test).
        sampler_options: `curi.tasks.RuleTaskSampler`'s (``negatives``, ``seed``,
            ``hypotheses``, ``theta``, ``rule_rate``, ...).

    Returns:
        The manifest's path.

    Raises:
        ConfigError: a bad option, two splits of one name, `out` a file, another rule export
            to `out` running; SplitError: a subset without concepts.
    """
    with replacing(out, FILES) as folder:  # the folder's earlier export replaced as a whole
        tasks, settings = _write_rule_tasks(
            bank,
            splits,
            folder,
            n=n,
            subset=subset,
            instructions=instructions,
            max_gen_toks=max_gen_toks,
            progress=progress,
            sampler_options=sampler_options,
        )
        utils = _UTILS + "".join(_AGG.format(m=m) for m in METRICS)
        write_text(folder / "curi_rules_utils.py", utils)
        write_text(folder / f"{GROUP}.yaml", _group_yaml(list(tasks)))
        manifest = _rules_manifest(bank, settings, instructions, tasks)
        write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return Path(out).expanduser() / MANIFEST


def _write_rule_tasks(
    bank,
    splits: Sequence,
    folder: Path,
    *,
    n: int,
    subset: str,
    instructions: bool,
    max_gen_toks: int,
    progress: bool,
    sampler_options: dict,
) -> tuple[dict, dict]:
    """Write the rule task of each split into `folder`; returns the manifest's entries of the
    tasks and the sampler's settings (those of the last split, less its split and size)."""
    from curi.renderers.text import TextRenderer
    from curi.tasks import RuleTaskSampler

    text = TextRenderer(bank)
    tasks: dict[str, dict] = {}
    settings: dict = {}
    for split in splits:
        name = rules_task_name(split.name)
        if name in tasks:
            raise ConfigError(f"two tasks would be named {name}: give the splits distinct names")
        sampler = RuleTaskSampler(bank, split, subset, size=n, **sampler_options)
        settings = {k: v for k, v in sampler.settings().items() if k not in ("split", "size")}
        tasks[name] = _write_rule_task(
            bank,
            sampler,
            name,
            folder,
            text,
            n=n,
            instructions=instructions,
            max_gen_toks=max_gen_toks,
            progress=progress,
        )
    return tasks, settings


def _rules_manifest(bank, settings: dict, instructions: bool, tasks: dict) -> dict:
    """The manifest of a rule export: curi's version, the bank, the sampler's `settings`, the
    prompt's description and end, and the `tasks`' entries."""
    from curi import __version__

    return {
        "format": FORMAT,
        "kind": "rules",
        "curi_version": __version__,
        "bank": {
            "name": bank.config.get("name") if isinstance(bank.config, dict) else None,
            "path": str(Path(bank.path).resolve()),
            "digest": bank.manifest.get("manifest_sha256", "")[:16],
        },
        **settings,
        "description": DESCRIPTION if instructions else "",
        "end": END,
        "group": GROUP,
        "tasks": tasks,
    }


def _write_rule_task(
    bank,
    sampler,
    name: str,
    folder: Path,
    text,
    *,
    n: int,
    instructions: bool,
    max_gen_toks: int,
    progress: bool,
) -> dict:
    """Write the rule task `name` (tasks 0..n-1 of `sampler`, as `text` renders them) into
    `folder`: its contexts, documents, YAML and split; returns its manifest entry."""
    from tqdm import tqdm

    from curi.tasks import class_mix

    split = sampler.split
    contexts, docs, dicts, chars = [], [], [], []
    for i in tqdm(range(n), desc=name, unit="task", disable=not progress):
        t = sampler[i].to_dict()
        dicts.append(t)
        rows = text.rows(t)
        head = rows[0]["input"].rpartition("request: ")[0] if rows else ""
        gold = [
            {k: r.get(k) for k in ("kind", "reply", "qualifier", "label")} for r in t["requests"]
        ]
        contexts.append(
            {
                "index": t["index"],
                "concept": t["concept"],
                "context": head,
                "requests": gold,
                "worlds": t["worlds"],
            }
        )
        for row in rows:
            ask = row["input"][len(head) :]
            docs.append(
                {
                    "task": name,
                    "index": t["index"],
                    "position": i,
                    "request": row["request"],
                    "kind": row["kind"],
                    "ask": ask,
                    "target": row["target"],
                }
            )
            chars.append(len(row["input"]) + len(END))
    size = write_table(folder / f"{name}.contexts.jsonl.gz", contexts)
    size += write_table(folder / f"{name}.docs.jsonl.gz", docs)
    write_text(folder / f"{name}.yaml", _task_yaml(name, instructions, max_gen_toks))
    save_split(split, bank, folder / f"{name}_split.json")
    return {
        "split": split.name,
        "split_file": f"{name}_split.json",
        "tasks": n,
        "documents": len(docs),
        "bytes": int(size),
        "prompt_chars_max": max(chars, default=0) + (len(DESCRIPTION) if instructions else 0),
        "mix": class_mix(dicts),
    }


def read_rules_manifest(folder: str | Path, bank=None) -> dict:
    """The manifest of a rule task folder, checked against this curi and, given `bank`, the
    bank (`curi.models.lm.task.read_manifest`).

    Raises:
        ConfigError: no manifest, or one of another curi version; BankError: another bank.
    """
    what, command = "rule task folder", "curi lm rules out=DIR"
    return read_manifest(folder, bank, name=MANIFEST, what=what, command=command)


@lru_cache(maxsize=64)
def _contexts(folder: str, task: str, stamp: int) -> list[dict]:
    return read_table(Path(folder) / f"{task}.contexts.jsonl.gz")


def _task_contexts(folder: str | Path, task: str) -> list[dict]:
    path = Path(folder).resolve() / f"{task}.contexts.jsonl.gz"
    return _contexts(str(path.parent), task, path.stat().st_mtime_ns)


def load_documents(folder: str | Path, task: str, **_) -> dict:
    """lm-eval's ``custom_dataset`` of a task: ``{"test": Dataset}`` of its documents (``task``,
    ``index``, ``position``, ``request``, ``kind``, ``ask``, ``target``)."""
    import datasets

    read_rules_manifest(folder)
    rows = read_table(Path(folder) / f"{task}.docs.jsonl.gz")
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def doc_to_text(folder: str | Path, doc: dict) -> str:
    """The prompt of a document: its rule task's context, the request, then `END`."""
    return _task_contexts(folder, doc["task"])[doc["position"]]["context"] + doc["ask"] + END


def read_prediction(text: str) -> tuple[str, str]:
    """``(reply, qualifier)`` of a generation: its first line, stripped, read as `curi score`
    reads a prediction (``"1 M"``); anything else is ``("", "")``, wrong on every metric and
    no constraint in consistency (as a ``?`` reply)."""
    from curi.oracles.rule_scores import QUALIFIERS, REPLIES

    tokens = text.strip().split("\n", 1)[0].split()
    if len(tokens) == 2 and tokens[0] in REPLIES and tokens[1] in QUALIFIERS:
        return tokens[0], tokens[1]
    return "", ""


def process_results(doc: dict, results) -> dict:
    """One document's item for every metric: ``(task, position, request, reply, qualifier)``."""
    reply, qualifier = read_prediction(results[0])
    item = (doc["task"], int(doc["position"]), int(doc["request"]), reply, qualifier)
    return {m: item for m in METRICS}


def _project(worlds: Sequence[int], keep: Sequence[int]) -> list[int]:
    """A task's answer patterns restricted to the requests `keep` (bit k: request keep[k])."""
    out = {sum(((w >> j) & 1) << k for k, j in enumerate(keep)) for w in worlds}
    return sorted(out)


@lru_cache(maxsize=8)
def _scores(folder: str, items: tuple) -> dict:
    from curi.oracles.rule_scores import score_predictions

    by: dict[tuple, dict[int, tuple]] = defaultdict(dict)
    for task, position, request, reply, qualifier in items:
        by[task, position][request] = (reply, qualifier)
    tasks, preds = [], []
    for (task, position), got in sorted(by.items()):
        ctx = _task_contexts(folder, task)[position]
        keep = sorted(got)
        reqs = [ctx["requests"][j] for j in keep]
        worlds = (
            ctx["worlds"] if len(keep) == len(ctx["requests"]) else _project(ctx["worlds"], keep)
        )
        tasks.append({"index": ctx["index"], "requests": reqs, "worlds": worlds})
        preds += [got[j] for j in keep]
    return score_predictions(tasks, preds)["model"]


def aggregate(folder: str | Path, items, metric: str) -> float:
    """`curi score`'s number for the model over the documents of `items` (every request of a
    task set, or those lm-eval's ``limit`` kept: a task's answer patterns are then read on its
    kept requests), as a fraction: ``exact``, ``reply``, ``qualifier`` accuracy, ``consistency``
    (NaN when no set of replies implies or contradicts another) or ``label`` (scene requests'
    replies against the hidden concept's label; NaN without scene requests)."""
    s = _scores(str(Path(folder).resolve()), tuple(tuple(x) for x in items))
    if metric == "consistency":
        value = s["consistency"]
    elif metric == "label":
        value = s.get("label_accuracy", math.nan)
    else:
        value = s["accuracy"][metric]
    return float(value) / 100.0

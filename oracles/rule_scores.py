"""Scoring predictions on a rule-query task set (docs/rules.md, "Metrics"; Conceptual SCAN,
section 4): accuracy (reply and qualifier exact, reply only, qualifier only,
and the reply against the hidden label), consistency (`curi.oracles.consistency`), the
no-context baseline (the class prior of each request kind) and the oracle itself (the `curi
score` command of `curi.oracles.cli` prints them). Bad input ends in one `PredictionsError`
naming the file and line; nothing is skipped."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from curi.errors import PredictionsError
from curi.oracles.consistency import consistency, consistency_counts
from curi.paths import read_text
from curi.schema import check_shape

__all__ = [
    "PredictionsError",
    "markdown",
    "read_predictions",
    "read_tasks",
    "score_predictions",
]

REPLIES = ("1", "0", "?")
QUALIFIERS = ("M", "D")
# What scoring reads of a task (`curi.schema`; docs/rules.md, "The structured form").
_TASK = {
    "requests": [{"kind": str, "reply": str, "qualifier": str, "label?": (int, None)}],
    "worlds": [int],
}


def _lines(path: Path, what: str) -> list[str]:
    """The lines of a JSON-lines (or plain) file: split at ``\\n`` only, since a U+2028 or a
    form feed inside a JSON string is no line break (`str.splitlines` splits there too)."""
    text = read_text(path, what, PredictionsError)
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _task(line: str, where: str) -> dict:
    """One line of a task set as a task, checked."""
    try:
        t = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else e.msg
        raise PredictionsError(f"{where}: not valid JSON ({why})") from None
    check_shape(t, _TASK, where, fix="write task sets with `curi rules`", error=PredictionsError)
    for j, r in enumerate(t["requests"]):
        if r["reply"] not in REPLIES or r["qualifier"] not in QUALIFIERS:
            raise PredictionsError(
                f"{where}: requests[{j}] replies {r['reply']!r:.20} {r['qualifier']!r:.20}; "
                f"expected a reply of {REPLIES} and a qualifier of {QUALIFIERS}"
            )
    return t


def read_tasks(path: str | Path) -> list[dict]:
    """The tasks of a structured task set (``tasks.jsonl`` of `curi rules`), checked.

    Raises:
        PredictionsError: a missing or empty file, a line that is not a task, or tasks
            without a single request between them.
    """
    path = Path(path)
    lines = _lines(path, "tasks file")
    tasks = [
        _task(line, f"{path} line {n} is not a rule-query task")
        for n, line in enumerate(lines, start=1)
    ]
    if not tasks:
        raise PredictionsError(f"the tasks file {path} holds no task")
    if not any(t["requests"] for t in tasks):
        raise PredictionsError(f"the tasks file {path} holds no request: nothing to score")
    return tasks


def _parse(value, where: str) -> tuple[str, str]:
    """(reply, qualifier) from ``"1 M"`` or a mapping with ``reply`` and ``qualifier``, each
    maybe wrapped in mappings of ``prediction`` or ``output`` (unwrapped in a loop, however
    deep)."""
    while isinstance(value, dict) and ("prediction" in value or "output" in value):
        value = value["prediction" if "prediction" in value else "output"]
    if isinstance(value, dict):
        if "reply" in value and "qualifier" in value:
            return _parse(f"{value['reply']} {value['qualifier']}", where)
        raise PredictionsError(
            f"{where}: expected a 'prediction' (\"1 M\") or 'reply' and "
            f"'qualifier' fields, got keys {sorted(value)[:8]}"
        )
    if not isinstance(value, str):
        raise PredictionsError(f'{where}: expected text such as "1 M", got {value!r:.60}')
    tokens = value.split()
    if len(tokens) != 2:
        raise PredictionsError(
            f"{where}: expected '<reply> <qualifier>' such as '1 M', got {value!r:.60}"
        )
    reply, qualifier = tokens
    if reply not in REPLIES:
        raise PredictionsError(f"{where}: unknown reply {reply!r}; expected one of {REPLIES}")
    if qualifier not in QUALIFIERS:
        raise PredictionsError(
            f"{where}: unknown qualifier {qualifier!r}; expected one of {QUALIFIERS}"
        )
    return reply, qualifier


def read_predictions(path: str | Path, tasks: Sequence[dict]) -> list[tuple[str, str]]:
    """A model's predictions, one per request of `tasks` in order (the rows of the text
    export): a ``.jsonl`` file of objects with ``prediction`` (``"1 M"``), ``output`` or
    ``reply`` + ``qualifier`` (and optionally ``task`` and ``request``, checked against the
    row they stand for), or any other file with one ``"<reply> <qualifier>"`` per line.

    Raises:
        PredictionsError: an unreadable file, a line that is missing, extra or malformed, an
            unknown reply or qualifier token, or a ``task`` / ``request`` that does not match.
    """
    path = Path(path)
    expected = [
        (t.get("index", k), j) for k, t in enumerate(tasks) for j in range(len(t["requests"]))
    ]
    lines = _lines(path, "predictions file")
    if len(lines) < len(expected):
        raise PredictionsError(
            f"{path} line {len(lines) + 1} is missing: the file has {len(lines)} predictions, "
            f"the tasks have {len(expected)} requests (one prediction per line, in order)"
        )
    if len(lines) > len(expected):
        raise PredictionsError(
            f"{path} line {len(expected) + 1} is extra: the file has {len(lines)} predictions, "
            f"the tasks have {len(expected)} requests"
        )
    jsonl = path.name.endswith(".jsonl")
    out = []
    for n, (line, (task, req)) in enumerate(zip(lines, expected, strict=True), start=1):
        where = f"{path} line {n}"
        value: object = line
        if jsonl:
            try:
                value = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as e:
                why = "nested too deeply" if isinstance(e, RecursionError) else e.msg
                raise PredictionsError(f"{where} is not valid JSON ({why})") from None
            if isinstance(value, dict) and (value.get("task", task), value.get("request", req)) != (
                task,
                req,
            ):
                raise PredictionsError(
                    f"{where} is for task {value.get('task')} request {value.get('request')}, "
                    f"expected task {task} request {req} (keep the order of the text rows)"
                )
        out.append(_parse(value, where))
    return out


def _accuracy(gold, pred) -> dict:
    n = len(gold)
    exact = sum(g == p for g, p in zip(gold, pred, strict=True))
    reply = sum(g[0] == p[0] for g, p in zip(gold, pred, strict=True))
    qual = sum(g[1] == p[1] for g, p in zip(gold, pred, strict=True))
    return {
        "exact": 100.0 * exact / n,
        "reply": 100.0 * reply / n,
        "qualifier": 100.0 * qual / n,
        "count": n,
    }


def _consistency(tasks, pred) -> dict:
    impl = cont = defined = at = 0
    for t in tasks:
        p = pred[at : at + len(t["requests"])]
        at += len(t["requests"])
        i, c = consistency_counts(t["worlds"], [r for r, _ in p], [q for _, q in p])
        impl, cont, defined = impl + i, cont + c, defined + bool(i + c)
    return {
        "consistency": consistency(impl, cont),
        "implications": impl,
        "contradictions": cont,
        "tasks_defined": defined,
    }


def _summary(tasks, gold, pred, kinds, labels) -> dict:
    out = {"accuracy": _accuracy(gold, pred), **_consistency(tasks, pred)}
    out["by_kind"] = {}
    for k in dict.fromkeys(kinds):
        idx = [j for j, x in enumerate(kinds) if x == k]
        out["by_kind"][k] = _accuracy([gold[j] for j in idx], [pred[j] for j in idx])
    scored = [j for j, y in enumerate(labels) if y is not None]
    if scored:  # the reply against the hidden concept's own answer
        hits = sum(pred[j][0] == str(labels[j]) for j in scored)
        out["label_accuracy"] = 100.0 * hits / len(scored)
    return out


def score_predictions(tasks: Sequence[dict], predictions: Sequence[tuple[str, str]]) -> dict:
    """Score predictions, one ``(reply, qualifier)`` per request of `tasks` in order.

    Returns:
        ``{"model": summary, "baseline": summary, "oracle": summary, "requests", "tasks"}``;
        a summary holds ``accuracy`` (``exact``, ``reply``, ``qualifier`` in percent),
        ``consistency`` (percent, NaN when undefined), ``implications``, ``contradictions``,
        ``tasks_defined``, ``by_kind`` accuracies and ``label_accuracy``. The baseline replies
        to every request with the commonest gold class of its kind (the class prior, no
        context); the oracle replies with the gold, so its accuracy is 100 and its
        consistency 100 (or NaN) by construction.

    Raises:
        PredictionsError: not one prediction per request, or no request at all.
    """
    reqs = [r for t in tasks for r in t["requests"]]
    if not reqs:
        raise PredictionsError("the tasks hold no request: nothing to score")
    if len(predictions) != len(reqs):
        raise PredictionsError(
            f"{len(predictions)} predictions for {len(reqs)} requests; give one per request"
        )
    gold = [(r["reply"], r["qualifier"]) for r in reqs]
    kinds = [r["kind"] for r in reqs]
    labels = [r.get("label") for r in reqs]
    prior = {
        k: Counter(g for g, x in zip(gold, kinds, strict=True) if x == k).most_common(1)[0][0]
        for k in set(kinds)
    }
    baseline = [prior[k] for k in kinds]
    return {
        "tasks": len(tasks),
        "requests": len(reqs),
        "model": _summary(tasks, gold, list(predictions), kinds, labels),
        "baseline": {
            **_summary(tasks, gold, baseline, kinds, labels),
            "classes": {k: " ".join(v) for k, v in sorted(prior.items())},
        },
        "oracle": _summary(tasks, gold, gold, kinds, labels),
    }


def _fmt(x: float) -> str:
    return "nan" if isinstance(x, float) and math.isnan(x) else f"{x:.1f}"


def markdown(scores: dict) -> str:
    """The three summaries as a small markdown table."""
    lines = [
        "| who | exact | reply | qualifier | consistency | impl / cont |",
        "|---|---|---|---|---|---|",
    ]
    for who in ("model", "baseline", "oracle"):
        s = scores[who]
        a = s["accuracy"]
        lines.append(
            f"| {who} | {_fmt(a['exact'])} | {_fmt(a['reply'])} | "
            f"{_fmt(a['qualifier'])} | {_fmt(s['consistency'])} | "
            f"{s['implications']} / {s['contradictions']} |"
        )
    return "\n".join(lines)

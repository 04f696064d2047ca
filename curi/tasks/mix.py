"""The class mix of a set of rule-query tasks (docs/rules.md, "Drawing requests and balance"):
the shares of rule versus ordinary requests, of the replies 1 / 0 / ? and of the qualifiers
M / D, which a model can exploit (Conceptual SCAN, sections 3.3 and 6.2)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from curi.tasks.replies import CLASSES, KINDS, QUALIFIERS, REPLIES

__all__ = ["ClassMix", "class_mix", "format_mix"]

_ORDER = {
    "request": ("rule", "scene"),
    "kind": KINDS,
    "reply": REPLIES,
    "qualifier": QUALIFIERS,
    "class": CLASSES,
}


class ClassMix:
    """Counts of the requests of tasks added one at a time (``to_dict()`` forms)."""

    def __init__(self) -> None:
        self.tasks = 0
        self.context_rules = 0
        self.counts: dict[str, Counter] = {name: Counter() for name in _ORDER}

    def add(self, task: dict) -> None:
        self.tasks += 1
        self.context_rules += len(task["context_rules"])
        c = self.counts
        for r in task["requests"]:
            c["kind"][r["kind"]] += 1
            c["request"]["scene" if r["kind"] == "scene" else "rule"] += 1
            c["reply"][r["reply"]] += 1
            c["qualifier"][r["qualifier"]] += 1
            c["class"][f"{r['reply']} {r['qualifier']}"] += 1

    def result(self) -> dict:
        """``{"tasks", "requests", "context_rules_per_task", "request", "kind", "reply",
        "qualifier", "class"}``; each breakdown maps a value to ``{"count", "share"}``."""
        total = sum(self.counts["reply"].values())

        def shares(c: Counter, order) -> dict:
            return {
                k: {"count": c[k], "share": round(c[k] / total, 4) if total else 0.0} for k in order
            }

        per_task = round(self.context_rules / self.tasks, 4) if self.tasks else 0.0
        return {
            "tasks": self.tasks,
            "requests": total,
            "context_rules_per_task": per_task,
            **{name: shares(self.counts[name], order) for name, order in _ORDER.items()},
        }


def class_mix(tasks: Iterable[dict]) -> dict:
    """The class mix of `tasks` (their ``to_dict()`` forms); see `ClassMix.result`."""
    mix = ClassMix()
    for t in tasks:
        mix.add(t)
    return mix.result()


def format_mix(mix: dict) -> str:
    """The class mix as a few readable lines (percentages)."""
    lines = [
        f"{mix['tasks']} tasks, {mix['requests']} requests, "
        f"{mix['context_rules_per_task']:g} context rules per task"
    ]
    for name in _ORDER:
        parts = [f"{k} {v['share'] * 100:.1f}%" for k, v in mix[name].items()]
        lines.append(f"{name + ':':<11}" + "  ".join(parts))
    return "\n".join(lines)

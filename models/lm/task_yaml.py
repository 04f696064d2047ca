"""The YAML of an lm-evaluation-harness task folder, written from data: `task_fields` and
`group_fields` hold what every curi task and group shares, and `dump` lays them out in the one
style lm-eval reads, with ``!function`` references (`Function`), so the same fields always give
the same bytes."""

from __future__ import annotations

import json
import numbers
import re
from dataclasses import dataclass

__all__ = ["Flow", "Function", "dump", "group_fields", "task_fields"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


@dataclass(frozen=True)
class Function:
    """``!function <name>``: a function of the task folder's module, which lm-eval imports."""

    name: str


@dataclass(frozen=True)
class Flow:
    """A flow sequence of plain names, ``[a, b]`` (a list is written as JSON: ``["a", "b"]``)."""

    names: tuple[str, ...]


def _plain(text: str) -> bool:
    """Whether YAML reads `text` unquoted back as this string (not ``no``, ``null``, ``1``)."""
    import yaml

    return bool(_NAME.fullmatch(text)) and yaml.safe_load(text) == text


def _scalar(value) -> str:
    if isinstance(value, Function):
        return f"!function {value.name}"
    if isinstance(value, Flow):
        assert all(_plain(n) for n in value.names), value
        return f"[{', '.join(value.names)}]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, str):
        return value if _plain(value) else json.dumps(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return json.dumps(value)  # JSON is YAML: every item stays a string ("0", "no")
    raise TypeError(f"no YAML form for {value!r}")


def _lines(data: dict, indent: str) -> list[str]:
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines += [f"{indent}{key}:", *_lines(value, indent + "  ")]
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines.append(f"{indent}{key}:")
            for item in value:  # a block sequence of mappings, each item's keys aligned
                first, *rest = _lines(item, indent + "    ")
                lines += [f"{indent}  - {first.lstrip()}", *rest]
        else:
            lines.append(f"{indent}{key}: {_scalar(value)}")
    return lines


def dump(data: dict, comment: str) -> str:
    """`data` as YAML after the comment line ``# <comment>``: block mappings indented by two,
    lists of mappings as block sequences, other lists as JSON flow sequences, strings plain
    when YAML reads them back as themselves, else JSON-quoted."""
    return "\n".join([f"# {comment}", *_lines(data, "")]) + "\n"


def task_fields(
    name: str, group: str, module: str, output_type: str, metrics, fields: dict
) -> dict:
    """A task's fields: its documents, results and ``aggregate_<metric>`` functions from the
    folder's `module`, tagged ``<group>_tasks``, with `fields` (how a document is asked and
    answered) between the test split and ``process_results``."""
    return {
        "task": name,
        "tag": Flow((f"{group}_tasks",)),
        "custom_dataset": Function(f"{module}.load_documents"),
        "dataset_kwargs": {"task": name},
        "output_type": output_type,
        "test_split": "test",
        **fields,
        "process_results": Function(f"{module}.process_results"),
        "metric_list": [
            {
                "metric": m,
                "aggregation": Function(f"{module}.aggregate_{m}"),
                "higher_is_better": True,
            }
            for m in metrics
        ],
        "metadata": {"version": 1.0},
    }


def group_fields(group: str, names, metrics, *, weight_by_size: bool) -> dict:
    """A group's fields: its tasks `names` and the mean of each of `metrics` over them."""
    return {
        "group": group,
        "task": list(names),
        "aggregate_metric_list": [
            {"metric": m, "aggregation": "mean", "weight_by_size": weight_by_size} for m in metrics
        ],
        "metadata": {"version": 1.0},
    }

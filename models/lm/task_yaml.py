"""The YAML of an lm-evaluation-harness task folder, written from data: `dump` lays out a task's
or a group's fields (a dict) in the one style lm-eval reads, with ``!function`` references
(`Function`), so the same fields always give the same bytes."""

from __future__ import annotations

import json
import numbers
import re
from dataclasses import dataclass

__all__ = ["Flow", "Function", "dump"]

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

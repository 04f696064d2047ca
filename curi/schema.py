"""The shape of the small JSON files a command reads back from its own folders (a sweep's
``sweep.json`` and ``result.json``, a curve's points): one check where each file is read, so a
file that was edited or damaged ends in one line naming the file, the field and what it must
be, not in a ``KeyError`` or ``TypeError`` deep in the collect step (docs/reliability.md,
"Third round").

A spec is a Python value: ``str``, ``int``, ``bool``, ``float`` (any number), ``None`` (null),
``dict`` / ``list`` (any object / list), a tuple (any of its specs), ``[spec]`` (a list of
`spec`), ``{"key": spec, "key?": spec}`` (an object with these keys, ``?`` marking an optional
one; other keys are allowed) and ``{str: spec}`` / ``{int: spec}`` (an object whose every value
fits `spec`, its keys any names / integers written as strings)."""

from __future__ import annotations

from typing import Any

from curi.errors import ConfigError, CuriError

__all__ = ["check_shape"]

_NAMES = {
    str: "a string",
    int: "an integer",
    bool: "true or false",
    float: "a number",
    None: "null",
    dict: "an object",
    list: "a list",
}


def _want(spec: Any) -> str:
    if isinstance(spec, tuple):
        return " or ".join(_want(s) for s in spec)
    if isinstance(spec, dict):
        return "an object"
    if isinstance(spec, list):
        return "a list"
    return _NAMES[spec]


def _fits(value: Any, spec: Any) -> bool:
    """Whether `value` has the type `spec` asks for at this level (not its contents)."""
    if isinstance(spec, tuple):
        return any(_fits(value, s) for s in spec)
    if spec is None:
        return value is None
    if isinstance(spec, dict) or spec is dict:
        return isinstance(value, dict)
    if isinstance(spec, list) or spec is list:
        return isinstance(value, list)
    if isinstance(value, bool):
        return spec is bool
    return isinstance(value, (int, float) if spec is float else spec)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _problem(value: Any, spec: Any, where: str) -> str | None:
    """What is wrong with `value` at `where` (None: it fits `spec`)."""
    if isinstance(spec, tuple):
        spec = next((s for s in spec if _fits(value, s)), spec)
    if not _fits(value, spec):
        return f"{where or 'the file'} must be {_want(spec)}, got {_show(value)}"
    if isinstance(spec, list) and spec:
        for i, item in enumerate(value):
            if found := _problem(item, spec[0], f"{where}[{i}]"):
                return found
    elif isinstance(spec, dict) and (str in spec or int in spec):
        return _values_problem(value, spec, where)
    elif isinstance(spec, dict):
        for key, sub in spec.items():
            name = key.removesuffix("?")
            if name not in value:
                if key.endswith("?"):
                    continue
                return f"{_at(where, name)} is missing"
            if found := _problem(value[name], sub, _at(where, name)):
                return found
    return None


def _values_problem(value: dict, spec: dict, where: str) -> str | None:
    """What is wrong with an object of free keys (``{str: spec}`` or ``{int: spec}``)."""
    ((keys, sub),) = spec.items()
    for key, item in value.items():
        if keys is int and not (key.isascii() and key.lstrip("-").isdigit()):
            return f"{where or 'the file'} must have integer keys, got {_show(key)}"
        if found := _problem(item, sub, _at(where, key)):
            return found
    return None


def check_shape(
    value: Any, spec: Any, what: str, *, fix: str = "", error: type[CuriError] = ConfigError
) -> Any:
    """`value` (a file's parsed JSON) once it has the shape `spec` describes.

    Args:
        value: the parsed JSON.
        spec: its shape (see the module's docstring).
        what: the file, as the message names it (``result file '/o/runs/.../result.json'``).
        fix: how to mend it, appended to the message (``remove it to run that run again``).
        error: the error raised.

    Returns:
        `value`, unchanged.

    Raises:
        error: one line naming `what`, the first field that does not fit and what it must be.
    """
    found = _problem(value, spec, "")
    if found:
        raise error(f"{what}: {found}" + (f"; {fix}" if fix else ""))
    return value

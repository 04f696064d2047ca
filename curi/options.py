"""A command's options, read from its primary config file (``conf/<command>.yaml``) with the
comment beside each key: the schema that every composed config is checked against (an unknown
key, a value of the wrong type, a value outside an option's choices, an empty list or an unknown
preset of a config group ends in one message naming the key and the valid ones), and the text
of ``curi <command> --help``. Generic: a new command's YAML file is its schema; the choices of
an enumerated option come from the library's own table (`choices`)."""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from curi.errors import ConfigError, OptionError, did_you_mean
from curi.presets import conf_dir, list_presets
from curi.validate import is_split_file, not_one_of

__all__ = [
    "Options",
    "load_options",
    "check_config",
    "check_override_keys",
    "check_group_values",
    "choices",
    "describe",
    "is_split_file",
    "help_text",
    "summary",
]

_KEY = re.compile(r"^(\s*)([A-Za-z_][\w@.-]*)\s*:(\s|$)(.*)$")
_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!\bal)\.\s+")  # not after e.g., i.e., et al.


@dataclass
class Options:
    """One command's schema.

    Attributes:
        name: the config name (``gap``, ``episodes_render``).
        defaults: the primary config's own keys and default values (no ``defaults``/``hydra``).
        comments: dotted key -> the comment that explains it.
        groups: package (where the group's config lands) -> (group, default option or None).
        help: the file's ``hydra.help`` (``header``, ``footer``).
    """

    name: str
    defaults: dict
    comments: dict[str, str] = field(default_factory=dict)
    groups: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    help: dict = field(default_factory=dict)


def _comment(text: str) -> str | None:
    """The comment of a YAML line's remainder (a `#` outside quotes), or None."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[i + 1 :].strip()
    return None


def read_comments(text: str) -> dict[str, str]:
    """Dotted key -> comment, from the comment on a key's line (or on the continuation lines of
    its value) and the comment lines right above it."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    above: list[str] = []
    last = None  # the last key seen; comments before the first key describe the file
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            above = []
            continue
        if stripped.startswith("#"):
            if last is not None:
                above.append(stripped.lstrip("#").strip())
            continue
        m = _KEY.match(line)
        if m is None or stripped.startswith("-"):  # a value's continuation or a list item
            note = _comment(line)
            if note and last and last not in out:
                out[last] = note
            above = []
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(4)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        last = ".".join(k for _, k in stack)
        note = " ".join([*above, _comment(rest) or ""]).strip()
        if note:
            out[last] = note
        above = []
    return out


def _load(path: Path) -> tuple[dict, str]:
    text = path.read_text()
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path.name} is not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path.name} is not a mapping")
    return doc, text


def load_options(config_name: str) -> Options:
    """The schema of the primary config `config_name` of the installed configuration."""
    doc, text = _load(conf_dir() / f"{config_name}.yaml")
    about = dict((doc.get("hydra") or {}).get("help") or {})
    opts = Options(config_name, {}, read_comments(text), {}, about)
    for entry in doc.get("defaults", []) or []:
        if isinstance(entry, str):
            if entry != "_self_":  # another primary-level file: its keys are ours too
                sub = load_options(entry)
                opts.defaults.update(sub.defaults)
                opts.comments = {**sub.comments, **opts.comments}
                opts.groups.update(sub.groups)
            continue
        for key, choice in entry.items():
            words = key.split()
            if words[0] == "override" or words[-1].startswith("hydra/"):
                continue
            group, _, package = words[-1].partition("@")
            opts.groups[package or group.replace("/", ".")] = (group, choice)
    opts.defaults.update({k: v for k, v in doc.items() if k not in ("defaults", "hydra")})
    return opts


def summary(config_name: str) -> str:
    """A command's one-line help for ``curi --help``: the first sentence of its config's
    ``hydra.help.header`` (without the ``curi <command>:`` it starts with). Read from the YAML
    file alone, so listing the commands imports none of the layers; "" when the config is
    missing or has no header.

    Raises:
        ConfigError: a config file that is not valid YAML.
    """
    path = conf_dir() / f"{config_name}.yaml"
    if not path.is_file():
        return ""
    doc, _ = _load(path)
    header = " ".join(str(((doc.get("hydra") or {}).get("help") or {}).get("header", "")).split())
    command = "curi " + config_name.replace("_", " ") + ":"
    header = header.removeprefix(command).strip()
    first = _SENTENCE_END.split(header, maxsplit=1)[0]
    return first if first.endswith(".") else first + "."


# --- checking ------------------------------------------------------------------------------
def _unknown(key: str, valid) -> ConfigError:
    valid = sorted(valid)
    hint = did_you_mean(key.rsplit(".", 1)[-1], [v.rsplit(".", 1)[-1] for v in valid])
    return ConfigError(f"unknown option {key!r}{hint}; valid: {', '.join(valid)}")


def _valid_keys(opts: Options, prefix: str, node: dict) -> list[str]:
    keys = [f"{prefix}{k}" for k in node]
    return keys + [g for g in opts.groups if not prefix and g not in node]


def _type_error(key: str, want: str, default, value) -> ConfigError:
    return ConfigError(f"{key} must be {want} (default {default!r}), got {value!r}")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _attr(module: str, name: str):
    return getattr(importlib.import_module(module), name)


# Dotted option -> where its values are declared (the library's own tables), each imported only
# when an option of that name is checked.
_CHOICES: dict[str, Callable[[], tuple]] = {
    "prior": lambda: _attr("curi.prior", "PRIORS"),
    "likelihood": lambda: _attr("curi.posterior", "LIKELIHOODS"),
    "negatives": lambda: _attr("curi.posterior", "NEGATIVES"),
    "query_negatives": lambda: _attr("curi.episodes", "QUERY_NEGATIVES"),
    "negative_sampler": lambda: _attr("curi.episodes", "NEGATIVE_SAMPLERS"),
    "subset": lambda: _attr("curi.splits.base", "SUBSETS"),
    "hypotheses": lambda: _attr("curi.tasks.sampler", "HYPOTHESES"),
    "kinds": lambda: _attr("curi.tasks.replies", "RULE_KINDS"),
    "mcd.compounds": lambda: _attr("curi.compounds", "COMPOUND_KINDS"),
    "media": lambda: tuple(_attr("curi.export", "list_media")()),
    "predictors": lambda: _attr("curi.predictors", "PREDICTOR_NAMES"),
    "threshold": lambda: (*_attr("curi.predictors", "THRESHOLDS"), float),
}


@cache
def _choices_of(key: str) -> tuple | None:
    source = _CHOICES.get(key)
    return None if source is None else tuple(source())


def choices() -> dict[str, tuple]:
    """Dotted option -> the values it takes (each item's, for a list; null too where that is
    the default; the type ``float`` stands for any number), for every command with that
    option: the library's own tables, so that a misspelt value is refused before a bank opens
    rather than in a worker or after the work."""
    return {key: _choices_of(key) for key in _CHOICES}


def _check_choice(key: str, default, value) -> None:
    valid = _choices_of(key)
    if valid is None or (value is None and default is None):
        return
    names = [v for v in valid if not isinstance(v, type)]
    number = float in valid
    for item in value if isinstance(value, list) else [value]:
        if not (item in names and not isinstance(item, bool) or number and _is_number(item)):
            more = " or a number" if number else " or null" if default is None else ""
            raise OptionError(not_one_of(key, item, names, more))


def _check_value(key: str, default, value):
    """`value` (possibly made a one-item list) once its type fits `default`'s."""
    if default is None or value is None or (isinstance(default, str) and "${" in default):
        return value
    if isinstance(default, str) and default == "???":
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise _type_error(key, "true or false", default, value)
    elif isinstance(default, int):
        integral = _is_number(value) and (
            isinstance(value, int) or (math.isfinite(value) and value == int(value))
        )
        if not integral:
            raise _type_error(key, "an integer", default, value)
    elif isinstance(default, float):
        if not _is_number(value):
            raise _type_error(key, "a number", default, value)
    elif isinstance(default, str):
        if isinstance(value, (list, dict)):
            raise _type_error(key, "a single value", default, value)
    elif isinstance(default, list):
        if isinstance(value, dict):
            raise _type_error(key, "a list", default, value)
        if not isinstance(value, list):
            return [value]  # `splits=boolean` stands for `splits=[boolean]`
        if default and not value:
            raise ConfigError(f"{key} must not be empty (default {_value(default)})")
    elif isinstance(default, dict) and not isinstance(value, dict):
        raise _type_error(key, "a mapping", default, value)
    return value


def _check_node(opts: Options, prefix: str, schema: dict, node: dict, top: bool) -> dict:
    out = dict(node)
    for key, value in node.items():
        full = f"{prefix}{key}"
        if top and key in opts.groups and key not in schema:
            continue  # a config group's content: checked by the library that reads it
        if key not in schema:
            raise _unknown(full, _valid_keys(opts, prefix, schema))
        default = schema[key]
        out[key] = _check_value(full, default, value)
        _check_choice(full, default, out[key])
        if isinstance(default, dict) and default and isinstance(value, dict):
            out[key] = _check_node(opts, f"{full}.", default, value, False)
    return out


def check_config(cfg: dict, opts: Options) -> dict:
    """`cfg` (a composed config as plain containers) once every key is one of the command's
    options (a config group's own keys are left to the library that reads them, which checks
    them against its dataclass), every value has the type of its default and is one of its
    `choices`, and a list whose default is not empty is not empty; a single value given for a
    list becomes a one-item list.

    Raises:
        ConfigError: naming the key and the valid ones, or the key, the type and the value.
    """
    return _check_node(opts, "", opts.defaults, cfg, True)


def check_override_keys(overrides: list[str], opts: Options) -> None:
    """Refuse an override of an unknown key before composition (Hydra would otherwise suggest
    ``+key=value``, which adds the misspelt key and is silently ignored), and the deletion of
    one (``~bank``) that no ``+key=`` puts back.

    Raises:
        ConfigError: naming the key and the valid ones.
    """
    groups = set(list_groups())
    for text in overrides:
        if text.startswith("-") or "=" not in text and not text.startswith("~"):
            continue
        key = text.lstrip("+~").split("=", 1)[0]
        if not key or key.startswith("hydra") or "/" in key or "@" in key:
            continue
        head, *rest = key.split(".")
        if head in opts.groups:
            if rest and not text.startswith(("+", "~")):
                _check_group_key(head, rest, opts.groups[head][0], _chosen(head, overrides, opts))
        elif head in groups and head not in opts.defaults:
            raise ConfigError(
                f"unknown option {head!r}: this command has no {head} group; valid: "
                + ", ".join(sorted({*opts.defaults, *opts.groups}))  # a group with a default: once
            )
        else:
            _check_plain_key([head, *rest], opts)
        if text.startswith("~") and not any(o.startswith(f"+{key}=") for o in overrides):
            raise ConfigError(  # the command would read the deleted key: a traceback
                f"{text} deletes an option this command reads; set it with {key}=VALUE instead"
            )


def _check_plain_key(parts: list[str], opts: Options) -> None:
    """Refuse a dotted key that is not in the command's own config (a free-form mapping's
    keys, and what lies below a value, are not checked)."""
    node, prefix = opts.defaults, ""
    for part in parts:
        if not isinstance(node, dict) or (not node and prefix):
            return  # below a free-form mapping or a value
        if part not in node:
            raise _unknown(prefix + part, _valid_keys(opts, prefix, node))
        node, prefix = node[part], f"{prefix}{part}."


def _chosen(package: str, overrides: list[str], opts: Options) -> str | None:
    """The preset of config group `package` that the command line chooses (its default when
    none is given)."""
    value = opts.groups[package][1]
    for text in overrides:
        key, eq, given = text.lstrip("+").partition("=")
        if eq and key == package:
            value = given
    return value


def _check_group_key(package: str, parts: list[str], group: str, preset: str | None) -> None:
    """Refuse ``package.key=value`` where the chosen preset has no such key: Hydra would end
    in a six-line block ("Could not override ... not in struct"). A key of an inline config,
    of a split file or of a sweep over presets is left to Hydra.

    Raises:
        ConfigError: naming the key and the preset's keys.
    """
    if preset not in list_presets(group):
        return
    node, prefix = _option(group, preset)[0], f"{package}."
    for part in parts:
        if not isinstance(node, dict) or not node:
            return  # below a value or a free-form mapping
        if part not in node:
            error = _unknown(prefix + part, [prefix + k for k in node])
            raise ConfigError(f"{error} (+{prefix}{part}=VALUE adds a key the preset lacks)")
        node, prefix = node[part], f"{prefix}{part}."


def check_group_values(overrides: list[str], opts: Options) -> None:
    """Refuse an unknown preset of a config group (``split=nosuch``) before composition, where
    Hydra would end in a long block naming the search path. A sweep's values are checked one by
    one; an inline config (``split={...}``), ``null``, an interpolation, a sweep function and a
    split file (``split=FILE.json``) are left as they are.

    Raises:
        ConfigError: naming the option, the value and the group's presets.
    """
    for text in overrides:
        key, eq, value = text.lstrip("+").partition("=")
        if not eq or key not in opts.groups or value[:1] in ("{", "[", "'", '"'):
            continue
        if "${" in value or "(" in value:
            continue
        group = opts.groups[key][0]
        known = list_presets(group)
        for item in value.split(","):
            if item in known or item == "null" or group == "split" and is_split_file(item):
                continue
            hint = did_you_mean(item, known)
            what = key if key == group else f"{key} (a {group})"
            more = ", or a saved split file FILE.json" if group == "split" else ""
            raise ConfigError(f"unknown {what} {item!r}{hint}; valid: {', '.join(known)}{more}")


def list_groups() -> list[str]:
    """The config groups of the installed configuration (folders of `conf/`)."""
    return sorted(
        p.name
        for p in conf_dir().iterdir()
        if p.is_dir() and p.name != "hydra" and not p.name.startswith("_")
    )


# --- help ----------------------------------------------------------------------------------
def _value(v) -> str:
    text = yaml.safe_dump(v, default_flow_style=True, width=10**6).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _flatten(node: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for k, v in node.items():
        if isinstance(v, dict) and v:
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _rows(items, comments: dict[str, str], lookup_prefix: str = "") -> list[str]:
    lines = []
    for key, value in items:
        left = f"  {key}={_value(value)}"
        note = comments.get(key[len(lookup_prefix) :] if lookup_prefix else key, "")
        if len(left) > 34 and note:
            lines += [left, f"{'':36}{note}"]
        else:
            lines.append(f"{left:<36}{note}".rstrip())
    return lines


def describe(group: str, option: str) -> str:
    """The first sentence of the comment that opens a group option's file (its lines joined:
    a sentence often runs over several), for ``--help``."""
    path = conf_dir() / group / f"{option}.yaml"
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            lines.append(line.lstrip("#").strip())
    text = " ".join(" ".join(lines).split())
    first = _SENTENCE_END.split(text, maxsplit=1)[0]
    return first if first == text or first.endswith(".") else first + "."


def _option(group: str, name: str) -> tuple[dict, dict[str, str]]:
    """A group option's keys and comments, over those of the options it extends (its own
    defaults list, e.g. ``train/tiny`` over ``train/default``)."""
    doc, text = _load(conf_dir() / group / f"{name}.yaml")
    keys, notes = {}, {}
    for base in doc.pop("defaults", None) or []:
        if isinstance(base, str) and base != "_self_" and base != name:
            more, more_notes = _option(group, base)
            keys.update(more)
            notes.update(more_notes)
    keys.update(doc)
    notes.update(read_comments(text))
    return keys, notes


def help_text(opts: Options, command: str, choices: dict[str, str] | None = None) -> str:
    """``curi <command> --help``: the header, each option with its default and meaning (the
    comment beside it in the YAML file), each config group with its options (and the keys of
    the chosen one), the footer."""
    choices = choices or {}
    lines = [
        str(opts.help.get("header", f"curi {command}")),
        "",
        f"usage: curi {command} [key=value ...] [-m] [--help]",
        "",
        "options:",
    ]
    own = {k: v for k, v in opts.defaults.items() if k not in opts.groups or v is not None}
    lines += _rows(_flatten(own), opts.comments)
    for package, (group, default) in opts.groups.items():
        choice = choices.get(package, default)
        names = list_presets(group)
        lines += ["", f"{package}={choice or 'null'}  (config group {group}: {', '.join(names)})"]
        width = max(map(len, names), default=0)
        lines += [f"    {n:<{width}}  {describe(group, n)}".rstrip() for n in names]
        if choice in names:
            doc, notes = _option(group, choice)
            items = [(f"{package}.{k}", v) for k, v in _flatten(doc)]
            lines += _rows(items, notes, lookup_prefix=f"{package}.")
    lines += [
        "",
        "Override any option with key=value (a group's keys with group.key=value); an "
        "unknown key or a value of the wrong type is refused.",
        "Hydra's own flags: --hydra-help. Progress bars are drawn on a terminal only, never "
        "into a log or a pipe.",
    ]
    if opts.help.get("footer"):
        lines += ["", str(opts.help["footer"])]
    return "\n".join(lines)

"""The import rules of the layers (docs/design.md, "Layers and the command line"): only the
command-line modules (``cli.py``, ``*_cli.py``, ``__main__.py``) import ``hydra``,
``omegaconf`` or another command-line module, so the library takes plain arguments and runs
without a config; and imports flow one way, ``curi`` <- ``renderers`` <- ``models`` and
``curi`` <- ``oracles`` <- ``models``. Every source file is parsed with `ast`: ``import x``
and ``from x import y`` anywhere, inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# source folder -> the package it installs as (pyproject.toml, [tool.setuptools.package-dir])
PACKAGES = {
    "curi": "curi",
    "renderers": "curi.renderers",
    "oracles": "curi.oracles",
    "models": "curi.models",
}
CONFIG_LIBRARIES = ("hydra", "omegaconf")
# the layers a layer may not import (the core imports none of the others)
FORBIDDEN = {
    "curi": ("curi.renderers", "curi.oracles", "curi.models"),
    "curi.renderers": ("curi.oracles", "curi.models"),
    "curi.oracles": ("curi.renderers", "curi.models"),
    "curi.models": (),
}


def _modules() -> dict[str, Path]:
    """Every source module of the distribution by its installed dotted name."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def is_cli(module: str) -> bool:
    """A command-line module: named ``cli`` or ``*_cli``, or ``__main__`` (``python -m``)."""
    last = module.rsplit(".", 1)[-1]
    return last in ("cli", "__main__") or last.endswith("_cli")


def imported(module: str, path: Path) -> set[str]:
    """The dotted names `module` imports anywhere in its file (relative imports resolved; for
    ``from a import b`` both ``a`` and ``a.b``, since ``b`` may be a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def _is_under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_the_source_tree_is_found():
    assert {
        "curi.cli",
        "curi.core_cli",
        "curi.bank",
        "curi.oracles.cli",
        "curi.models.cli",
        "curi.renderers.cli",
        "curi.renderers.rules_cli",
    } <= set(MODULES)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not is_cli(m)))
def test_library_modules_import_no_config_library_and_no_cli(module):
    names = imported(module, MODULES[module])
    config = sorted(n for n in names if any(_is_under(n, lib) for lib in CONFIG_LIBRARIES))
    assert not config, f"{module} imports {config}: only the cli modules may (plain arguments)"
    cli = sorted(n for n in names if n in MODULES and is_cli(n))
    assert not cli, f"{module} imports the command-line module(s) {cli}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_flow_one_way(module):
    layer = max((p for p in FORBIDDEN if _is_under(module, p)), key=len)
    names = imported(module, MODULES[module])
    bad = sorted(n for n in names if any(_is_under(n, f) for f in FORBIDDEN[layer]))
    assert not bad, f"{module} (layer {layer}) imports {bad}, a layer above or beside it"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_language_model_adapters_import_lm_eval(module):
    """lm-evaluation-harness is an extra (`curi[lm]`): the rest of curi runs without it."""
    names = imported(module, MODULES[module])
    if not _is_under(module, "curi.models.lm"):
        assert not any(_is_under(n, "lm_eval") for n in names), f"{module} imports lm_eval"


def test_the_rule_sees_imports_inside_functions(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from omegaconf import OmegaConf\n    from . import core_cli\n")
    assert {"omegaconf", "curi.core_cli"} <= imported("curi.m", src)

"""Public names of a package imported from their modules on first use (PEP 562): importing one
submodule (a command's ``cli``) then does not import the whole package, so a command can check
its config and refuse it before torch is imported."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = ["lazy_names"]


def lazy_names(
    package: str, exports: Mapping[str, Sequence[str]], *, first: Iterable[str] = ()
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of `package`, whose public names live in submodules.

    Args:
        package: the package's dotted name (its ``__name__``).
        exports: module -> the names the package takes from it.
        first: modules imported before any public name is looked up (those that register
            entries in a registry the names expose).

    Returns:
        ``(__getattr__, __dir__)``: a name of `exports`, else a submodule of `package` (as an
        eager import of it gave), is imported on first use and kept in the package's globals.
    """
    module_of = {name: module for module, names in exports.items() for name in names}
    first = tuple(first)

    def __getattr__(name: str):
        module = module_of.get(name)
        if module is not None:
            for other in first:
                importlib.import_module(other)
            value = getattr(importlib.import_module(module), name)
        else:
            try:
                value = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        vars(sys.modules[package])[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *module_of})

    return __getattr__, __dir__

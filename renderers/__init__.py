"""Renderers: scene records -> model inputs in three modalities (schema, image, sound), found
by name through the registry `RENDERERS`. Depends on curi's scene model only."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from curi.lazy import lazy_names

# The renderer modules register their renderers when imported: every public name (and
# `get_renderer`) imports them first, but importing a submodule alone (`curi.renderers.cli`)
# imports none of them, nor torch.
_RENDERER_MODULES = ("curi.renderers.schema", "curi.renderers.image", "curi.renderers.sound")
_EXPORTS = {
    "curi.renderers.base": [
        "RENDERERS",
        "Packed",
        "Rendered",
        "Renderer",
        "pack_records",
        "register_renderer",
    ],
    "curi.renderers.image": ["ImageRenderer"],
    "curi.renderers.schema": ["SCHEMA_DIM", "SchemaRenderer"],
    "curi.renderers.sound": ["SoundRenderer"],
}
__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, first=_RENDERER_MODULES)

if TYPE_CHECKING:  # the same names, for type checkers and editors
    from curi.renderers.base import (
        RENDERERS,
        Packed,
        Rendered,
        Renderer,
        pack_records,
        register_renderer,
    )
    from curi.renderers.image import ImageRenderer
    from curi.renderers.schema import SCHEMA_DIM, SchemaRenderer
    from curi.renderers.sound import SoundRenderer

__all__ = [
    "RENDERERS",
    "SCHEMA_DIM",
    "ImageRenderer",
    "Packed",
    "Rendered",
    "Renderer",
    "SchemaRenderer",
    "SoundRenderer",
    "get_renderer",
    "list_renderers",
    "pack_records",
    "register_renderer",
]


def _registry():
    """`RENDERERS`, once every renderer module has registered its renderers."""
    for module in _RENDERER_MODULES:
        importlib.import_module(module)
    from curi.renderers.base import RENDERERS

    return RENDERERS


def list_renderers() -> list[str]:
    """Names of the registered renderers (the modalities)."""
    return _registry().names()


def get_renderer(name: str, **options) -> Renderer:
    """Build the renderer registered as `name` with keyword `options` (the keys of
    ``conf/modality/<name>.yaml`` other than ``name``).

    Raises:
        OptionError: (a `ConfigError`, and a ValueError) an unknown name, an option the
            renderer does not take, or a value of the wrong type or range; the message names
            the valid names or options.
    """
    return _registry().build(name, **options)

"""Renderers: scene records -> model inputs in three modalities (schema, image, sound), found
by name through the registry `RENDERERS`. Depends on curi's scene model only."""

from __future__ import annotations

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


def list_renderers() -> list[str]:
    """Names of the registered renderers (the modalities)."""
    return RENDERERS.names()


def get_renderer(name: str, **options) -> Renderer:
    """Build the renderer registered as `name` with keyword `options` (the keys of
    ``conf/modality/<name>.yaml`` other than ``name``).

    Raises:
        OptionError: (a `ConfigError`, and a ValueError) an unknown name, an option the
            renderer does not take, or a value of the wrong type or range; the message names
            the valid names or options.
    """
    return RENDERERS.build(name, **options)

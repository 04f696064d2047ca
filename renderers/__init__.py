"""Renderers: scene records -> model inputs in three modalities (schema, image, sound), found
by name through a small registry (spec section 7). Depends on curi's scene model only."""

from __future__ import annotations

from curi.renderers.base import Packed, Rendered, Renderer, pack_records
from curi.renderers.image import ImageRenderer
from curi.renderers.schema import SCHEMA_DIM, SchemaRenderer
from curi.renderers.sound import SoundRenderer

__all__ = [
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
]

_REGISTRY: dict[str, type[Renderer]] = {
    cls.name: cls for cls in (SchemaRenderer, ImageRenderer, SoundRenderer)
}


def list_renderers() -> list[str]:
    """Names of the registered renderers (the modalities)."""
    return sorted(_REGISTRY)


def get_renderer(name: str, **options) -> Renderer:
    """Build the renderer registered as `name` with keyword `options` (the keys of
    ``conf/modality/<name>.yaml`` other than ``name``).

    Raises:
        ValueError: an unknown name, or an option the renderer does not take.
    """
    if name not in _REGISTRY:
        raise ValueError(f"unknown renderer {name!r}; choose one of {list_renderers()}")
    try:
        return _REGISTRY[name](**options)
    except TypeError as e:
        raise ValueError(f"bad option for renderer {name!r}: {e}") from None

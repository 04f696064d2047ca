"""Schema modality: one feature vector per object (one-hots, normalised projected position,
depth and rotation), padded to 5 objects with a mask, or with the mask as a 21st feature
(``mask_channel``) for models that take one tensor per scene."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from curi.renderers.base import Packed, Rendered, Renderer, pack_records, register_renderer
from curi.scenes import COLORS, MATERIALS, MAX_OBJECTS, SHAPES, SIZES, Camera

__all__ = ["SCHEMA_DIM", "FEATURES", "SchemaRenderer", "encode"]

# Feature layout (fixed; model encoders are built against it).
_OFF_SHAPE, _OFF_COLOR, _OFF_MATERIAL, _OFF_SIZE, _OFF_POS = 0, 3, 11, 13, 15
SCHEMA_DIM = 20
FEATURES: tuple[str, ...] = (
    *(f"shape={s}" for s in SHAPES),
    *(f"color={c}" for c in COLORS),
    *(f"material={m}" for m in MATERIALS),
    *(f"size={s}" for s in SIZES),
    "px/width",
    "py/height",
    "depth/distance",
    "sin(rotation)",
    "cos(rotation)",
)
assert len(FEATURES) == SCHEMA_DIM  # a layout constant, not input validation


def _encode_packed(p: Packed, camera: Camera) -> tuple[np.ndarray, np.ndarray]:
    feats = np.zeros((len(p), MAX_OBJECTS, SCHEMA_DIM), np.float32)  # (B, 5, 20)
    b, k = np.nonzero(p.valid)
    feats[b, k, _OFF_SHAPE + p.shape[b, k]] = 1.0
    feats[b, k, _OFF_COLOR + p.color[b, k]] = 1.0
    feats[b, k, _OFF_MATERIAL + p.material[b, k]] = 1.0
    feats[b, k, _OFF_SIZE + p.size[b, k]] = 1.0
    proj = camera.project(p.position[b, k])  # (N, 3): px, py, depth
    dist = math.dist(camera.position, camera.target)
    rad = np.radians(p.rotation[b, k])
    feats[b, k, _OFF_POS:] = np.stack(
        [
            proj[:, 0] / camera.width,
            proj[:, 1] / camera.height,
            proj[:, 2] / dist,
            np.sin(rad),
            np.cos(rad),
        ],
        axis=-1,
    )
    return feats, p.valid.copy()


def encode(
    records: Sequence[dict], *, camera: Camera | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Schema features of a batch of scene records.

    Args:
        records: scene records (`ConceptBank.scene_records`).
        camera: the camera that defines pixel positions (default `Camera()`, 240 x 160).

    Returns:
        ``(features, mask)``: float32 (B, 5, 20) in the `FEATURES` order and bool (B, 5);
        padding rows are all zero with mask False.
    """
    feats, mask = _encode_packed(pack_records(records), camera or Camera())
    return torch.from_numpy(feats), torch.from_numpy(mask)


@register_renderer("schema")
class SchemaRenderer(Renderer):
    """Per-object schema vectors (B, 5, 20) with a (B, 5) mask, or, with ``mask_channel``,
    one tensor (B, 5, 21) whose last feature is the mask (1.0 for a real object, 0.0 for
    padding) and no separate mask: every consumer (`episode_dataset`, scoring by modality,
    exports) then sees one tensor per scene, as most backbones take.

    Args:
        width, height: image size of the camera that normalises pixel positions.
        device: where the tensors go.
        mask_channel: append the mask as feature 21 instead of returning it apart.
    """

    name = "schema"
    per_object = True
    storage_format = (
        "support / query: float32 (N, 5, 20) features; support_mask / query_mask: bool (N, 5)"
    )

    def __init__(
        self,
        *,
        width: int = 240,
        height: int = 160,
        device: str = "cpu",
        mask_channel: bool = False,
    ):
        self.camera = Camera(width=width, height=height)
        self.device = torch.device(device)
        self.mask_channel = bool(mask_channel)
        if self.mask_channel:  # one tensor per scene: no separate mask anywhere downstream
            self.per_object = False
            self.storage_format = (
                "support / query: float32 (N, 5, 21) features, the last one the object mask"
            )

    @property
    def item_shape(self) -> tuple[int, ...]:
        return (MAX_OBJECTS, SCHEMA_DIM + self.mask_channel)

    @property
    def value_range(self) -> tuple[float, float]:
        # Projected positions of objects on the [-3, 3]^2 floor stay inside the image
        # (and depth within 2x the camera distance); sin/cos are in [-1, 1].
        return (-1.0, 2.0)

    def render(self, records: Sequence[dict]) -> Rendered:
        return self.render_packed(pack_records(records))

    def render_packed(self, packed: Packed) -> Rendered:
        feats, mask = _encode_packed(packed, self.camera)
        if self.mask_channel:
            feats = np.concatenate([feats, mask[..., None].astype(np.float32)], -1)  # (B, 5, 21)
            return Rendered(torch.from_numpy(feats).to(self.device))
        return Rendered(
            torch.from_numpy(feats).to(self.device), torch.from_numpy(mask).to(self.device)
        )

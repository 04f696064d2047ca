"""The renderer contract (`Renderer`, `Rendered`), the registry of renderers by name, and the
padded per-object arrays (`Packed`) every renderer reads: from JSON scene records
(`pack_records`) or, without building any record, from a bank's columnar scenes
(`pack_scenes`)."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple

import numpy as np
import torch

from curi.registry import Registry
from curi.scenes import (
    MAX_OBJECTS,
    PROPERTY_VALUES,
    RADII,
    SHAPES,
    SIZES,
    Camera,
    Scenes,
    centre_height,
    location_bins,
)

__all__ = [
    "RENDERERS",
    "Packed",
    "Rendered",
    "Renderer",
    "make_object",
    "pack_records",
    "pack_scenes",
    "register_renderer",
    "to_uint8",
]


@dataclass(frozen=True)
class Packed:
    """Scene records as padded arrays; padding slots hold 0 and ``valid`` False.

    Attributes:
        valid: (B, 5) bool, real objects.
        shape, color, material, size: (B, 5) int64 indices into SHAPES, COLORS, ...
        x, y: (B, 5) int64 location bins 1..8 (0 in padding).
        position: (B, 5, 3) float64 world centres.
        rotation: (B, 5) float64 degrees about the vertical axis.
    """

    valid: np.ndarray
    shape: np.ndarray
    color: np.ndarray
    material: np.ndarray
    size: np.ndarray
    x: np.ndarray
    y: np.ndarray
    position: np.ndarray
    rotation: np.ndarray

    def __len__(self) -> int:
        return len(self.valid)

    def __getitem__(self, rows: slice | np.ndarray) -> Packed:
        """The scenes `rows` (a slice or an index array) as a `Packed`."""
        return Packed(**{f.name: getattr(self, f.name)[rows] for f in dataclasses.fields(self)})

    def records(self) -> list[dict]:
        """The scenes as records (``{"objects": [...]}``) that `pack_records` packs back into
        the same arrays: the fallback of renderers that read records only."""
        vocab = {k: np.asarray(v, object) for k, v in PROPERTY_VALUES.items()}
        out = []
        for i in range(len(self)):
            k = np.flatnonzero(self.valid[i])
            cols = {name: v[getattr(self, name)[i, k]].tolist() for name, v in vocab.items()}
            cols["x"], cols["y"] = self.x[i, k].tolist(), self.y[i, k].tolist()
            cols["position"] = self.position[i, k].tolist()
            cols["rotation"] = self.rotation[i, k].tolist()
            out.append(
                {
                    "objects": [
                        dict(zip(cols, vals, strict=True))
                        for vals in zip(*cols.values(), strict=True)
                    ]
                }
            )
        return out


def pack_scenes(scenes: Scenes, ids) -> Packed:
    """The scenes `ids` of a columnar store (`ConceptBank.scenes`) as a `Packed`, vectorised:
    equal to ``pack_records(bank.scene_records(ids))`` (positions and rotations rounded to 6
    decimals as the records are) without building a record.

    Args:
        scenes: the columnar scenes.
        ids: scene ids, any shape (flattened).

    Raises:
        IndexError: an id outside ``[0, len(scenes))``.
    """
    ids = np.asarray(ids, np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= len(scenes)):
        raise IndexError(f"scene ids must be in [0, {len(scenes)})")
    valid = np.arange(MAX_OBJECTS) < np.asarray(scenes.n_objects[ids], np.int64)[:, None]
    props = np.where(valid[..., None], scenes.props[ids], 0).astype(np.int64)  # (B, 5, 6)
    position = np.round(np.asarray(scenes.position[ids], np.float64), 6)  # (B, 5, 3)
    rotation = np.round(np.asarray(scenes.rotation[ids], np.float64), 6)  # (B, 5)
    return Packed(
        valid,
        *np.ascontiguousarray(np.moveaxis(props, -1, 0)),  # 6 x (B, 5)
        position=np.where(valid[..., None], position, 0.0),
        rotation=np.where(valid, rotation, 0.0),
    )


def pack_records(records: Sequence[dict]) -> Packed:
    """Pack scene records (``{"objects": [{"shape", "color", "material", "size", "x", "y",
    "position", "rotation"}, ...]}``, as `ConceptBank.scene_records` returns) into arrays.

    Raises:
        ValueError: a record with no or more than 5 objects, an unknown property value, or an
            object without ``position``.
    """
    n = len(records)
    ints = np.zeros((6, n, MAX_OBJECTS), np.int64)  # shape, color, material, size, x, y
    valid = np.zeros((n, MAX_OBJECTS), bool)
    position = np.zeros((n, MAX_OBJECTS, 3))
    rotation = np.zeros((n, MAX_OBJECTS))
    for i, rec in enumerate(records):
        objs = rec["objects"] if isinstance(rec, dict) else rec
        if not 1 <= len(objs) <= MAX_OBJECTS:
            raise ValueError(f"record {i} has {len(objs)} objects; expected 1..{MAX_OBJECTS}")
        for k, o in enumerate(objs):
            for j, (name, vocab) in enumerate(PROPERTY_VALUES.items()):
                try:
                    ints[j, i, k] = vocab.index(o[name])
                except ValueError:
                    raise ValueError(
                        f"record {i} object {k}: unknown {name} {o[name]!r}; expected one of "
                        f"{vocab}"
                    ) from None
            ints[4, i, k] = o.get("x", 0)
            ints[5, i, k] = o.get("y", 0)
            if "position" not in o:
                raise ValueError(
                    f"record {i} object {k} has no 'position'; renderers need the 3D data of "
                    "`ConceptBank.scene_records`"
                )
            position[i, k] = o["position"]
            rotation[i, k] = o.get("rotation", 0.0)
            valid[i, k] = True
    return Packed(valid, *ints, position=position, rotation=rotation)


def make_object(
    shape: str,
    color: str,
    material: str,
    size: str,
    ground_xy: tuple[float, float],
    *,
    rotation: float = 0.0,
    camera: Camera | None = None,
) -> dict:
    """One object of a scene record placed by hand at floor position `ground_xy`, with the
    centre height, projected pixel and location bins the scene sampler would give it (for
    tests, examples and hand-made scenes)."""
    camera = camera or Camera()
    r = RADII[SIZES.index(size)]
    z = float(centre_height(np.asarray(SHAPES.index(shape)), np.asarray(r)))
    pos = np.array([ground_xy[0], ground_xy[1], z])
    pix = camera.project(pos)
    bx, by = location_bins(pix[None], camera.width, camera.height)
    return {
        "shape": shape,
        "color": color,
        "material": material,
        "size": size,
        "x": int(bx[0]),
        "y": int(by[0]),
        "position": [float(v) for v in pos],
        "rotation": float(rotation),
        "pixel": [float(pix[0]), float(pix[1])],
    }


class Rendered(NamedTuple):
    """A rendered batch: ``data`` (B, *item_shape) float32 and, for per-object modalities, a
    ``mask`` (B, 5) bool marking real objects (None otherwise)."""

    data: torch.Tensor
    mask: torch.Tensor | None = None


def to_uint8(
    x: torch.Tensor, *, scratch: torch.Tensor | None = None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Values in [0, 1] as uint8, round(255 x): the one quantisation of every PNG, export
    and render cache. `scratch` (float, x's shape, any layout) holds the float temporary if
    given; `out`: a uint8 tensor of x's shape to write to (and return)."""
    y = x * 255.0 if scratch is None else torch.mul(x, 255.0, out=scratch)
    y = y.add_(0.5).clamp_(0, 255)
    return y.to(torch.uint8) if out is None else out.copy_(y)


class Renderer(abc.ABC):
    """Scene records -> model inputs of one modality.

    Contract every renderer keeps (checked for all registered renderers by
    ``tests/test_renderers_contract.py``):

    * ``render(records)`` returns `Rendered` with ``data`` a float32 tensor of shape
      ``(len(records), *item_shape)`` on the renderer's device, every value inside
      ``value_range``; ``mask`` is a (B, 5) bool tensor when ``per_object`` else None.
    * The output depends only on the records and the renderer's options: no randomness,
      so the same batch gives bit-identical output (on the same device), and a record
      rendered alone or inside any batch gives the same values up to float rounding
      (vectorised and scalar code paths may differ in the last bit; within 1e-5).
    * Records need the discrete properties and the 3D data (``position``, ``rotation``) of
      `ConceptBank.scene_records`; bad records raise ValueError.
    * ``render_packed(pack_records(records))`` equals ``render(records)``.

    Everything that differs between modalities lives on the renderer, so code that consumes
    any modality (the training data pipeline, re-rendering exported episodes) asks it instead
    of testing its name: `input_shape` / `to_input` (what an encoder reads), `gpu_capable`,
    and `export` with `file_suffix` / `storage_format` (what is written to disk). A new
    modality is one new subclass, registered with `register_renderer`.
    """

    name: ClassVar[str]
    per_object: ClassVar[bool] = False
    gpu_capable: ClassVar[bool] = False
    """True when `render` computes on the renderer's device (so ``device=cuda`` makes it
    faster); False when it computes on the CPU and only moves its output to the device."""
    file_suffix: ClassVar[str | None] = None
    """Suffix of the file `export` writes per scene (``.png``, ``.wav``); None: no files."""
    storage_format: ClassVar[str] = "support / query: float32 renderer output"
    """How `export`'s arrays are stored, for the index of re-rendered episodes."""

    @property
    @abc.abstractmethod
    def item_shape(self) -> tuple[int, ...]:
        """Shape of one scene's output, without the batch dimension."""

    @property
    @abc.abstractmethod
    def value_range(self) -> tuple[float, float]:
        """Inclusive bounds of every output value."""

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one scene as an encoder reads it (`to_input`): `item_shape` unless the
        modality adds axes, e.g. a channel axis on a spectrogram (1, F, T)."""
        return self.item_shape

    @abc.abstractmethod
    def render(self, records: Sequence[dict]) -> Rendered:
        """Render a batch of scene records."""

    def render_packed(self, packed: Packed) -> Rendered:
        """Render a batch of packed scenes (`pack_scenes`, `pack_records`): the same output as
        `render` of the records they pack, for the whole batch at once (the training pipeline
        renders this way, with no per-scene record). This default goes through
        `Packed.records`; renderers override it with their vectorised path."""
        return self.render(packed.records())

    def to_input(self, data: torch.Tensor) -> torch.Tensor:
        """A rendered batch (B, *item_shape) as encoder input (B, *input_shape): the same
        values, reshaped (a view when `data` is contiguous)."""
        return data.reshape(len(data), *self.input_shape)

    def export(
        self,
        records: Sequence[dict],
        folder: Path | None = None,
        names: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Render `records` for storage (re-rendered episode files).

        Args:
            records: scene records.
            folder: when given and the modality has per-scene files (`file_suffix`), write
                one file per record there, ``<names[i]><file_suffix>``.
            names: the file stem of each record (as many as `records`).

        Returns:
            Compact numpy arrays (see `storage_format`): ``data`` (B, *item_shape) and, for
            per-object modalities, ``mask`` (B, 5). This default stores `render`'s float32
            output and writes no files.
        """
        r = self.render(records)
        out = {"data": r.data.cpu().numpy()}
        if r.mask is not None:
            out["mask"] = r.mask.cpu().numpy()
        return out

    def __call__(self, records: Sequence[dict]) -> Rendered:
        return self.render(records)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(item_shape={self.item_shape})"


RENDERERS: Registry[type[Renderer]] = Registry("renderer")
"""The renderers by name (`curi.renderers.get_renderer`); `curi.errors.OptionError` (a
ConfigError and a ValueError) for an unknown name or a bad option."""
register_renderer = RENDERERS.register
"""Class decorator: ``@register_renderer("image")`` makes a renderer available by name."""

"""CLEVR-like scenes: the object vocabulary, the fixed perspective camera, a vectorised scene
sampler and the columnar `Scenes` store with JSON-ready records (paper section 3, Appendix B.4)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from curi.rng import derive_rng
from curi.validate import choice

__all__ = [
    "SHAPES",
    "COLORS",
    "MATERIALS",
    "SIZES",
    "PROPERTIES",
    "COLOR_RGB",
    "RADII",
    "MAX_OBJECTS",
    "LAYOUTS",
    "PROPERTY_VALUES",
    "Camera",
    "Scenes",
    "sample_scenes",
    "location_bins",
    "centre_height",
    "records_to_props",
]

SHAPES = ("cube", "sphere", "cylinder")
COLORS = ("gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow")
MATERIALS = ("rubber", "metal")
SIZES = ("small", "large")  # ordered: small < large
COLOR_RGB = {
    "gray": (87, 87, 87),
    "red": (173, 35, 35),
    "blue": (42, 75, 215),
    "green": (29, 105, 20),
    "brown": (129, 74, 25),
    "purple": (129, 38, 192),
    "cyan": (41, 208, 208),
    "yellow": (255, 238, 51),
}
RADII = (0.35, 0.7)  # by size index
MAX_OBJECTS = 5
MIN_OBJECTS = 2
NUM_BINS = 8
# Column order of `Scenes.props`: the six discrete properties the concept language reads.
PROPERTIES = ("shape", "color", "material", "size", "locationX", "locationY")
PROPERTY_VALUES = {"shape": SHAPES, "color": COLORS, "material": MATERIALS, "size": SIZES}


@dataclass(frozen=True)
class Camera:
    """A pinhole camera looking at the origin from above and to the side (CLEVR's default view:
    about 28 degrees elevation, 35 mm lens on a 32 mm sensor). Renderers use this same camera,
    so an object is drawn where its location bins say."""

    position: tuple[float, float, float] = (7.4811, -6.5076, 5.3437)
    target: tuple[float, float, float] = (0.0, 0.0, 0.0)
    hfov_deg: float = 2 * math.degrees(math.atan(16 / 35))
    width: int = 240
    height: int = 160

    def basis(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit vectors (right, up, forward) of the camera in world coordinates (z is up)."""
        eye, tgt = np.asarray(self.position, float), np.asarray(self.target, float)
        fwd = (tgt - eye) / np.linalg.norm(tgt - eye)
        right = np.cross(fwd, [0.0, 0.0, 1.0])
        right /= np.linalg.norm(right)
        up = np.cross(right, fwd)
        return right, up, fwd

    @property
    def focal(self) -> float:
        """Focal length in pixels."""
        return (self.width / 2) / math.tan(math.radians(self.hfov_deg) / 2)

    def project(self, points: np.ndarray) -> np.ndarray:
        """Project world points (..., 3) to (..., 3): pixel x, pixel y (origin top-left, y down)
        and depth along the viewing direction."""
        right, up, fwd = self.basis()
        rel = np.asarray(points, np.float64) - np.asarray(self.position)
        depth = rel @ fwd
        f = self.focal
        px = self.width / 2 + f * (rel @ right) / depth
        py = self.height / 2 - f * (rel @ up) / depth
        return np.stack([px, py, depth], axis=-1)


def location_bins(pixel: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """Location bins 1..8 of projected centres: ``1 + floor(8 * px / W)``, clamped (paper
    Appendix B.4)."""
    bx = 1 + np.floor(NUM_BINS * pixel[..., 0] / width)
    by = 1 + np.floor(NUM_BINS * pixel[..., 1] / height)
    return np.clip(bx, 1, NUM_BINS).astype(np.int8), np.clip(by, 1, NUM_BINS).astype(np.int8)


def centre_height(shape: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """Height of an object's centre above the ground: its half-height. Cubes have half-side
    r / sqrt(2) (so every shape's footprint fits a circle of radius r, as in CLEVR)."""
    return np.where(shape == SHAPES.index("cube"), radius / math.sqrt(2), radius)


@dataclass(frozen=True)
class Scenes:
    """Columnar scene store. Padding slots (index >= n_objects) hold -1 / 0.

    Attributes:
        n_objects: (N,) uint8, objects per scene (2..5).
        props: (N, 5, 6) int8, property indices in `PROPERTIES` order; locations are 1..8.
        position: (N, 5, 3) float32 world centre (x, y, z).
        rotation: (N, 5) float32 degrees about the vertical axis.
        pixel: (N, 5, 3) float32 projected centre (px, py, depth).
        camera: the camera the pixels and bins come from.
    """

    n_objects: np.ndarray
    props: np.ndarray
    position: np.ndarray
    rotation: np.ndarray
    pixel: np.ndarray
    camera: Camera

    def __len__(self) -> int:
        return len(self.n_objects)

    def records(self, ids) -> list[dict]:
        """JSON-ready records of scenes `ids`: discrete properties, bins and the 3D data a
        renderer needs (``position``, ``rotation``, ``pixel``)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        # Gather once and convert to Python values in bulk (no per-element numpy indexing).
        counts = self.n_objects[ids].tolist()
        props = self.props[ids].tolist()
        position = np.round(self.position[ids].astype(np.float64), 6).tolist()
        rotation = np.round(self.rotation[ids].astype(np.float64), 6).tolist()
        pixel = np.round(self.pixel[ids, :, :2].astype(np.float64), 4).tolist()
        out = []
        for j, i in enumerate(ids.tolist()):
            objs = []
            for k in range(counts[j]):
                shape, color, material, size, x, y = props[j][k]
                objs.append(
                    {
                        "shape": SHAPES[shape],
                        "color": COLORS[color],
                        "material": MATERIALS[material],
                        "size": SIZES[size],
                        "x": x,
                        "y": y,
                        "position": position[j][k],
                        "rotation": rotation[j][k],
                        "pixel": pixel[j][k],
                    }
                )
            out.append({"id": i, "objects": objs})
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns by name, for saving."""
        return {
            "n_objects": self.n_objects,
            "props": self.props,
            "position": self.position,
            "rotation": self.rotation,
            "pixel": self.pixel,
        }


def records_to_props(records: list[dict], *, min_objects: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(n_objects, props) arrays from records that hold at least shape, color, material, size,
    x and y per object; the inverse of the discrete part of `Scenes.records`.

    Args:
        min_objects: the fewest objects a record may hold (`MIN_OBJECTS` for the scenes of
            CURI; 1 lets tests reach the counts of a single object).

    Raises:
        ValueError: a record with too few or too many objects or an unknown property value.
    """
    n = len(records)
    n_objects = np.zeros(n, np.uint8)
    props = np.full((n, MAX_OBJECTS, len(PROPERTIES)), -1, np.int8)
    for i, rec in enumerate(records):
        objs = rec["objects"] if isinstance(rec, dict) else rec
        if not min_objects <= len(objs) <= MAX_OBJECTS:
            raise ValueError(
                f"record {i} has {len(objs)} objects; expected {min_objects}..{MAX_OBJECTS}"
            )
        n_objects[i] = len(objs)
        for k, o in enumerate(objs):
            for j, name in enumerate(PROPERTIES[:4]):
                try:
                    props[i, k, j] = PROPERTY_VALUES[name].index(o[name])
                except ValueError:
                    raise ValueError(
                        f"record {i} object {k}: unknown {name} {o[name]!r}; "
                        f"expected one of {PROPERTY_VALUES[name]}"
                    ) from None
            for j, key in ((4, "x"), (5, "y")):
                v = int(o[key])
                if not 1 <= v <= NUM_BINS:
                    raise ValueError(f"record {i} object {k}: {key}={v} is not a bin 1..8")
                props[i, k, j] = v
    return n_objects, props


#: Scene layouts (docs/concepts.md, "Scenes"): ``spec`` (a pair only needs its footprints
#: `margin` apart) or ``clevr`` (also CLEVR's directional margin: two objects at least
#: `DIRECTIONAL_MARGIN` apart along the camera's left-right and front-behind ground axes, so
#: that "left of" and "behind" are never ambiguous; CLEVR's generator does this, the paper's
#: scenes are CLEVR renders).
LAYOUTS = ("spec", "clevr")
DIRECTIONAL_MARGIN = 0.4


def _ground_axes(camera: Camera) -> np.ndarray:
    """(2, 2): the camera's right and forward directions projected on the ground, unit length."""
    right, _, fwd = camera.basis()
    axes = np.stack([right[:2], fwd[:2]])
    return axes / np.linalg.norm(axes, axis=1, keepdims=True)


def _sample_chunk(
    rng: np.random.Generator, m: int, margin: float, axes: np.ndarray | None
) -> tuple[np.ndarray, ...]:
    """Sample m scenes: counts, discrete properties, ground positions and rotations. With
    `axes` (the ground axes of the ``clevr`` layout) a candidate also needs
    `DIRECTIONAL_MARGIN` along both axes from every earlier object."""
    n_obj = rng.integers(MIN_OBJECTS, MAX_OBJECTS + 1, size=m)
    shape = rng.integers(0, len(SHAPES), size=(m, MAX_OBJECTS))
    color = rng.integers(0, len(COLORS), size=(m, MAX_OBJECTS))
    material = rng.integers(0, len(MATERIALS), size=(m, MAX_OBJECTS))
    size = rng.integers(0, len(SIZES), size=(m, MAX_OBJECTS))
    rotation = rng.uniform(0.0, 360.0, size=(m, MAX_OBJECTS))
    radius = np.asarray(RADII)[size]
    xy = np.zeros((m, MAX_OBJECTS, 2))
    # Place objects one slot at a time (as CLEVR does): a candidate that comes closer to an
    # earlier object than their radii plus the margin is re-drawn, only for the scenes that
    # collide, until every scene is valid.
    for k in range(MAX_OBJECTS):
        todo = np.flatnonzero(n_obj > k)
        for _ in range(10_000):
            if todo.size == 0:
                break
            cand = rng.uniform(-3.0, 3.0, size=(todo.size, 2))
            xy[todo, k] = cand
            if k == 0:
                break
            delta = xy[todo, :k] - cand[:, None, :]  # (T, k, 2)
            d = np.linalg.norm(delta, axis=-1)  # (T, k)
            clash = (d - radius[todo, :k] - radius[todo, k : k + 1]) < margin
            if axes is not None:
                along = np.abs(delta @ axes.T)  # (T, k, 2): distance along right, forward
                clash |= (along < DIRECTIONAL_MARGIN).any(axis=-1)
            todo = todo[clash.any(axis=1)]
        else:  # pragma: no cover - practically unreachable with 5 objects on a 6 x 6 floor
            raise RuntimeError("scene placement did not converge")
    return n_obj, shape, color, material, size, rotation, radius, xy


def sample_scenes(
    num_scenes: int,
    seed: int,
    *,
    camera: Camera | None = None,
    margin: float = 0.25,
    layout: str = "spec",
    chunk: int = 65_536,
    progress: bool = False,
) -> Scenes:
    """Sample `num_scenes` CLEVR-like scenes of 2-5 objects (paper section 3, Appendix B.4).

    Scenes come in chunks, each from its own generator, so the first k scenes are the same
    whatever `num_scenes` is.

    Args:
        num_scenes: how many scenes.
        seed: the seed.
        camera: the camera that defines pixel positions and location bins.
        margin: minimum gap between two objects' footprint circles.
        layout: `LAYOUTS`: ``spec``, or ``clevr`` (adds CLEVR's directional margin).
        chunk: scenes per generator.
        progress: show a progress bar.
    """
    if num_scenes < 1:
        raise ValueError(f"num_scenes must be >= 1, got {num_scenes}")
    choice(layout, "layout", LAYOUTS)
    camera = camera or Camera()
    axes = _ground_axes(camera) if layout == "clevr" else None
    n_chunks = -(-num_scenes // chunk)
    parts: list[tuple[np.ndarray, ...]] = []
    it = range(n_chunks)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="scenes", unit="chunk")
    for c in it:
        m = min(chunk, num_scenes - c * chunk)
        parts.append(_sample_chunk(derive_rng(seed, "scenes", c), m, margin, axes))
    n_obj, shape, color, material, size, rotation, radius, xy = (
        np.concatenate(col) for col in zip(*parts, strict=True)
    )
    z = centre_height(shape, radius)
    position = np.concatenate([xy, z[..., None]], axis=-1)
    pixel = camera.project(position)
    bx, by = location_bins(pixel, camera.width, camera.height)
    props = np.stack([shape, color, material, size, bx, by], axis=-1).astype(np.int8)
    pad = np.arange(MAX_OBJECTS)[None, :] >= n_obj[:, None]
    props[pad] = -1
    position[pad] = 0.0
    rotation[pad] = 0.0
    pixel[pad] = 0.0
    return Scenes(
        n_objects=n_obj.astype(np.uint8),
        props=props,
        position=position.astype(np.float32),
        rotation=rotation.astype(np.float32),
        pixel=pixel.astype(np.float32),
        camera=camera,
    )

"""Per-scene features of the shortcut audit (docs/fidelity.md, "Shortcut audit"): what a
learner can read off one scene without the concept, computed with numpy over the bank's
columnar scene arrays (`curi.scenes.Scenes`), never record by record.

Features, in groups (the audit's importances are per group):

- ``objects``: the number of objects;
- ``shape``, ``color``, ``material``, ``size``: how many objects have each value;
- ``sameness``: per property, the number of distinct values and the largest number of objects
  sharing one (what ``all`` / ``unique`` / equality concepts read);
- ``position``: how many objects lie in each x and each y location bin, and the lowest and
  highest bin of each axis.
"""

from __future__ import annotations

import numpy as np

from curi.scenes import COLORS, MATERIALS, MAX_OBJECTS, NUM_BINS, SHAPES, SIZES

__all__ = ["FEATURE_GROUPS", "feature_groups", "feature_names", "scene_features"]

_VALUES = (("shape", SHAPES), ("color", COLORS), ("material", MATERIALS), ("size", SIZES))
FEATURE_GROUPS = ("objects", "shape", "color", "material", "size", "sameness", "position")


def feature_names() -> list[str]:
    """The column names of `scene_features`, in order."""
    names = ["n_objects"]
    for prop, values in _VALUES:
        names += [f"{prop}={v}" for v in values]
    for prop, _ in _VALUES:
        names += [f"distinct_{prop}", f"most_{prop}"]
    for axis in ("x", "y"):
        names += [f"{axis}={b}" for b in range(1, NUM_BINS + 1)]
    names += ["min_x", "max_x", "min_y", "max_y"]
    return names


def feature_groups() -> dict[str, np.ndarray]:
    """Group name -> the column indices of `scene_features` in that group."""
    groups: dict[str, list[int]] = {g: [] for g in FEATURE_GROUPS}
    for j, name in enumerate(feature_names()):
        head = name.split("=")[0]
        if name == "n_objects":
            groups["objects"].append(j)
        elif head.startswith(("distinct_", "most_")):
            groups["sameness"].append(j)
        elif head in ("x", "y") or head.startswith(("min_", "max_")):
            groups["position"].append(j)
        else:
            groups[head].append(j)
    return {g: np.array(cols, np.int64) for g, cols in groups.items()}


def scene_features(n_objects: np.ndarray, props: np.ndarray) -> np.ndarray:
    """Features of scenes given as columns (``Scenes.n_objects[ids]``, ``Scenes.props[ids]``).

    Args:
        n_objects: (N,) objects per scene.
        props: (N, 5, 6) property indices (`curi.scenes.PROPERTIES` order; padding slots -1).

    Returns:
        (N, F) float32, columns named by `feature_names`.
    """
    props = np.asarray(props)
    n = np.asarray(n_objects).astype(np.int64)
    valid = np.arange(MAX_OBJECTS)[None, :] < n[:, None]  # (N, 5)
    cols = [n[:, None]]
    counts = []
    for j, (_, values) in enumerate(_VALUES):
        onehot = (props[:, :, j, None] == np.arange(len(values))) & valid[..., None]
        counts.append(onehot.sum(1))  # (N, V)
    cols += counts
    for c in counts:
        cols += [(c > 0).sum(1, keepdims=True), c.max(1, keepdims=True)]
    bins = np.arange(1, NUM_BINS + 1)
    for j in (4, 5):
        cols.append(((props[:, :, j, None] == bins) & valid[..., None]).sum(1))
    for j in (4, 5):
        loc = props[:, :, j].astype(np.int64)
        cols += [
            np.where(valid, loc, NUM_BINS + 1).min(1, keepdims=True),
            np.where(valid, loc, 0).max(1, keepdims=True),
        ]
    return np.concatenate(cols, axis=1).astype(np.float32)

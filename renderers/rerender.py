"""Re-rendering exported episodes (`curi episodes ... out=FILE`) in one modality: a compressed
``.npz`` per episode with the support and query arrays, labels and ids, optional PNG or WAV
files per scene, and an ``index.json`` that lists them."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path

import numpy as np

from curi.atomic import atomic_path, write_text
from curi.export import EpisodeFileError, count_episodes, read_episode_file
from curi.renderers.base import Renderer

__all__ = ["MediaFiles", "media", "render_episode_file"]

log = logging.getLogger(__name__)


_FEATURES = {".png": "Image", ".wav": "Audio"}  # Hugging Face feature of each file type


class MediaFiles:
    """Rendered files of scene records for exports (`curi.export.Media`): PNG (image) or WAV
    (sound) bytes per record, from a renderer with per-scene files."""

    def __init__(self, renderer: Renderer) -> None:
        if renderer.file_suffix not in _FEATURES or not hasattr(renderer, "file_bytes"):
            raise ValueError(
                f"the {renderer.name} renderer writes no per-scene files; use image or sound"
            )
        self.renderer = renderer
        self.suffix = renderer.file_suffix
        self.feature = _FEATURES[self.suffix]

    def __call__(self, records) -> list[bytes]:
        return self.renderer.file_bytes(records)


def media(modality: str | Renderer, **options) -> MediaFiles:
    """The rendered files of `modality` (``image`` or ``sound``, with the renderer's options,
    or a renderer) for `curi.export.export_episodes` (``media=``).

    Raises:
        ValueError: an unknown modality, a bad option, or one without files (schema).
    """
    from curi.renderers import get_renderer

    renderer = modality if isinstance(modality, Renderer) else get_renderer(modality, **options)
    return MediaFiles(renderer)


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:  # a file: savez adds no suffix
        np.savez_compressed(f, **arrays)


def render_episode_file(
    path: str | Path,
    out: str | Path,
    renderer: Renderer,
    *,
    files: bool = True,
    limit: int | None = None,
    progress: bool = True,
    options: dict | None = None,
) -> Path:
    """Re-render the episodes of an exported file with `renderer`.

    Args:
        path: the exported file (`curi.export.export_episodes`).
        out: output directory (created). Per episode k: ``episode_<k>.npz`` with ``support``,
            ``query`` (see ``index.json`` for dtypes and shapes), ``support_labels``,
            ``query_labels``, ``support_ids``, ``query_ids``, ``concept_text`` (and the masks
            of per-object modalities); with `files`, ``episode_<k>/support_<NN>.png`` (image)
            or ``.wav`` (sound) per scene (`Renderer.export`, `Renderer.file_suffix`).
        renderer: the modality's renderer (`curi.renderers.get_renderer`).
        files: also write the per-scene PNG / WAV files.
        limit: render only the first `limit` episodes.
        progress: show a progress bar.
        options: the renderer's options, recorded in the index.

    Returns:
        The path of ``index.json``, written last.

    Raises:
        EpisodeFileError: a missing, empty or corrupt episode file, or bad scene records.
        ValueError: `limit` below 1.
    """
    from tqdm import tqdm

    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")

    path, out = Path(path), Path(out)
    episodes = read_episode_file(path, limit=limit)
    first = next(episodes)  # fails early and cleanly on a missing or corrupt file
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    bar = tqdm(
        total=count_episodes(path, limit),
        desc=f"render {renderer.name}",
        unit="episode",
        disable=not progress,
    )
    k = 0
    for ep in itertools.chain([first], episodes):
        stem = f"episode_{k:05d}"
        ns, nq = len(ep["support_records"]), len(ep["query_records"])
        names = [f"support_{i + 1:02d}" for i in range(ns)]
        names += [f"query_{i + 1:02d}" for i in range(nq)]
        folder = out / stem if files and renderer.file_suffix else None
        try:
            arr = renderer.export(ep["support_records"] + ep["query_records"], folder, names)
        except (ValueError, KeyError, TypeError) as e:  # pack_records on malformed records
            raise EpisodeFileError(f"{path} episode {k}: bad scene records: {e!s}") from None
        npz = {
            "concept_text": np.asarray(ep["concept_text"]),
            "support_labels": np.asarray(ep["support_labels"], np.int8),
            "query_labels": np.asarray(ep["query_labels"], np.int8),
            "support_ids": np.asarray(ep.get("support_ids", []), np.int64),
            "query_ids": np.asarray(ep.get("query_ids", []), np.int64),
        }
        for key, a in arr.items():
            suffix = "" if key == "data" else f"_{key}"
            npz[f"support{suffix}"], npz[f"query{suffix}"] = a[:ns], a[ns:]
        _save_npz(out / f"{stem}.npz", **npz)
        entries.append(
            {
                "index": ep.get("index", k),
                "concept_text": ep["concept_text"],
                "npz": f"{stem}.npz",
                "files": f"{stem}/" if folder else None,
            }
        )
        k += 1
        bar.update()
    bar.close()
    index = {
        "source": str(path.resolve()),
        "modality": renderer.name,
        "options": options or {},
        "item_shape": list(renderer.item_shape),
        "format": renderer.storage_format,
        "count": len(entries),
        "episodes": entries,
    }
    write_text(out / "index.json", json.dumps(index, indent=1))
    log.info("re-rendered %d episodes as %s into %s", len(entries), renderer.name, out)
    return out / "index.json"

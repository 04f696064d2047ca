"""Re-rendering exported episodes (`curi episodes ... out=FILE`) in one modality: a compressed
``.npz`` per episode with the support and query arrays, labels and ids, optional PNG or WAV
files per scene, and an ``index.json`` that lists them."""

from __future__ import annotations

import itertools
import json
import logging
import os
from pathlib import Path

import numpy as np

from curi.export import EpisodeFileError, count_episodes, read_episode_file
from curi.renderers.base import Renderer
from curi.renderers.image import ImageRenderer, save_png
from curi.renderers.sound import SoundRenderer, save_wav, spectrogram

__all__ = ["render_episode_file"]

log = logging.getLogger(__name__)

_FORMATS = {
    "image": "support / query: uint8 (N, 3, H, W), the renderer's float images x 255",
    "sound": "support / query: float16 (N, F, T) spectrograms in [0, 1]",
    "schema": "support / query: float32 (N, 5, 20) features; support_mask / query_mask: "
    "bool (N, 5)",
}


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(path)


def _render(renderer: Renderer, records: list[dict], files: Path | None, names: list[str]):
    """Arrays of one modality for `records` (compact dtypes; see `_FORMATS`), writing one
    PNG / WAV per record into `files` when given."""
    out: dict[str, np.ndarray] = {}
    if isinstance(renderer, SoundRenderer):
        waves = renderer.waveforms(records)
        out["data"] = spectrogram(waves, renderer.config).astype(np.float16)
        if files is not None:
            for w, name in zip(waves, names, strict=True):
                save_wav(w, files / f"{name}.wav", renderer.config.sample_rate)
    elif isinstance(renderer, ImageRenderer):
        u8, _ = renderer.render_uint8(records)  # (N, H, W, 3)
        out["data"] = np.ascontiguousarray(u8.transpose(0, 3, 1, 2))
        if files is not None:
            for im, name in zip(u8, names, strict=True):
                save_png(im, files / f"{name}.png")
    else:
        r = renderer.render(records)
        out["data"] = r.data.cpu().numpy()
        if r.mask is not None:
            out["mask"] = r.mask.cpu().numpy()
    return out


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
            or ``.wav`` (sound) per scene.
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
        folder = out / stem if files and renderer.name in ("image", "sound") else None
        try:
            arr = _render(renderer, ep["support_records"] + ep["query_records"], folder, names)
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
        "format": _FORMATS.get(renderer.name, "support / query: float32 renderer output"),
        "count": len(entries),
        "episodes": entries,
    }
    tmp = out / f".index.json.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(index, indent=1))
    tmp.replace(out / "index.json")
    log.info("re-rendered %d episodes as %s into %s", len(entries), renderer.name, out)
    return out / "index.json"

"""PNG files written by curi's own encoder: 8 bits per sample, one fixed row filter (Sub),
deflated at `PNG_LEVEL`, lossless; faster than PIL's for files no larger (docs/benchmarks.md,
"Our PNG writer against Pillow")."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import torch

from curi.atomic import atomic_path
from curi.renderers.base import to_uint8

__all__ = ["PNG_LEVEL", "png_bytes", "png_file", "png_scanlines", "save_png"]

PNG_LEVEL = 1
"""zlib level of the PNGs written (lossless at every level), by our writer (`png_bytes`: one
fixed filter, Sub): a 240 x 160 scene took 0.5-0.7 CPU ms against 1.3-2.0 for PIL at the
same level (which tries every filter on every row) and 2.7-3.7 at PIL's default 6, for files
of 12.0 kB (PIL: 12.2 kB at level 1, 8.1 kB at 6) on a shared machine, see
docs/benchmarks.md."""

_PNG_SUB = 1  # PNG filter type: each byte minus the same channel's byte one pixel left
_PNG_COLOR = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG colour type (grey, grey+alpha, RGB, RGBA)


def png_scanlines(hwc: np.ndarray) -> np.ndarray:
    """PNG scanlines (N, H, 1 + W C) of uint8 images (N, H, W, C) (contiguous is fastest: a
    transposed view cost 2x a copy first), each row prefixed with its filter type, Sub.

    One fixed filter instead of PIL's choice per row among all five (it tries each): PIL
    spent two thirds of a 240 x 160 scene's PNG time choosing, for files no smaller."""
    n, h, w, c = hwc.shape
    rows = np.empty((n, h, 1 + w * c), np.uint8)
    rows[:, :, 0] = _PNG_SUB
    body = rows[:, :, 1:].reshape(n, h, w, c, copy=False)  # a view of the row bytes
    body[:, :, 0] = hwc[:, :, 0]
    np.subtract(hwc[:, :, 1:], hwc[:, :, :-1], out=body[:, :, 1:])  # mod 256, as PNG says
    return rows


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind)))
    )


def png_file(rows: np.ndarray, channels: int) -> bytes:
    """The bytes of a PNG file (8 bits per sample, not interlaced) of filtered scanlines
    rows (H, 1 + W C) (`png_scanlines`), deflated at `PNG_LEVEL`."""
    h, w = rows.shape[0], (rows.shape[1] - 1) // channels
    header = struct.pack(">IIBBBBB", w, h, 8, _PNG_COLOR[channels], 0, 0, 0)
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            _png_chunk(b"IHDR", header),
            _png_chunk(b"IDAT", zlib.compress(rows, PNG_LEVEL)),
            _png_chunk(b"IEND", b""),
        )
    )


def _hwc(image: np.ndarray | torch.Tensor) -> np.ndarray:
    """One image as uint8 (H, W, C): a uint8 array (H, W, C) or (H, W) as it is, a float
    tensor (C, H, W) in [0, 1] quantised as `to_uint8` does."""
    if isinstance(image, torch.Tensor):
        image = to_uint8(image.detach().cpu().clamp(0, 1)).permute(1, 2, 0).numpy()
    image = np.asarray(image)
    if image.ndim == 2:
        image = image[:, :, None]
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] not in _PNG_COLOR:
        raise ValueError(f"expected uint8 (H, W, C) with C in 1-4, got {image.dtype} {image.shape}")
    return image


def save_png(image: np.ndarray | torch.Tensor, path: str | Path, *, fsync: bool = True) -> Path:
    """Write one image, uint8 (H, W, 3) (or (H, W), (H, W, 1, 2 or 4): grey, alpha) or float
    (3, H, W) in [0, 1], as a PNG (`png_bytes`), atomically; `fsync`: flush it to disk
    before the rename (see `curi.atomic.atomic_path`)."""
    path = Path(path)
    with atomic_path(path, fsync=fsync) as tmp:
        tmp.write_bytes(png_bytes(image))
    return path


def png_bytes(image: np.ndarray | torch.Tensor) -> bytes:
    """One image, uint8 (H, W, 3) (or (H, W), (H, W, 1, 2 or 4): grey, alpha) or float
    (3, H, W) in [0, 1], as the bytes of a PNG file: 8 bits per sample, every row Sub
    filtered, deflated at `PNG_LEVEL`; lossless (PIL and Hugging Face ``imagefolder`` read
    back the same pixels).

    Raises:
        ValueError: another dtype or shape of array."""
    hwc = _hwc(image)
    return png_file(png_scanlines(hwc[None])[0], hwc.shape[2])

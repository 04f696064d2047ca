"""Our PNG writer (`curi.renderers.png`: one Sub filter, zlib level 1) against Pillow at the
same level, on the real export path: `render_episode_file` of exported tiny-bank episodes with
every scene's PNG, all the work of `curi episodes render modality=image` (ray casting, PNG,
``.npz``, metadata), in this process (``--workers 1``) or in worker processes.

    python benchmarks/bench_png.py [--episodes 40] [--repeats 5] [--workers 1]

Prints the median wall and CPU seconds per image of each writer (the runs interleaved) and
their ratio; the PNGs of both decode to the same pixels (checked)."""

from __future__ import annotations

import argparse
import io
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _report import machine
from PIL import Image

import curi.renderers.image as image_module  # its export calls the writer by these names
from curi import build_bank, load_bank, make_split
from curi.export import export_episodes
from curi.renderers import get_renderer
from curi.renderers.png import PNG_LEVEL
from curi.renderers.rerender import render_episode_file

OURS = (image_module.png_scanlines, image_module.png_file)


def _pil_rows(hwc: np.ndarray) -> np.ndarray:
    return hwc  # Pillow filters itself: hand it the images


def _pil_file(image: np.ndarray, channels: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG", compress_level=PNG_LEVEL)
    return buf.getvalue()


def _use(writer: str) -> None:
    rows, file = OURS if writer == "ours" else (_pil_rows, _pil_file)
    image_module.png_scanlines, image_module.png_file = rows, file


def _cpu() -> float:
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    renderer = get_renderer("image")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bank = load_bank(build_bank("tiny", tmp / "data", progress=False))
        src = tmp / "eps.jsonl"
        split = make_split(bank, "concept_iid")
        export_episodes(bank, split, "test", src, n=args.episodes, progress=False)
        images = 0
        times: dict[str, list[tuple[float, float]]] = {"ours": [], "pil": []}
        for r in range(args.repeats + 1):  # the first round warms caches and is dropped
            for writer in ("ours", "pil"):
                _use(writer)
                out = tmp / f"{writer}-{r}"
                wall, cpu = time.perf_counter(), _cpu()
                render_episode_file(src, out, renderer, progress=False, workers=args.workers)
                wall, cpu = time.perf_counter() - wall, _cpu() - cpu
                images = len(list(out.rglob("*.png")))
                if r:
                    times[writer].append((wall, cpu))
        _use("ours")
        a, b = sorted((tmp / "ours-1").rglob("*.png"))[:50], sorted((tmp / "pil-1").rglob("*.png"))
        for x, y in zip(a, b[:50], strict=True):
            assert np.array_equal(np.asarray(Image.open(x)), np.asarray(Image.open(y)))
    print(
        f"Machine: {machine()}. {images} images ({args.episodes} episodes, 240 x 160), "
        f"workers={args.workers}, median of {args.repeats} interleaved runs:"
    )
    med = {
        w: [statistics.median(t[i] for t in times[w]) * 1e3 / images for i in (0, 1)] for w in times
    }
    for w, (wall, cpu) in med.items():
        print(f"  {w:5s} {wall:.2f} ms wall, {cpu:.2f} ms CPU per image")
    print(
        f"  pil / ours: {med['pil'][0] / med['ours'][0]:.3f} (wall), "
        f"{med['pil'][1] / med['ours'][1]:.3f} (CPU)"
    )


if __name__ == "__main__":
    main()

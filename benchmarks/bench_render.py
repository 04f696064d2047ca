"""Time the renderers (speed targets in docs/benchmarks.md): images per second per CPU core at
240 x 160 (target >= 300), the same on CUDA when present (target >= 20,000 on an H100), and
sound scenes per second per core for waveform + spectrogram (target >= 200); and the command a
user runs to re-render exported episodes, `curi episodes render modality=image`, with its
default settings (target >= 300 images / s on 2 cores), with the CPU time of each stage of one
image (ray casting, PNG, .npz, writing) at the export's former settings and at today's.

Run: python benchmarks/bench_render.py [--scenes 512] [--repeats 5] [--device cuda]
     [--part all|renderers|rerender|stages] [--episodes 20] [--threads-rows]
     [--doc docs/benchmarks.md]
Prints the median over repeats of wall-clock and CPU-process time; with 1 torch thread the
CPU time is the per-core cost even on a machine shared with other work.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _report import DOC, children_cpu, machine, write_section

from curi.renderers import get_renderer
from curi.renderers.rerender import default_workers
from curi.scenes import sample_scenes


def _time(fn, repeats: int, sync=lambda: None) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeats):
        sync()
        w, c = time.perf_counter(), time.process_time()
        fn()
        sync()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default=None, help="also time the image renderer here")
    ap.add_argument("--gpu-batch", type=int, default=4096)
    ap.add_argument("--part", choices=("all", "renderers", "rerender", "stages"), default="all")
    ap.add_argument("--episodes", type=int, default=20, help="episodes re-rendered per run")
    ap.add_argument(
        "--threads-rows",
        action="store_true",
        help="also time threads=2 and threads=null (slow where cores are busy)",
    )
    ap.add_argument("--doc", type=Path, default=DOC, help="markdown file to write sections to")
    args = ap.parse_args()
    if args.part in ("all", "stages"):
        stages = time_stages(args.repeats)
        print(json.dumps(stages, indent=2))
        write_section("rerender-stages", _stages_markdown(stages, args), doc=args.doc)
    if args.part in ("all", "rerender"):
        runs = dict(RERENDER_RUNS, **(THREADS_RUNS if args.threads_rows else {}))
        rows = time_rerender(args.episodes, args.repeats, runs)
        print(json.dumps(rows, indent=2))
        write_section("rerender", _rerender_markdown(rows, args), doc=args.doc)
    if args.part in ("rerender", "stages"):
        return
    torch.set_num_threads(1)
    recs = sample_scenes(max(args.scenes, args.gpu_batch), seed=0).records(
        range(max(args.scenes, args.gpu_batch))
    )
    cpu_recs = recs[: args.scenes]
    results = {"machine": platform.processor() or platform.machine(), "torch_threads": 1}

    image = get_renderer("image")
    image.render(cpu_recs[:64])  # warm up
    wall, cpu = _time(lambda: image.render(cpu_recs), args.repeats)
    results["image_cpu_240x160"] = {
        "images_per_s_wall": round(args.scenes / wall, 1),
        "images_per_s_cpu_time": round(args.scenes / cpu, 1),
        "target": 300,
    }

    sound = get_renderer("sound")
    sound.render(cpu_recs[:16])  # warm up (librosa's first import)
    wall, cpu = _time(lambda: sound.render(cpu_recs), args.repeats)
    results["sound_cpu_wave+spectrogram"] = {
        "scenes_per_s_wall": round(args.scenes / wall, 1),
        "scenes_per_s_cpu_time": round(args.scenes / cpu, 1),
        "target": 200,
    }

    schema = get_renderer("schema")
    wall, cpu = _time(lambda: schema.render(cpu_recs), args.repeats)
    results["schema_cpu"] = {"scenes_per_s_wall": round(args.scenes / wall, 1)}

    if args.device and args.device != "cpu":
        dev = torch.device(args.device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise SystemExit("--device cuda asked for, but CUDA is not available")
        gpu = get_renderer("image", device=args.device, chunk=args.gpu_batch)
        batch = recs[: args.gpu_batch]
        gpu.render(batch)  # warm up
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        wall, _ = _time(lambda: gpu.render(batch), args.repeats, sync)
        results[f"image_{dev.type}_240x160"] = {
            "images_per_s_wall": round(len(batch) / wall, 1),
            "batch": len(batch),
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev),
            "target": 20_000,
        }
    print(json.dumps(results, indent=2))
    write_section("render", _markdown(results, args), doc=args.doc)


# `curi episodes render` settings timed: the defaults (a worker process per core), one process.
RERENDER_RUNS = {
    "defaults (workers: one per core, threads=1)": [],
    "workers=1": ["workers=1"],
    "defaults, files=false": ["files=false"],
}
# More torch threads than free cores (`--threads-rows`): the reason `threads` defaults to 1.
THREADS_RUNS = {"threads=2": ["threads=2"], "threads=null (torch's default)": ["threads=null"]}


def time_stages(repeats: int, n: int = 50) -> dict:
    """CPU milliseconds per image of each stage of re-rendering one 50-scene episode, in this
    process with one torch thread and a worker's allocator (`_keep_freed_memory`), at the
    export's former settings and at today's: ray casting (today's renderer: float images
    quantised as a whole, as the export did before, and `export` without files as it does now:
    chunk by chunk, channels last); PNG
    encoding by PIL at its default zlib level 6 and at `PNG_LEVEL` (PIL picks a filter per
    row) and by our writer (`png_bytes`: Sub filter, `PNG_LEVEL`); the episode's .npz by
    ``np.savez_compressed`` and by `_save_npz` (`NPZ_LEVEL`); writing the PNG files with an
    fsync each (`save_png`'s default) and without (what `export` does inside the episode's
    folder, published once); and `export` with its files (the command's work per image but
    the .npz). Also wall ms, and bytes per image."""
    import io

    from PIL import Image

    from curi.renderers.base import pack_records, to_uint8
    from curi.renderers.png import PNG_LEVEL, png_file, png_scanlines, save_png
    from curi.renderers.rerender import _keep_freed_memory, _save_npz

    torch.set_num_threads(1)
    _keep_freed_memory()
    recs = sample_scenes(n, seed=1).records(range(n))
    image = get_renderer("image")
    image.export(recs[:4])  # warm up
    u8 = image.export(recs)["data"]  # (n, 3, H, W)
    hwc = np.ascontiguousarray(u8.transpose(0, 2, 3, 1))  # (n, H, W, 3)
    arrays = {
        "support": u8[:25],
        "query": u8[25:],
        "concept_text": np.asarray("exists x in S: red(x)"),
    }
    names = [f"s{i:02d}" for i in range(n)]

    def pil(level):
        out = []
        for im in hwc:
            buf = io.BytesIO()
            Image.fromarray(im).save(buf, format="PNG", compress_level=level)
            out.append(buf.getvalue())
        return out

    def ours():
        return [png_file(r, 3) for r in png_scanlines(hwc)]

    def before_ray_casting():  # float images, quantised as a whole (the export before)
        with torch.inference_mode():
            img = image.render_packed(pack_records(recs)).data
            return to_uint8(img).numpy()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        def savez():
            with open(tmp / "a.npz", "wb") as f:
                np.savez_compressed(f, **arrays)

        def write_pngs(fsync):
            for i, im in enumerate(hwc):
                save_png(im, tmp / f"{i}.png", fsync=fsync)

        stages = {
            "ray casting: float images, then quantised as a whole": before_ray_casting,
            "ray casting: export without files, quantised per chunk (after)": lambda: image.export(
                recs
            ),
            "PNG, PIL, zlib level 6 (before)": lambda: pil(6),
            f"PNG, PIL, zlib level {PNG_LEVEL}": lambda: pil(PNG_LEVEL),
            f"PNG, Sub filter, zlib level {PNG_LEVEL} (after)": ours,
            ".npz, np.savez_compressed (before)": savez,
            ".npz, _save_npz (after)": lambda: _save_npz(tmp / "b.npz", arrays),
            "PNGs encoded and written, an fsync each (before)": lambda: write_pngs(True),
            "PNGs encoded and written, no fsync (after)": lambda: write_pngs(False),
            "export with its PNG files (after)": lambda: image.export(recs, tmp, names),
        }
        out = {}
        for name, fn in stages.items():
            wall, cpu = _time(fn, repeats)
            out[name] = {
                "cpu_ms_per_image": round(1e3 * cpu / n, 2),
                "wall_ms_per_image": round(1e3 * wall / n, 2),
            }
        sizes = {
            "PNG PIL level 6": sum(map(len, pil(6))) / n,
            f"PNG PIL level {PNG_LEVEL}": sum(map(len, pil(PNG_LEVEL))) / n,
            f"PNG Sub level {PNG_LEVEL}": sum(map(len, ours())) / n,
            ".npz np.savez_compressed": (tmp / "a.npz").stat().st_size / n,
            ".npz _save_npz": (tmp / "b.npz").stat().st_size / n,
        }
        with np.load(tmp / "a.npz") as a, np.load(tmp / "b.npz") as b:
            same = all(np.array_equal(a[k], b[k]) for k in arrays)
        png_same = all(
            np.array_equal(np.asarray(Image.open(io.BytesIO(data))), im)
            for data, im in zip(ours(), hwc, strict=True)
        )
        pixels_same = np.array_equal(before_ray_casting(), u8)
    return {
        "stages": out,
        "bytes_per_image": {k: round(v) for k, v in sizes.items()},
        "npz_arrays_identical": same,
        "png_pixels_identical": png_same,
        "export_equals_quantised_render": pixels_same,
    }


def _stages_markdown(res: dict, args) -> str:
    rows = ["| stage | CPU ms / image | wall ms / image |", "|---|---|---|"]
    for name, r in res["stages"].items():
        rows.append(f"| {name} | {r['cpu_ms_per_image']} | {r['wall_ms_per_image']} |")
    sizes = ", ".join(f"{k} {v / 1e3:.1f} kB" for k, v in res["bytes_per_image"].items())
    return (
        f"Machine: {machine()}.\n\nWhere one re-rendered image's time goes (`curi episodes "
        "render modality=image`, 240 x 160, one episode of 50 scenes, one torch thread, in one "
        "process with a worker's allocator (freed memory kept), median of "
        f"{args.repeats}); CPU time is the per-core cost on a shared machine, "
        "wall time of the writes includes waiting for the disk.\n\n"
        + "\n".join(rows)
        + f"\n\nBytes per image: {sizes}. The two .npz files hold identical arrays: "
        f"{res['npz_arrays_identical']}; PIL reads our PNGs back to the same pixels: "
        f"{res['png_pixels_identical']}; the export's pixels equal the quantised float "
        f"images: {res['export_equals_quantised_render']}."
    )


def _curi(*args: str, cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (the child's, all its threads) of one `curi` command."""
    w, c = time.perf_counter(), children_cpu()
    subprocess.run(
        [sys.executable, "-c", "from curi.cli import main; main()", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - w, children_cpu() - c


def time_rerender(episodes: int, repeats: int, settings: dict[str, list[str]]) -> list[dict]:
    """Run `curi episodes render in=FILE modality=image out=DIR` on `episodes` exported
    episodes of the tiny bank (50 scenes each) with each of `settings`, `repeats` times,
    interleaved, and each also with ``limit=1``. Returns one row per setting: median wall and
    CPU seconds of the whole command, its images per second, and the images per second of
    rendering alone: the ``episodes - 1`` episodes more than the ``limit=1`` run over the
    time they add (start-up and imports, the command's fixed cost, left out)."""
    from curi import build_bank, load_bank, make_split
    from curi.export import export_episodes

    if episodes < 2:
        raise SystemExit("--episodes must be at least 2 (one is the fixed-cost run)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bank = load_bank(build_bank("tiny", tmp / "data", progress=False))
        src = tmp / "eps.jsonl"
        export_episodes(
            bank, make_split(bank, "concept_iid"), "test", src, n=episodes, progress=False
        )
        base = ["episodes", "render", f"in={src}", "modality=image", "progress=false"]
        _curi(*base, f"out={tmp / 'warm'}", "limit=1", cwd=tmp)  # warm the file cache
        runs: dict[tuple[str, bool], list[tuple[float, float]]] = {}
        for r in range(repeats):
            for i, (name, extra) in enumerate(settings.items()):
                for one in (False, True):
                    limit = ["limit=1"] if one else []
                    out = f"out={tmp / f'o{r}-{i}-{one}'}"  # a fresh folder: nothing replaced
                    runs.setdefault((name, one), []).append(
                        _curi(*base, out, *extra, *limit, cwd=tmp)
                    )
    rows = []
    for name in settings:
        wall = statistics.median(w for w, _ in runs[name, False])
        cpu = statistics.median(c for _, c in runs[name, False])
        wall_one = statistics.median(w for w, _ in runs[name, True])
        cpu_one = statistics.median(c for _, c in runs[name, True])
        rows.append(
            {
                "setting": name,
                "episodes": episodes,
                "images": 50 * episodes,
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "limit1_wall_s": round(wall_one, 2),
                "images_per_s": round(50 * episodes / wall, 1),
                "images_per_s_rendering": round(
                    50 * (episodes - 1) / max(wall - wall_one, 1e-9), 1
                ),
                "images_per_cpu_s_rendering": round(
                    50 * (episodes - 1) / max(cpu - cpu_one, 1e-9), 1
                ),
            }
        )
    return rows


def _rerender_markdown(rows: list[dict], args) -> str:
    lines = [
        "| `curi episodes render modality=image` | wall s | CPU s | `limit=1` wall s "
        "| images / s (command) | images / s (rendering) | images / CPU s (rendering) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['setting']} | {r['wall_s']} | {r['cpu_s']} | {r['limit1_wall_s']} "
            f"| {r['images_per_s']} | {r['images_per_s_rendering']} "
            f"| {r['images_per_cpu_s_rendering']} |"
        )
    r0 = rows[0]
    cores = default_workers()
    estimate = (
        f"Estimate for a quiet machine (not measured: the rate per CPU second of the default "
        f"settings times the {cores} worker processes they start here): "
        f"{r0['images_per_cpu_s_rendering'] * cores:.0f} images / s."
    )
    return (
        f"Machine: {machine()}.\n\nRe-rendering exported episodes as images (240 x 160; a PNG "
        f"per scene unless files=false, and an .npz per episode), {r0['episodes']} episodes "
        f"({r0['images']} images) of the tiny bank per run, median of {args.repeats} "
        "interleaved runs of the command in a fresh process. Rendering alone: the images of "
        "all episodes but one over the wall time beyond a `limit=1` run of the same setting "
        "(which holds the start-up and imports); per CPU second the same from CPU times. CPU s: "
        "the command's process and its workers, all their threads. "
        "Target: >= 300 images / s with the default settings on 2 cores.\n\n"
        + "\n".join(lines)
        + "\n\n"
        + estimate
    )


def _markdown(results: dict, args) -> str:
    rows = [
        "| renderer | per second, CPU time | per second, wall | target |",
        "|---|---|---|---|",
    ]
    for key, r in results.items():
        if not isinstance(r, dict):
            continue
        unit = "images" if key.startswith("image") else "scenes"
        cpu = r.get(f"{unit}_per_s_cpu_time", "")
        target = f">= {r['target']:,}" if "target" in r else ""
        rows.append(f"| {key} | {cpu} | {r[f'{unit}_per_s_wall']} | {target} |")
    return (
        f"Machine: {machine()}.\n\nRenderers, {args.scenes} scenes, median of {args.repeats} "
        "repeats, one torch thread (CPU time is the per-core cost when the machine is shared):"
        "\n\n" + "\n".join(rows)
    )


if __name__ == "__main__":
    main()

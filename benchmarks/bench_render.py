"""Time the renderers (speed targets in docs/benchmarks.md): images per second per CPU core at
240 x 160 (target >= 300), the same on CUDA when present (target >= 20,000 on an H100), and
sound scenes per second per core for waveform + spectrogram (target >= 200).

Run: python benchmarks/bench_render.py [--scenes 512] [--repeats 5] [--device cuda]
Prints the median over repeats of wall-clock and CPU-process time; with 1 torch thread the
CPU time is the per-core cost even on a machine shared with other work.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
from _report import machine, write_section

from curi.renderers import get_renderer
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
    args = ap.parse_args()
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
    write_section("render", _markdown(results, args))


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

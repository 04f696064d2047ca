"""Time the sound renderer's two paths (renderers/sound.py): scenes per second of the numpy
path (numpy synthesis, librosa STFT) and of the torch path (renderers/sound_torch.py) on the
CPU, from scene records and from packed arrays, and of the torch path on CUDA when present;
with the largest difference between the paths' spectrograms on the timed scenes (against the
torch path on the CPU where librosa, which the numpy path needs, is not installed).

Run: python benchmarks/bench_sound.py [--scenes 512] [--repeats 5] [--gpu-batch 4096]
    [--doc docs/benchmarks.md]
One torch thread, so CPU time is the per-core cost even on a shared machine; medians over
repeats after one warm-up call.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import torch
from _report import DOC, machine, write_section
from bench_render import _time

from curi.renderers.base import pack_records
from curi.renderers.sound import SoundRenderer
from curi.scenes import sample_scenes


def _rate(n: int, fn, repeats: int, sync=lambda: None) -> dict:
    fn()  # warm up: librosa's import, the torch path's tables, CUDA kernels
    wall, cpu = _time(fn, repeats, sync)
    return {"scenes_per_s_wall": round(n / wall, 1), "scenes_per_s_cpu_time": round(n / cpu, 1)}


def _cuda(args, ref_records: list, reference: torch.Tensor) -> dict | str:
    """The CUDA path's rate on a batch of `gpu_batch` scenes, and its largest difference from
    `reference`, the CPU rendering of `ref_records` (the same scenes: a sample of another size
    is other scenes, not a prefix)."""
    if not torch.cuda.is_available():
        return "not measured: no CUDA"
    gpu = SoundRenderer(device="cuda")
    recs = sample_scenes(args.gpu_batch, seed=0).records(range(args.gpu_batch))
    packed = pack_records(recs)
    out = _rate(len(recs), lambda: gpu.render_packed(packed), args.repeats, torch.cuda.synchronize)
    out.pop("scenes_per_s_cpu_time")  # host time of a GPU call says little
    diff = (gpu.render(ref_records).data.cpu() - reference).abs().max()
    out.update(
        batch=args.gpu_batch, device=torch.cuda.get_device_name(), max_abs_diff_vs_cpu=float(diff)
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gpu-batch", type=int, default=4096)
    ap.add_argument("--doc", type=Path, default=DOC, help="markdown file to write the section to")
    args = ap.parse_args()
    torch.set_num_threads(1)
    recs = sample_scenes(args.scenes, seed=0).records(range(args.scenes))
    packed = pack_records(recs)
    tch = SoundRenderer(backend="torch")
    n, r = args.scenes, args.repeats
    res: dict = {}
    if importlib.util.find_spec("librosa") is None:  # e.g. a GPU machine without it
        res["numpy, records"] = "not measured: librosa not installed"
        ref, ref_name = tch.render(recs).data, "the torch path on the CPU"
    else:
        cpu = SoundRenderer()
        res["numpy, records"] = _rate(n, lambda: cpu.render(recs), r)
        ref, ref_name = cpu.render(recs).data, "the numpy path"
    res["torch (CPU), records"] = _rate(n, lambda: tch.render(recs), r)
    res["torch (CPU), packed"] = _rate(n, lambda: tch.render_packed(packed), r)
    res["packing records alone"] = _rate(n, lambda: pack_records(recs), r)
    res["max_abs_diff_torch_cpu_vs_numpy"] = (
        float((tch.render(recs).data - ref).abs().max()) if ref_name == "the numpy path" else None
    )
    res["cuda"] = _cuda(args, recs, ref)
    res["cuda_reference"] = ref_name
    print(json.dumps(res, indent=2))
    write_section("sound", _markdown(res, args), doc=args.doc)


def _markdown(res: dict, args) -> str:
    rows = ["| path | scenes / s, CPU time | scenes / s, wall |", "|---|---|---|"]
    for key, v in res.items():
        if isinstance(v, dict) and key != "cuda":
            rows.append(f"| {key} | {v['scenes_per_s_cpu_time']:,} | {v['scenes_per_s_wall']:,} |")
        elif isinstance(v, str) and key not in ("cuda", "cuda_reference"):
            rows.append(f"| {key} | {v} | |")
    text = (
        f"Machine: {machine()}.\n\nSound renderer, {args.scenes} sampled scenes (2 s at 16 kHz, "
        f"n_fft 400, hop 200), median of {args.repeats} repeats, one torch thread:\n\n"
        + "\n".join(rows)
    )
    if res["max_abs_diff_torch_cpu_vs_numpy"] is not None:
        ratio = (
            res["torch (CPU), records"]["scenes_per_s_cpu_time"]
            / res["numpy, records"]["scenes_per_s_cpu_time"]
        )
        text += (
            f"\n\nTorch path / numpy path, CPU time: {ratio:.1f}x. Largest difference between "
            f"the two paths' spectrograms (values in [0, 1]) on these scenes: "
            f"{res['max_abs_diff_torch_cpu_vs_numpy']:.1e}."
        )
    cuda = res["cuda"]
    if isinstance(cuda, dict):
        text += (
            f"\n\nTorch path on {cuda['device']}, packed batches of {cuda['batch']:,}: "
            f"**{cuda['scenes_per_s_wall']:,} scenes / s** (wall, synchronised); largest "
            f"difference from {res['cuda_reference']}: {cuda['max_abs_diff_vs_cpu']:.1e}."
        )
    else:
        text += "\n\nTorch path on CUDA: not measured yet (no GPU on this machine)."
    return text


if __name__ == "__main__":
    main()

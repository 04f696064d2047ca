"""Benchmark of the concept bank: executor throughput against the scalar reference interpreter,
and the time and peak memory of each build stage for a preset.

    python benchmarks/bench_bank.py                 # executor + default preset
    python benchmarks/bench_bank.py --preset paper  # also the paper preset (minutes)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _report import machine, median_time, peak_rss_gib, write_section  # noqa: E402
from reference import reference_eval  # noqa: E402

from curi import BankConfig, build_bank, load_bank, parse, sample_concepts  # noqa: E402
from curi.executor import BitScenes, execute  # noqa: E402
from curi.scenes import sample_scenes  # noqa: E402

PRESETS = {
    "tiny": BankConfig(name="tiny", num_scenes=20_000, num_draws=40_000),
    "default": BankConfig(name="default"),
    "paper": BankConfig(name="paper", num_scenes=1_000_000, num_draws=2_000_000),
}


def executor(num_scenes: int, num_concepts: int) -> str:
    torch.set_num_threads(1)
    scenes = sample_scenes(num_scenes, seed=0)
    bs = BitScenes.from_scenes(scenes)
    texts = list(dict.fromkeys(t for t, _ in sample_concepts(20 * num_concepts, seed=1)))
    concepts = [parse(t) for t in texts[:num_concepts]]
    t_np = median_time(lambda: execute(concepts, bs), repeats=3)
    tbs = bs.to("cpu")
    t_torch = median_time(lambda: execute(concepts, tbs), repeats=3)
    records = scenes.records(range(300))
    ref_concepts = concepts[:40]
    t0 = time.perf_counter()
    for c in ref_concepts:
        for r in records:
            reference_eval(c, r)
    ref_rate = len(ref_concepts) * len(records) / (time.perf_counter() - t0)
    rate_np = num_concepts * num_scenes / t_np
    rate_torch = num_concepts * num_scenes / t_torch
    return (
        f"Executor, {num_concepts} sampled concepts x {num_scenes:,} scenes, one core "
        f"(median of 3):\n\n"
        f"| path | (concept, scene) evaluations / s | vs scalar reference |\n|---|---|---|\n"
        f"| bit-sliced, numpy | {rate_np:.3g} | {rate_np / ref_rate:,.0f}x |\n"
        f"| bit-sliced, torch (CPU) | {rate_torch:.3g} | {rate_torch / ref_rate:,.0f}x |\n"
        f"| scalar reference interpreter (tests/reference.py) | {ref_rate:.3g} | 1x |\n"
    )


def build(preset: str) -> str:
    cfg = PRESETS[preset]
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        path = build_bank(cfg, tmp, progress=False)
        total = time.perf_counter() - t
        bank = load_bank(path, verify=False)
        stages = bank.manifest["timings_s"]
        counts = bank.manifest["counts"]
        disk = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / 2**30
    rows = "".join(f"| {k} | {v:.1f} |\n" for k, v in stages.items())
    return (
        f"`{preset}` preset ({cfg.num_draws:,} draws, {cfg.num_scenes:,} scenes, "
        f"{bank.manifest['workers']} worker processes): **{total:.0f} s** in all, peak memory "
        f"{peak_rss_gib():.1f} GiB (largest process), {disk:.2f} GiB on disk, "
        f"{counts['concepts']:,} concepts.\n\n| stage | seconds |\n|---|---|\n{rows}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preset", action="append", default=None, choices=list(PRESETS))
    ap.add_argument("--scenes", type=int, default=1_000_000)
    ap.add_argument("--concepts", type=int, default=300)
    args = ap.parse_args()
    presets = args.preset or ["default"]
    body = f"Machine: {machine()}.\n\n" + executor(args.scenes, args.concepts)
    for p in presets:
        body += "\n" + build(p)
    write_section("bank", body)


if __name__ == "__main__":
    main()

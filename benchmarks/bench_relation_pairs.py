"""Benchmark of the relation-net pooler's pair paths (curi.models.relation_pairs) on the CPU:
forward + backward of the pooler, each case in its own process (time, and peak memory above
its inputs), and the peak memory of one image relation-net training step against avg pooling
through the real command line.

    python benchmarks/bench_relation_pairs.py [--part pooler memory] [--repeats 5]
        [--memory-runs 3] [--doc]

Cases: schema scenes (64 episodes x 50 scenes, K = 5, 2-5 objects as sampled) through the
indexed path (g on the real pairs alone, the CPU's) and the masked one (every pair, fixed
shapes, the GPU's and torch.compile's); image grids (K = 80, all real) at 1 episode (50 scenes)
dense and chunked. Memory: `curi train bank=tiny train=tiny modality=image device=cpu
train.batch_size=8 train.steps=1 train.num_workers=0` with `pooling=avg` and
`pooling=relation_net`, peak resident memory of each run (os.wait4), medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import machine, write_section

CASES = ("schema-indexed", "schema-masked", "image-dense", "image-chunked")


def _case_inputs(case: str):
    """The pooler and its inputs for one case (objects, mask, positions or None)."""
    import torch

    from curi.models import get_pooler
    from curi.scenes import sample_scenes

    torch.manual_seed(0)
    if case.startswith("schema"):
        n = 64 * 50
        counts = torch.from_numpy(sample_scenes(n, seed=0).n_objects.astype("int64"))
        mask = torch.arange(5)[None, :] < counts[:, None]  # (N, 5)
        pooler = get_pooler("relation_net", in_dim=96, num_objects=5)
        return pooler, torch.randn(n, 5, 96), mask, None
    n, k = 50, 80
    pooler = get_pooler("relation_net", in_dim=64, num_objects=k, pos_dim=2)
    pooler.pair_chunk = 0 if case == "image-dense" else pooler.chunk_scenes(8 * n, k)
    positions = torch.rand(n, k, 2)
    return pooler, torch.randn(n, k, 64), torch.ones(n, k, dtype=torch.bool), positions


def _masked_forward(pooler, objects, mask, positions):
    """The pooler's masked path, which eager CPU code does not take by itself."""
    import torch

    from curi.models.relation_pairs import masked_pair_sum

    objects = torch.where(mask[..., None], objects, 0.0)
    pair = mask[:, :, None] & mask[:, None, :]  # (B, K, K)
    return pooler.f(masked_pair_sum(pooler.first_layer(objects, positions), pair, pooler.g_rest))


def _pooler_forward(pooler, objects, mask, positions):
    """The pooler's own choice of path."""
    return pooler(objects, mask, positions)


def run_case(case: str, repeats: int) -> dict:
    """Median CPU and wall seconds of one forward + backward in training mode on one torch
    thread (CPU time, unlike wall time, hardly depends on what else runs on the machine),
    and the peak memory above the inputs (GiB), in this process."""
    import torch

    torch.set_num_threads(1)
    pooler, objects, mask, positions = _case_inputs(case)
    objects.requires_grad_()
    forward = _masked_forward if case == "schema-masked" else _pooler_forward
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu, wall = [], []
    for _ in range(repeats + 1):  # the first is a warm-up
        c, t = time.process_time(), time.perf_counter()
        forward(pooler, objects, mask, positions).square().sum().backward()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
        pooler.zero_grad(set_to_none=True)
        objects.grad = None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "cpu_s": statistics.median(cpu[1:]),
        "wall_s": statistics.median(wall[1:]),
        "peak_gib": (peak - before) / 2**20,
    }


def pooler_part(repeats: int) -> str:
    rows = []
    for case in CASES:
        cmd = [sys.executable, __file__, "--case", case, "--repeats", str(repeats)]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        rows.append(
            f"| {case} | {res['cpu_s']:.2f} | {res['wall_s']:.2f} | {res['peak_gib']:.2f} |"
        )
        print(rows[-1], flush=True)
    load = os.getloadavg()[0]
    return "\n".join(
        [
            "Relation-net pooler, one forward + backward in training mode on one torch thread "
            f"(median of {repeats} after a warm-up, each case in its own process; load average "
            f"{load:.1f} at the end, the machine shared, so wall times are inflated; CPU time "
            f"is the comparable one). {machine()}.",
            "",
            "| case | CPU seconds | wall seconds | peak memory above the inputs (GiB) |",
            "|---|---|---|---|",
            *rows,
        ]
    )


def _peak_of_train(pooling: str, tmp: Path, run: int) -> tuple[float, float]:
    """(peak resident GiB, wall seconds) of one `curi train` image step with `pooling`."""
    cmd = [
        sys.executable,
        "-c",
        "from curi.cli import main; main()",
        "train",
        "bank=tiny",
        "train=tiny",
        "modality=image",
        f"pooling={pooling}",
        "device=cpu",
        "train.batch_size=8",
        "train.steps=1",
        "train.num_workers=0",
        f"data_dir={tmp / 'data'}",
        f"output_dir={tmp / f'{pooling}-{run}'}",
        "progress=false",
    ]
    t = time.perf_counter()
    with open(tmp / f"{pooling}-{run}.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest's
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"curi train ({pooling}) failed; see {tmp / f'{pooling}-{run}.log'}")
    return usage.ru_maxrss / 2**20, time.perf_counter() - t


def memory_part(runs: int) -> str:
    peaks: dict[str, list[float]] = {"avg": [], "relation_net": []}
    walls: dict[str, list[float]] = {"avg": [], "relation_net": []}
    with tempfile.TemporaryDirectory() as d:
        bank = [sys.executable, "-c", "from curi.cli import main; main()", "bank", "bank=tiny"]
        subprocess.run([*bank, f"data_dir={Path(d) / 'data'}"], check=True, capture_output=True)
        for run in range(runs):
            for pooling in peaks:
                peak, wall = _peak_of_train(pooling, Path(d), run)
                peaks[pooling].append(peak)
                walls[pooling].append(wall)
                print(f"{pooling} run {run}: {peak:.2f} GiB, {wall:.0f} s", flush=True)
    med = {k: statistics.median(v) for k, v in peaks.items()}
    rows = [
        f"| {k} | {med[k]:.2f} | {', '.join(f'{p:.2f}' for p in peaks[k])} | "
        f"{statistics.median(walls[k]):.0f} |"
        for k in peaks
    ]
    return "\n".join(
        [
            "`curi train bank=tiny train=tiny modality=image pooling=P device=cpu "
            "train.batch_size=8 train.steps=1 train.num_workers=0` (the step, then validation "
            f"on 16 episodes), peak resident memory of the process, {runs} runs each. "
            f"{machine()}.",
            "",
            "| pooling | median peak (GiB) | runs (GiB) | median wall (s) |",
            "|---|---|---|---|",
            *rows,
            "",
            f"relation_net - avg: **{med['relation_net'] - med['avg']:+.2f} GiB** (target: at most "
            "1.5 GB).",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", nargs="+", choices=("pooler", "memory"), default=["pooler"])
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per pooler case")
    ap.add_argument("--memory-runs", type=int, default=3, help="curi train runs per pooling")
    ap.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # one case, in a child
    ap.add_argument("--doc", action="store_true", help="write docs/benchmarks.md")
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.repeats)))
        return
    for part in args.part:
        body = pooler_part(args.repeats) if part == "pooler" else memory_part(args.memory_runs)
        if args.doc:
            write_section(f"relation-{part}-cpu", body)
        else:
            print(body)


if __name__ == "__main__":
    main()

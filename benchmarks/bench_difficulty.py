"""Benchmark of the extension predictors (curi.extension_predictors, CURI extensions of
`curi difficulty`): `max_concepts` sampled test concepts of each of the nine paper splits of a
built bank, as the command samples them, every extension predictor, beyond the per-concept
outcomes the command computes anyway. Target: 300 concepts per split of the `default` bank in
<= 1 minute on 2 cores. Reports the median wall time and the median CPU time (user + system of
this process, all threads: on a shared host it says what the work costs when the cores are
free) over `--repeats` runs. Prints a markdown section.

    python benchmarks/bench_difficulty.py --bank ~/.cache/curi/default [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _report import machine, peak_rss_gib

from curi import load_bank
from curi.extension_predictors import EXTENSION_PREDICTORS, ExtensionIndex, extension_easiness
from curi.oracles.difficulty_auc import concept_sample
from curi.splits import PAPER_SPLITS, make_split


def _once(bank, splits, samples, names) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    index = ExtensionIndex.from_bank(bank)
    out = {"index_wall": time.perf_counter() - wall, "index_cpu": time.process_time() - cpu}
    for s in splits:
        extension_easiness(index, s.train, samples[s.name], names)
    out["wall"], out["cpu"] = time.perf_counter() - wall, time.process_time() - cpu
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", required=True)
    ap.add_argument("--max-concepts", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--predictors", nargs="*", default=list(EXTENSION_PREDICTORS))
    args = ap.parse_args()
    bank = load_bank(args.bank, verify=False)
    splits = [make_split(bank, s) for s in PAPER_SPLITS]
    samples = {s.name: concept_sample(s, args.max_concepts, 0) for s in splits}
    runs = [_once(bank, splits, samples, args.predictors) for _ in range(args.repeats)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    n = sum(len(v) for v in samples.values())
    lines = [
        f"Machine: {machine()}.",
        "",
        f"Extension predictors ({', '.join(args.predictors)}) of {n:,} test concepts "
        f"(at most {args.max_concepts} per split, the nine paper splits) of the "
        f"`{bank.config['name']}` bank ({len(bank):,} concepts), one process, median of "
        f"{args.repeats}:",
        "",
        "| step | wall (s) | CPU (s) |",
        "|---|---|---|",
        f"| index (evaluation scenes, scene sample) | {med['index_wall']:.1f} | "
        f"{med['index_cpu']:.1f} |",
        f"| index and 9 splits | {med['wall']:.1f} | {med['cpu']:.1f} |",
        "",
        "Runs (wall s): " + ", ".join(f"{r['wall']:.1f}" for r in runs) + ".",
        f"Peak memory {peak_rss_gib():.1f} GiB.",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Benchmark of the gap report: the whole table (nine splits x hard and easy negatives) on a
built bank, its wall time, where the time goes (per row and per stage) and peak memory;
optionally the four prior x likelihood combinations for docs/fidelity.md.

    python benchmarks/bench_gap.py --bank ~/.cache/curi/paper --episodes 20000 \\
        --json docs/results/gap_paper.json [--combos 2000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _report import machine, peak_rss_gib, write_section

from curi import load_bank
from oracles.gap import STAGES, compositionality_gap
from oracles.report import markdown_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", required=True)
    ap.add_argument("--episodes", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also save the rows here")
    ap.add_argument("--combos", type=int, default=0, help="episodes per row for the 4 combos")
    args = ap.parse_args()
    bank = load_bank(args.bank, verify=False)
    t = time.perf_counter()
    rows = compositionality_gap(bank, episodes=args.episodes, workers=args.workers, progress=False)
    total = time.perf_counter() - t
    job_s = sum(r["seconds"] for r in rows)
    per_episode_ms = job_s / (len(rows) * args.episodes) * 1e3
    lines = [
        f"Machine: {machine()}.\n",
        f"`{bank.path.name}` bank ({len(bank):,} concepts, {bank.num_scenes:,} scenes, "
        f"{len(bank.eval_ids):,} evaluation scenes): 9 splits x 2 negative types x "
        f"{args.episodes:,} test episodes, strong + weak + random oracles, mAP on the whole "
        f"evaluation set: **{total / 60:.1f} min** wall with {args.workers or 'all'} worker "
        f"processes ({job_s / 60:.1f} min of per-row time; {per_episode_ms:.2f} ms per episode "
        f"and row on one core), peak memory {peak_rss_gib():.1f} GiB.\n",
        "| split | negatives | seconds |",
        "|---|---|---|",
    ]
    lines += [f"| {r['split']} | {r['negatives']} | {r['seconds']:.0f} |" for r in rows]
    stage_s = {k: sum(r["stage_seconds"][k] for r in rows) for k in STAGES}
    stage_s["set-up (sampler, oracles)"] = job_s - sum(stage_s.values())
    lines += [
        "\nWhere the per-row time goes (all rows; ms per episode and row on one core):\n",
        "| stage | ms | share |",
        "|---|---|---|",
    ]
    lines += [
        f"| {k} | {v / (len(rows) * args.episodes) * 1e3:.2f} | {v / job_s:.0%} |"
        for k, v in stage_s.items()
    ]
    write_section(f"gap-{bank.path.name}", "\n".join(lines))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print(markdown_table(rows))
    if args.combos:
        out = {}
        for prior in ("log_linear", "pcfg"):
            for lik in ("size_principle", "consistent"):
                r = compositionality_gap(
                    bank,
                    episodes=args.combos,
                    prior=prior,
                    likelihood=lik,
                    workers=args.workers,
                    divergences=False,
                    progress=False,
                )
                out[f"{prior}+{lik}"] = r
                print(prior, lik)
                print(markdown_table(r))
        if args.json:
            args.json.with_name(args.json.stem + "_combos.json").write_text(
                json.dumps(out, indent=2)
            )


if __name__ == "__main__":
    main()

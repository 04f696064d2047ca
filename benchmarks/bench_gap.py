"""Benchmark of the gap report: the whole table (nine splits x hard and easy negatives) on a
built bank, its wall time, where the time goes (per row and per stage) and peak memory;
optionally the four prior x likelihood combinations (hard negatives). Writes its sections of
docs/benchmarks.md and docs/fidelity.md.

    python benchmarks/bench_gap.py --bank ~/.cache/curi/paper --episodes 20000 \\
        --json docs/results/gap_paper.json [--combos 5000]
    python benchmarks/bench_gap.py --bank ~/.cache/curi/paper --episodes 0 --combos 5000 \\
        --json docs/results/gap_paper.json      # only the combinations
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _report import FIDELITY, machine, peak_rss_gib, write_section

from curi import load_bank
from curi.oracles.gap import STAGES, compositionality_gap
from curi.oracles.paper import PAPER_GAP, agreement, paper_comparison
from curi.oracles.report import markdown_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", required=True)
    ap.add_argument("--episodes", type=int, default=20_000, help="0: only the combinations")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also save the rows here")
    ap.add_argument("--combos", type=int, default=0, help="episodes per row for the 4 combos")
    args = ap.parse_args()
    bank = load_bank(args.bank, verify=False)
    if args.episodes:
        _table(bank, args)
    if args.combos:
        out = {}
        for prior in ("log_linear", "pcfg"):
            for lik in ("size_principle", "consistent"):
                out[f"{prior}+{lik}"] = compositionality_gap(
                    bank,
                    negatives="hard",
                    episodes=args.combos,
                    prior=prior,
                    likelihood=lik,
                    workers=args.workers,
                    divergences=False,
                    progress=False,
                )
        write_section(f"gap-{bank.path.name}-combos", _combos(out, args.combos), FIDELITY)
        if args.json:
            args.json.with_name(args.json.stem + "_combos.json").write_text(
                json.dumps(out, indent=2) + "\n"
            )


def _table(bank, args) -> None:
    """The whole table: its timing into docs/benchmarks.md, its numbers into docs/fidelity.md."""
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
    write_section(f"gap-{bank.path.name}", _fidelity(rows, bank, args.episodes), FIDELITY)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print(markdown_table(rows))


def _combos(out: dict[str, list[dict]], episodes: int) -> str:
    """docs/fidelity.md's appendix: mAP strong / weak per split for each prior x likelihood,
    hard negatives, with the paper's row and each combination's agreement with it."""
    splits = list(PAPER_GAP)
    lines = [
        f"{episodes:,} test episodes per row, hard negatives. Cells: mAP strong / weak. Last "
        "columns: Pearson r of the mAP gaps with the paper's, and mean absolute errors.\n",
        "| prior + likelihood | " + " | ".join(splits) + " | r (gap) | mean abs. error: "
        "strong / weak / gap |",
        "|---" * (len(splits) + 3) + "|",
    ]
    for name, rows in out.items():
        hard = {r["split"]: r for r in rows if r["negatives"] == "hard"}
        a = agreement(rows)
        cells = [f"{hard[s]['map_strong']:.2f} / {hard[s]['map_weak']:.2f}" for s in splits]
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {a['pearson']:.2f} | "
            f"{a['mae_strong']:.3f} / {a['mae_weak']:.3f} / {a['mae_gap']:.3f} |"
        )
    paper = [f"{PAPER_GAP[s][0]:.2f} / {PAPER_GAP[s][1]:.2f}" for s in splits]
    lines.append("| paper | " + " | ".join(paper) + " | 1 | 0 |")
    return "\n".join(lines)


def _fidelity(rows: list[dict], bank, episodes: int) -> str:
    """docs/fidelity.md's section: the paper beside us, easy negatives, divergences."""
    lines = [
        f"`{bank.path.name}` bank ({len(bank):,} concepts), {episodes:,} test episodes per row "
        f"(`benchmarks/bench_gap.py`). Hard negatives, the paper's values in parentheses:\n",
        paper_comparison(rows),
        "| split | easy: mAP strong | mAP weak | mAP gap | CBA gap | D_A | D_C (random split) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted((r for r in rows if r["negatives"] == "easy"), key=lambda r: -r["map_gap"]):
        lines.append(
            f"| {r['split']} | {r['map_strong']:.3f} | {r['map_weak']:.3f} | {r['map_gap']:.3f} "
            f"| {r['cba_gap']:.3f} | {r['d_atom']:.3f} | {r['d_compound']:.3f} "
            f"({r['d_compound_random']:.3f}) |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

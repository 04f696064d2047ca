"""Benchmark of rule-query task generation (docs/rules.md): tasks per second on one core, the
episode, the oracle's replies and the text rows (``input`` / ``target``) included, and the
class mix of a default set; target >= 1,000 tasks / s per core on the default bank.

    python benchmarks/bench_rules.py --bank ~/.cache/curi/default [--dry-run]

Wall time and the process's CPU time are both reported: on a shared machine the CPU time is
the better measure of one core's rate.
"""

from __future__ import annotations

import argparse
import time

from _report import machine, peak_rss_gib, write_section

from curi import RuleTaskSampler, load_bank
from curi.renderers.text import TextRenderer
from curi.tasks import class_mix, format_mix


def rates(sampler, text: TextRenderer, n: int, start: int) -> dict[str, float]:
    """Tasks / s (wall, CPU) for tasks start..start+n-1, with and without the text rows."""
    out = {}
    for with_text in (False, True):
        w, c = time.perf_counter(), time.process_time()
        for i in range(start, start + n):
            t = sampler[i].to_dict()
            if with_text:
                text.rows(t)
        out["text" if with_text else "tasks"] = (
            n / (time.perf_counter() - w),
            n / (time.process_time() - c),
        )
    w, c = time.perf_counter(), time.process_time()
    for i in range(start, start + n):
        sampler.episodes[i]
    out["episodes"] = (n / (time.perf_counter() - w), n / (time.process_time() - c))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", required=True)
    ap.add_argument("-n", type=int, default=3000)
    ap.add_argument("--dry-run", action="store_true", help="print, do not write the doc")
    args = ap.parse_args()
    bank = load_bank(args.bank, verify=False)
    text = TextRenderer(bank)
    lines = [
        f"Machine: {machine()}.\n",
        f"Rule-query tasks / s on one core ({bank.path.name} bank, {len(bank):,} concepts, "
        f"{bank.num_scenes:,} scenes; concept_iid train, hard negatives, 6 scene + 6 rule "
        f"requests a task; {args.n:,} tasks a run, median of 3 runs; wall / CPU):\n",
        "| rule_rate | episode only | tasks | tasks + text rows |",
        "|---|---|---|---|",
    ]
    for rate in (0.0, 0.5):
        sampler = RuleTaskSampler(bank, "concept_iid", "train", rule_rate=rate)
        sampler[args.n * 4]  # warm the page cache
        runs = [rates(sampler, text, args.n, k * args.n) for k in range(3)]
        med = {key: tuple(sorted(r[key][j] for r in runs)[1] for j in (0, 1)) for key in runs[0]}
        cells = [f"{med[k][0]:,.0f} / {med[k][1]:,.0f}" for k in ("episodes", "tasks", "text")]
        lines.append(f"| {rate:g} | " + " | ".join(cells) + " |")
    test = RuleTaskSampler(bank, "concept_iid", "test")
    mix = class_mix(test[i].to_dict() for i in range(2000))
    lines += [
        "",
        "Class mix of 2,000 default tasks (concept_iid test):",
        "",
        "```",
        format_mix(mix),
        "```",
        f"\nPeak memory: {peak_rss_gib():.2f} GiB.",
    ]
    body = "\n".join(lines)
    print(body)
    if not args.dry_run:
        write_section("rules", body)


if __name__ == "__main__":
    main()

"""Benchmark of easiness (curi.predictors): every test concept of the nine paper splits of a
built bank, with Bogin et al.'s 2-LS rule and with every predictor of the AUC table, from the
concept strings (structure extraction included). Target: the paper bank's nine splits in
<= 1 minute on 2 cores (2-LS). Prints a markdown section; ``--doc`` also writes it into
docs/benchmarks.md.

    python benchmarks/bench_easiness.py --bank ~/.cache/curi/paper [--all] [--doc]
"""

from __future__ import annotations

import argparse
import time

from _report import machine, peak_rss_gib, write_section

from curi import load_bank
from curi.predictors import COMBINED, PREDICTORS, _Indexes, predictor_scores
from curi.splits import PAPER_SPLITS, make_split


def _run(bank, splits, names) -> tuple[float, float, dict]:
    t0 = time.perf_counter()
    idx = _Indexes(bank.concepts)
    for p in names:  # build the structure indexes first, to time them apart
        if p in PREDICTORS and PREDICTORS[p].kind not in ("length", "random"):
            idx.get(PREDICTORS[p])
    t1 = time.perf_counter()
    res = predictor_scores(
        bank.concepts,
        [(s.name, s.train, s.test) for s in splits],
        predictors=names,
        indexes=idx,
    )
    return t1 - t0, time.perf_counter() - t1, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", required=True)
    ap.add_argument("--all", action="store_true", help="also time every predictor")
    ap.add_argument("--doc", action="store_true", help="write the section of docs/benchmarks.md")
    args = ap.parse_args()
    bank = load_bank(args.bank, verify=False)
    splits = [make_split(bank, s) for s in PAPER_SPLITS]
    n_test = sum(len(s.test) for s in splits)
    lines = [
        f"Machine: {machine()}.",
        "",
        f"Easiness of every test concept of the nine paper splits ({n_test:,} test "
        f"concepts) of the `{bank.config['name']}` bank ({len(bank):,} concepts), from the "
        "concept strings, one process:",
        "",
        "| predictors | extract structures (s) | score 9 splits (s) | total (s) |",
        "|---|---|---|---|",
    ]
    runs = [("2-LS (Bogin et al.'s rule)", ["2-LS"])]
    if args.all:
        runs.append((f"all {len(PREDICTORS) + len(COMBINED)}", [*PREDICTORS, *COMBINED]))
    for label, names in runs:
        ext, score, res = _run(bank, splits, names)
        lines.append(f"| {label} | {ext:.1f} | {score:.1f} | {ext + score:.1f} |")
        print(lines[-1], flush=True)
    mean = {s.name: float(res[s.name]["2-LS"].easiness.mean()) for s in splits}
    lines += [
        "",
        "Mean 2-LS easiness per split: " + ", ".join(f"{k} {v:.3f}" for k, v in mean.items()) + ".",
        f"Peak memory {peak_rss_gib():.1f} GiB.",
    ]
    body = "\n".join(lines)
    print(body)
    if args.doc:
        write_section("easiness", body)


if __name__ == "__main__":
    main()

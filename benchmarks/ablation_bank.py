"""Fidelity ablation (docs/fidelity.md, "Ablation"): which documented difference from the
original release moves our bank towards the paper's? For each bank option that turns a candidate
cause on (and their combination) the script builds the bank, then reports the concepts kept,
the synonym groups, the structured splits' sizes and the strong and weak oracles per split,
beside the paper's and the release's numbers. Writes its section of docs/fidelity.md.

    python benchmarks/ablation_bank.py --preset paper --episodes 2000 --data-dir /tmp/ablation
"""

from __future__ import annotations

import argparse
import time

from _report import FIDELITY, machine, write_section

from curi import BankConfig, build_bank, load_bank
from curi.oracles.gap import compositionality_gap
from curi.oracles.paper import PAPER_GAP, RELEASE_CONCEPTS, RELEASE_SPLITS, agreement
from curi.splits import PAPER_SPLITS, make_split

#: Candidate causes, each a set of bank options (docs/fidelity.md says why each is a candidate).
VARIANTS = {
    "spec": {},
    "legacy bins": {"location_bins": "legacy"},
    "clevr layout": {"layout": "clevr"},
    "legacy bins + clevr layout": {"location_bins": "legacy", "layout": "clevr"},
    # The paper's depth limit read with the root at depth 1 (benchmarks/why_concepts.py).
    "release depth": {"max_depth": 5},
    "release depth + legacy bins + clevr layout (paper_legacy)": {
        "max_depth": 5,
        "location_bins": "legacy",
        "layout": "clevr",
    },
}


def measure(preset: str, options: dict, data_dir: str, episodes: int, tag: str) -> dict:
    cfg = BankConfig.preset(preset, name=f"ablation_{tag}", **options)
    t = time.perf_counter()
    bank = load_bank(build_bank(cfg, data_dir, progress=False), verify=False)
    build_s = time.perf_counter() - t
    splits = {n: make_split(bank, n) for n in PAPER_SPLITS}
    rows = compositionality_gap(
        bank, list(splits.values()), "hard", episodes=episodes, divergences=False, progress=False
    )
    return {
        "concepts": len(bank),
        "groups": int(bank.manifest["counts"]["synonym_groups"]),
        "build_s": build_s,
        "sizes": {n: (len(s.train), len(s.test)) for n, s in splits.items()},
        "rows": {r["split"]: r for r in rows},
        "agreement": agreement(rows),
    }


def _report(preset: str, episodes: int, results: dict) -> str:
    out = [
        f"`{preset}` preset with each candidate option, hard negatives, {episodes:,} test "
        f"episodes per split (`benchmarks/ablation_bank.py`; {machine()}).\n",
        "| variant | concepts (release 14,929) | synonym groups | build (s) | mAP-gap r vs paper "
        "| weak mAP MAE vs paper |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        a = r["agreement"]
        out.append(
            f"| {name} | {r['concepts']:,} ({r['concepts'] / RELEASE_CONCEPTS:.2f}x) | "
            f"{r['groups']:,} | {r['build_s']:.0f} | {a['pearson']:.2f} | {a['mae_weak']:.3f} |"
        )
    names = list(results)
    out += [
        "",
        "Split sizes, train / test (release in the last column):\n",
        "| split | " + " | ".join(names) + " | release |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for split, (tr, te, _) in RELEASE_SPLITS.items():
        cells = [f"{r['sizes'][split][0]:,} / {r['sizes'][split][1]:,}" for r in results.values()]
        out.append(f"| {split} | " + " | ".join(cells) + f" | {tr:,} / {te:,} |")
    out += [
        "",
        "Weak oracle mAP / strong oracle mAP per split (paper in the last column):\n",
        "| split | " + " | ".join(names) + " | paper |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for split, paper in PAPER_GAP.items():
        cells = [
            f"{r['rows'][split]['map_weak']:.3f} / {r['rows'][split]['map_strong']:.3f}"
            for r in results.values()
        ]
        out.append(f"| {split} | " + " | ".join(cells) + f" | {paper[1]:.2f} / {paper[0]:.2f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--data-dir", required=True, help="where the ablation banks are built")
    ap.add_argument("--write", action="store_true", help="write the section of docs/fidelity.md")
    args = ap.parse_args()
    results = {}
    for i, (name, options) in enumerate(VARIANTS.items()):
        results[name] = measure(args.preset, options, args.data_dir, args.episodes, str(i))
        print(name, results[name]["concepts"], flush=True)
    text = _report(args.preset, args.episodes, results)
    print(text)
    if args.write:
        write_section(f"ablation-{args.preset}", text, FIDELITY)


if __name__ == "__main__":
    main()

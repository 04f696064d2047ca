"""Fidelity experiment: is our weak oracle stronger than the paper's because our bank holds more
concepts? The weak oracle is re-run over a random share of each split's training concepts
(the paper's bank size over ours; the same kept concepts for every split), on the same test
episodes, beside the full training set. Writes its section of docs/fidelity.md.

    python benchmarks/weak_oracle_bank_size.py --bank ~/.cache/curi/paper --episodes 2000
"""

from __future__ import annotations

import argparse

import numpy as np
from _report import FIDELITY, write_section

from curi import load_bank
from curi.oracles.gap import compositionality_gap
from curi.oracles.paper import PAPER_GAP, RELEASE_CONCEPTS
from curi.splits import PAPER_SPLITS, Split, make_split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", required=True)
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--seeds", type=int, default=2, help="random sub-banks")
    args = ap.parse_args()
    bank = load_bank(args.bank, verify=False)
    share = min(1.0, RELEASE_CONCEPTS / len(bank))
    splits = {n: make_split(bank, n) for n in PAPER_SPLITS if n != "instance_iid"}

    def weak(train_of) -> dict[str, float]:
        chosen = [Split(n, train_of(sp), sp.val, sp.test, sp.dropped) for n, sp in splits.items()]
        rows = compositionality_gap(
            bank, chosen, "hard", episodes=args.episodes, divergences=False, progress=False
        )
        return {r["split"]: r["map_weak"] for r in rows}

    full = weak(lambda sp: sp.train)
    subs = []
    for seed in range(args.seeds):
        keep = np.random.default_rng(seed).random(len(bank)) < share
        subs.append(weak(lambda sp, keep=keep: sp.train[keep[sp.train]]))
    lines = [
        f"`{bank.path.name}` bank ({len(bank):,} concepts), hard negatives, {args.episodes:,} "
        f"test episodes per split: the weak oracle's mAP over all training concepts and over a "
        f"random {share:.0%} of them ({args.seeds} random sub-banks; "
        "`benchmarks/weak_oracle_bank_size.py`).\n",
        "| split | all training concepts | random share | paper |",
        "|---|---|---|---|",
    ]
    for name in splits:
        got = [s[name] for s in subs]
        lines.append(
            f"| {name} | {full[name]:.3f} | {min(got):.3f}-{max(got):.3f} | "
            f"{PAPER_GAP[name][1]:.2f} |"
        )
    write_section(f"weak-bank-size-{bank.path.name}", "\n".join(lines), FIDELITY)


if __name__ == "__main__":
    main()

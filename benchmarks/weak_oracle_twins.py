"""Fidelity experiment: why is our weak oracle strong on some splits? The weak oracle answers a
test episode well when some *training* concept holds on nearly the same scenes as the hidden
test concept (an extensional near-twin written with other tokens, e.g. "not a cube and not a
sphere" for "cylinder"). For a sample of each split's test concepts this measures the best
Jaccard overlap of truth rows (on a prefix of the scene pool) with any training concept, and
shows examples. Writes its section of docs/fidelity.md.

    python benchmarks/weak_oracle_twins.py --bank ~/.cache/curi/paper --sample 150
"""

from __future__ import annotations

import argparse

import numpy as np
from _report import FIDELITY, write_section

from curi import load_bank
from curi.oracles.paper import PAPER_GAP
from curi.rng import derive_rng
from curi.splits import PAPER_SPLITS, make_split


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits per row of a (rows, W) uint64 array."""
    return np.bitwise_count(words).sum(axis=1, dtype=np.int64)


def best_twins(bank, split, sample: int, words: int, seed: int) -> list[tuple[int, int, float]]:
    """(test concept, closest training concept, Jaccard) for a seeded sample of test concepts."""
    rng = derive_rng(seed, f"twins:{split.name}")
    tests = rng.choice(split.test, size=min(sample, len(split.test)), replace=False)
    train = np.asarray(bank.truth_words[split.train, :words])  # (T, words)
    train_pop = _popcount(train)
    out = []
    for t in tests.tolist():
        row = np.asarray(bank.truth_words[t, :words])
        inter = _popcount(train & row)
        union = train_pop + _popcount(row[None])[0] - inter
        jac = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
        j = int(np.argmax(jac))
        out.append((t, int(split.train[j]), float(jac[j])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bank", required=True)
    ap.add_argument("--sample", type=int, default=150, help="test concepts per split")
    ap.add_argument("--words", type=int, default=2048, help="64-scene words of the pool used")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help="write the section of docs/fidelity.md")
    args = ap.parse_args()
    bank = load_bank(args.bank, verify=False)
    lines = [
        f"`{bank.path.name}` bank ({len(bank):,} concepts): for {args.sample} sampled test "
        f"concepts per split, the best Jaccard overlap of truth rows with any training concept "
        f"(on the first {64 * args.words:,} scenes; `benchmarks/weak_oracle_twins.py`).\n",
        "| split | weak mAP, paper | share with a twin >= 0.9 | >= 0.5 | median best | example "
        "(test -> closest training concept, Jaccard) |",
        "|---|---|---|---|---|---|",
    ]
    for name in PAPER_SPLITS:
        if name == "instance_iid":
            continue
        res = best_twins(bank, make_split(bank, name), args.sample, args.words, args.seed)
        jac = np.array([r[2] for r in res])
        t, tr, j = max((r for r in res if r[2] < 0.999), key=lambda r: r[2], default=res[0])
        example = f"`{bank.concepts[t]}` -> `{bank.concepts[tr]}` ({j:.2f})"
        lines.append(
            f"| {name} | {PAPER_GAP[name][1]:.2f} | {(jac >= 0.9).mean():.2f} | "
            f"{(jac >= 0.5).mean():.2f} | {np.median(jac):.2f} | {example} |"
        )
        print(lines[-1], flush=True)
    if args.write:
        write_section(f"weak-twins-{bank.path.name}", "\n".join(lines), FIDELITY)


if __name__ == "__main__":
    main()

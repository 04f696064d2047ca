"""Fidelity experiment (docs/fidelity.md section 4): why does our `paper` bank keep
1.85x the concepts of the original release (27,591 against 14,929), and why do the counting and
intrinsic splits hold so many more test concepts (483 and 936 against 47 and 283)? Each
hypothesis is measured on an existing bank, without rebuilding it:

- the pipeline's funnel, the length and synonym-group distributions, and which concept shapes
  the small test sets are made of (``count=`` or a colour and a material inside a conjunction);
- de-duplication: one concept per synonym group or per commutative rewrite, then the splits;
- draws: how many concepts the first k draws of the same stream keep (does it saturate?);
- the frequency filter: a higher floor, and the release's 990K scenes instead of 1,000,000;
- sampling rules (depth limit, retries): the bank that another rule would keep, found by
  re-sampling, reusing the bank's verdict for every concept it executed and executing only
  the concepts it never drew.

    python benchmarks/why_concepts.py --bank ~/.cache/curi/paper > why_concepts.txt

Section 7 re-samples 2,000,000 draws per rule and executes the concepts the bank never
executed (about 20,000 per rule at the `paper` scale): about 25 minutes on a busy 2-core host;
``--skip-samplers`` leaves it out. Findings: docs/fidelity.md section 4.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import time
from collections import Counter

import numpy as np

from curi import load_bank
from curi.concepts import COMPARISONS, parse
from curi.divergence import canonical_tree
from curi.executor import BitScenes, execute
from curi.grammar import sample_concepts
from curi.oracles.paper import RELEASE_CONCEPTS
from curi.oracles.paper import RELEASE_SPLITS as RELEASE
from curi.rejection import static_rejection
from curi.splits import make_split

#: Sampling variants, (max_depth, attempts, share of the draws): the rules of docs/concepts.md,
#: "Grammar", and readings of the paper's prose ("no node has a depth larger than 6") that differ.
SAMPLERS = {
    "spec: depth 6, 12 attempts": (6, 12, 1.0),
    "no retry (1 attempt)": (6, 1, 1.0),
    "depth 5 (leaves at depth <= 6, root at 1)": (5, 12, 1.0),
    "depth 5, no retry": (5, 1, 1.0),
    "depth 5, first half of the draws": (5, 12, 0.5),
}
_ATOMS = (*COMPARISONS, "any", "all")  # nodes that make a boolean from values


class BankView:
    """The concepts `idx` of `bank` with what the split rules read (concepts, groups,
    lengths), so that `make_split` sizes a de-duplicated or filtered bank."""

    def __init__(self, concepts: list[str], groups: np.ndarray, lengths: np.ndarray):
        self.concepts, self.groups, self.lengths = concepts, groups, lengths

    @classmethod
    def of(cls, bank, idx: np.ndarray) -> BankView:
        idx = np.sort(np.asarray(idx, dtype=np.int64))
        return cls([bank.concepts[i] for i in idx], bank.groups[idx], bank.lengths[idx])

    def __len__(self) -> int:
        return len(self.concepts)


def split_sizes(view) -> dict[str, tuple[int, int, int]]:
    """(train, test, dropped) of each structured split of the paper on `view`."""
    out = {}
    for name in RELEASE:
        s = make_split(view, name)
        out[name] = (len(s.train), len(s.test), len(s.dropped))
    return out


def shape_of(text: str) -> str:
    """A coarse shape of a concept: how many atoms (comparisons and set tests) its body has
    and whether it counts (``count=``) or not."""
    c = parse(text)
    atoms = sum(n.op in _ATOMS for n in c.body.walk())
    counts = any(n.op == "count=" for n in c.body.walk())
    return f"{min(atoms, 3)}{'+' if atoms >= 3 else ''} atom{'s' if atoms > 1 else ''}" + (
        ", counting" if counts else ""
    )


# --- sampling variants ----------------------------------------------------------------------
def candidates(num_draws: int, seed: int, *, max_depth: int, attempts: int) -> dict[str, int]:
    """Collapsed concept -> index of its first draw, for the draws that pass the static
    rejections (the bank's pipeline up to execution, `curi.bank`)."""
    first: dict[str, int] = {}
    for i, (text, _) in enumerate(
        sample_concepts(num_draws, seed, max_depth=max_depth, attempts=attempts)
    ):
        first.setdefault(text, i)
    out: dict[str, int] = {}
    for text, i in first.items():
        c = parse(text)
        if static_rejection(c) is None:
            out.setdefault(c.collapsed().postfix(), i)
    return out


_BS: BitScenes | None = None  # the scenes, set before forking the executing workers


def _count_and_hash(texts: list[str]) -> list[tuple[int, bytes]]:
    rows = execute(texts, _BS)
    counts = np.bitwise_count(rows).sum(axis=1)
    return [(int(c), _row_key(r)) for c, r in zip(counts, rows, strict=True)]


def _row_key(row: np.ndarray) -> bytes:
    """The key the bank groups synonyms by (`curi.bank_build._synonym_groups`)."""
    return hashlib.blake2b(np.ascontiguousarray(row).tobytes(), digest_size=16).digest()


def execute_new(texts: list[str], bs: BitScenes, workers: int) -> list[tuple[int, bytes]]:
    """(positives, truth-row key) of each concept, executed on `bs` by `workers` processes."""
    global _BS
    _BS = bs
    chunks = [texts[i : i + 256] for i in range(0, len(texts), 256)]
    try:
        if workers > 1 and len(chunks) > 1:
            with mp.get_context("fork").Pool(workers) as pool:
                parts = pool.map(_count_and_hash, chunks)
        else:
            parts = [_count_and_hash(c) for c in chunks]
    finally:
        _BS = None
    return [x for p in parts for x in p]


def bank_row_keys(bank) -> list[bytes]:
    """The synonym key of every concept of `bank`."""
    return [_row_key(np.asarray(bank.truth_words[i])) for i in range(len(bank))]


# --- the tables ------------------------------------------------------------------------------
def _size_cells(sizes: dict) -> str:
    """train / test, and the dropped concepts of the binding splits."""
    return " | ".join(
        f"{tr:,} / {te:,}" + (f" ({dr:,})" if name.startswith("binding") else "")
        for name, (tr, te, dr) in sizes.items()
    )


def _size_header(first: str) -> list[str]:
    names = list(RELEASE)
    return [f"| {first} | concepts | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]


def _release_row() -> str:
    cells = _size_cells(RELEASE)
    return f"| original release | {RELEASE_CONCEPTS:,} | {cells} |"


def funnel(bank) -> list[str]:
    """The bank's manifest counts, step by step (paper Appendix B.2)."""
    c = bank.manifest["counts"]
    out = ["## 1. The pipeline's funnel (manifest)", "", "| step | count |", "|---|---|"]
    for key in ("draws", "successful_draws", "unique_draws"):
        out.append(f"| {key} | {c[key]:,} |")
    for key, n in c["static_rejections"].items():
        out.append(f"| static rejection: {key} | {n:,} |")
    for key in ("executed", "too_frequent", "too_rare"):
        out.append(f"| {key} | {c[key]:,} |")
    out.append(f"| **kept** | **{c['concepts']:,}** |")
    out.append(f"| synonym groups | {c['synonym_groups']:,} |")
    return out


def distributions(bank) -> list[str]:
    """Lengths and synonym-group sizes, beside the original release's reference numbers."""
    lengths = Counter(bank.lengths.tolist())
    sizes = np.bincount(bank.groups)
    big = np.sort(sizes)[::-1][:5].tolist()
    return [
        "## 2. Lengths and synonym groups (release: lengths to about 25, groups of 1 to about 80)",
        "",
        "lengths: " + ", ".join(f"{k}: {v:,}" for k, v in sorted(lengths.items())),
        f"synonym groups: {len(sizes):,}; singletons {np.mean(sizes == 1):.0%}; 99th percentile "
        f"{np.percentile(sizes, 99):.0f}; largest {big}",
    ]


def shapes(bank, splits: dict) -> list[str]:
    """Which shapes of concept each small test set is made of, against the whole bank."""
    kinds = [shape_of(s) for s in bank.concepts]
    names = ["bank", "counting test", "intrinsic test", "binding_shape dropped"]
    sets = [
        np.arange(len(bank)),
        splits["counting"].test,
        splits["intrinsic"].test,
        splits["binding_shape"].dropped,
    ]
    tallies = [Counter(kinds[i] for i in idx.tolist()) for idx in sets]
    keys = sorted(set().union(*tallies))
    out = [
        "## 3. Concept shapes: atoms (comparisons, any/all) in the body, and counting",
        "",
        "| shape | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for k in keys:
        out.append(f"| {k} | " + " | ".join(f"{t.get(k, 0):,}" for t in tallies) + " |")
    out.append("| total | " + " | ".join(f"{sum(t.values()):,}" for t in tallies) + " |")
    return [*out, "", *families(bank)]


def families(bank) -> list[str]:
    """How many concepts use each operator, variable and quantifier token."""
    names = ("count=", "and", "or", "not", "any", "all", "=", ">", "S-x", "x")
    toks = [set(s.split()) for s in bank.concepts]
    tail = Counter(s.split()[-1] for s in bank.concepts)
    cells = [f"{t}: {sum(t in k for k in toks):,}" for t in names]
    cells += [f"{q}: {tail[q]:,}" for q in ("exists=", "for-all=")]
    cells.append(f"no quantifier: {tail['S.']:,}")
    return ["Concepts using each token: " + ", ".join(cells)]


def dedup(bank) -> list[str]:
    """Split sizes when each synonym group, or each commutative rewrite, keeps one concept."""
    g = bank.groups
    first = np.unique(g, return_index=True)[1]
    order = np.lexsort((np.arange(len(g)), bank.lengths, g))
    shortest = order[np.r_[True, g[order][1:] != g[order][:-1]]]
    canon: dict[str, int] = {}
    for i, s in enumerate(bank.concepts):
        canon.setdefault(" ".join(canonical_tree(s).postfix()), i)  # and, or, = sorted
    variants = {
        "all (spec)": np.arange(len(bank)),
        "one per synonym group (first drawn)": first,
        "one per synonym group (shortest)": shortest,
        "one per commutative rewrite (and, or, =)": np.fromiter(canon.values(), np.int64),
    }
    out = ["## 4. De-duplication: concepts and split sizes (train / test)", ""]
    out += _size_header("kept")
    for name, idx in variants.items():
        out.append(
            f"| {name} | {len(idx):,} | {_size_cells(split_sizes(BankView.of(bank, idx)))} |"
        )
    return [*out, _release_row()]


def frequency(bank) -> list[str]:
    """A higher floor on positives, and the release's 990K scenes instead of ours."""
    out = ["## 5. The frequency filter", ""] + _size_header("kept when")
    for floor in (11, 100, 1000):
        idx = np.flatnonzero(bank.counts >= floor)
        sizes = split_sizes(BankView.of(bank, idx))
        out.append(f"| positives >= {floor:,} | {len(idx):,} | {_size_cells(sizes)} |")
    n = int(bank.num_scenes * 0.99)
    words, tail = divmod(n, 64)
    head = np.bitwise_count(np.asarray(bank.truth_words[:, :words])).sum(axis=1, dtype=np.int64)
    last = np.asarray(bank.truth_words[:, words]) & np.uint64((1 << tail) - 1)
    sub = head + np.bitwise_count(last)
    kept = (sub >= bank.manifest["config"]["min_positives"]) & (sub < np.ceil(0.1 * n))
    out += [
        "",
        f"On the first {n:,} scenes (the release's 990K) the filter keeps {int(kept.sum()):,} of "
        f"our {len(bank):,} concepts (those that leave are within sampling noise of a bound; "
        "about as many too-frequent ones, whose rows the bank does not keep, could enter).",
    ]
    return out


def saturation(bank, draws: list[int], cands: dict[str, int]) -> list[str]:
    """Concepts kept by the first k draws of the bank's own stream (a subset of its draws)."""
    firsts = np.array([cands[s] for s in bank.concepts])
    out = ["## 6. Draws: what the first k draws of the same stream keep", ""]
    out += _size_header("draws")
    for k in draws:
        idx = np.flatnonzero(firsts < k)
        n_cands = sum(1 for i in cands.values() if i < k)
        groups = len(np.unique(bank.groups[idx]))
        sizes = split_sizes(BankView.of(bank, idx))
        out.append(
            f"| {k:,} ({n_cands:,} executed, {groups:,} groups) | {len(idx):,} | "
            f"{_size_cells(sizes)} |"
        )
    return [*out, _release_row()]


def samplers(bank, spec: dict[str, int], workers: int) -> list[str]:
    """The bank each sampling variant would keep: a concept the bank executed keeps its
    verdict, the others are executed once on the bank's scenes (and remembered across
    variants). A variant with fewer draws keeps the first draws of its stream."""
    cfg = bank.manifest["config"]
    lo, hi = cfg["min_positives"], int(np.ceil(cfg["max_fraction"] * bank.num_scenes))
    index = {s: i for i, s in enumerate(bank.concepts)}
    keys = bank_row_keys(bank)
    verdicts: dict[str, bytes | None] = {}  # concept -> truth-row key if kept, else None
    streams = {(cfg["max_depth"], cfg["attempts"]): spec}
    out = ["## 7. Sampling rules: the bank another reading of the grammar keeps", ""]
    out += _size_header("sampler")
    lines = []
    for name, (max_depth, attempts, draws) in SAMPLERS.items():
        t = time.process_time()
        if (max_depth, attempts) not in streams:
            streams[max_depth, attempts] = candidates(
                cfg["num_draws"], cfg["seed"], max_depth=max_depth, attempts=attempts
            )
        limit = cfg["num_draws"] * draws
        cands = [s for s, i in streams[max_depth, attempts].items() if i < limit]
        new = [s for s in cands if s not in spec and s not in verdicts]
        for s, (c, k) in zip(new, execute_new(new, bank.bit_scenes(), workers), strict=True):
            verdicts[s] = k if lo <= c < hi else None
        kept = [s for s in cands if s in index or verdicts.get(s) is not None]
        group_of = {s: keys[index[s]] if s in index else verdicts[s] for s in kept}
        sizes = np.array(list(Counter(group_of.values()).values()))
        lengths = np.array([len(s.split()) for s in kept])
        view = BankView(kept, np.zeros(len(kept), np.int64), lengths)  # no rule reads groups
        out.append(f"| {name} | {len(kept):,} | {_size_cells(split_sizes(view))} |")
        lines.append(
            f"- {name}: {len(cands):,} executed ({len(new):,} of them executed here), "
            f"{len(kept):,} kept in {len(sizes):,} synonym groups (largest {sizes.max()}, "
            f"singletons {np.mean(sizes == 1):.0%}), lengths {lengths.min()}..{lengths.max()} "
            f"(median {np.median(lengths):.0f}); {time.process_time() - t:.0f} s CPU here"
        )
    return [*out, _release_row(), "", *lines]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bank", required=True, help="a built bank directory (e.g. the paper preset)")
    ap.add_argument("--workers", type=int, default=2, help="processes executing new concepts")
    ap.add_argument("--skip-samplers", action="store_true", help="leave out section 7 (slow)")
    args = ap.parse_args()
    bank = load_bank(args.bank, verify=False)
    cfg = bank.manifest["config"]
    splits = {n: make_split(bank, n) for n in RELEASE}
    print(f"# Why our bank keeps more concepts: {bank!r}\n")
    for part in (funnel(bank), distributions(bank), shapes(bank, splits), dedup(bank)):
        print("\n".join(part) + "\n", flush=True)
    print("\n".join(frequency(bank)) + "\n", flush=True)
    spec = candidates(
        cfg["num_draws"], cfg["seed"], max_depth=cfg["max_depth"], attempts=cfg["attempts"]
    )
    if len(spec) != bank.manifest["counts"]["executed"]:
        raise SystemExit("re-sampling does not reproduce the bank's draws: another curi version?")
    draws = [cfg["num_draws"] // d for d in (16, 8, 4, 2, 1)]
    print("\n".join(saturation(bank, draws, spec)) + "\n", flush=True)
    if not args.skip_samplers:
        print("\n".join(samplers(bank, spec, args.workers)), flush=True)


if __name__ == "__main__":
    main()

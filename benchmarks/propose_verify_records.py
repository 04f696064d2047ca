"""Measure the propose-and-verify learner and its references on the same episodes and K, and
append one record per (learner, bank, split, negatives, K) to docs/results/propose_verify.json
(docs/learners.md, "What is measured").

Learners: ``propose_verify`` (a trained checkpoint, `--checkpoint`), ``no_holes`` (a checkpoint
trained with ``holes=False``), ``grammar_only`` (the grammar's most probable sketches, no
training, no support: `models.program_enumerate`; with `--checkpoint`, that checkpoint's
protonet fallback). Every number is on episodes 0..N-1 of the
seed-0 test stream (the episodes ``curi gap episodes.test=N`` scores), with the strong and weak
oracles computed in the same run on the same episodes. Latency is one torch and one numba thread.

    python benchmarks/propose_verify_records.py --learner grammar_only --split concept_iid \\
        --k 64 1024 --episodes 500
    python benchmarks/propose_verify_records.py --learner propose_verify \\
        --checkpoint /tmp/pv/best.pt --k 1024 --episodes 2000
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "propose_verify.json"
DOC = ROOT / "docs" / "learners.md"
CHART = ROOT / "docs" / "results" / "propose_verify_k.png"
MARK = "table:propose-verify"
TARGETS_MARK = "table:propose-verify-targets"
# The learner's targets at K = 1,024 on the default bank with hard negatives (docs/learners.md):
# its share of the strong oracle's mAP on the same episodes.
TARGET_SHARE = {
    "instance_iid": 0.95,
    "concept_iid": 0.85,
    "boolean": 0.80,
    "intrinsic": 0.80,
    "extrinsic": 0.80,
    "counting": 0.80,
    "binding_color": 0.60,
    "binding_shape": 0.60,
    "complexity": 0.60,
}
LEARNERS = ("propose_verify", "no_holes", "grammar_only")
KEYS = ("learner", "bank", "split", "negatives", "k", "episodes")


def build_learner(name: str, bank, checkpoint: str | None, negatives: str, k: int):
    """The learner asked for, at `k` programs per episode."""
    from curi.models.program_enumerate import GrammarProposer
    from curi.models.propose_verify import ProposeVerify, Settings, load_universe
    from curi.models.propose_verify_train import learner_from_checkpoint, load_checkpoint

    if name == "grammar_only":
        # round robin over the sketches (one filling each before any second one) measured
        # best for this reference; the protonet fallback of `checkpoint` when given, so that
        # the two proposers differ in nothing else
        universe = load_universe(bank.path, bank.config.get("location_bins", "spec"))
        settings = Settings(k=k, repair=True, fill_decay=1e6)
        fallback = None
        if checkpoint is not None:
            fallback = learner_from_checkpoint(load_checkpoint(checkpoint), bank.path).fallback
        return ProposeVerify(
            GrammarProposer(), universe, negatives=negatives, settings=settings, fallback=fallback
        )
    if checkpoint is None:
        raise SystemExit(f"--learner {name} needs --checkpoint")
    ckpt = load_checkpoint(checkpoint)
    if ckpt["negatives"] != negatives:
        raise SystemExit(f"{checkpoint} was trained with negatives={ckpt['negatives']}")
    if (name == "no_holes") == ckpt["proposer"]["holes"]:
        raise SystemExit(f"{checkpoint}: holes={ckpt['proposer']['holes']} is not {name}")
    return learner_from_checkpoint(ckpt, bank.path, k=k)


def measure(learner, name: str, bank, split: str, negatives: str, k: int, episodes: int) -> dict:
    """One record: the learner's mAP and CBA and the oracles' on episodes 0..N-1 of the
    seed-0 test stream, its recall at K, fallback rates and time per episode."""
    from _report import git_commit

    from curi.episodes import EpisodeSpec
    from curi.models.propose_verify_train import evaluate_learner

    t0 = time.perf_counter()
    got = evaluate_learner(learner, bank, EpisodeSpec(split, "test", negatives, size=episodes))
    return {
        "learner": name,
        "bank": bank.config["name"],
        "split": split,
        "negatives": negatives,
        "k": k,
        "episodes": episodes,
        **{key: got[key] for key in ("map", "cba", "map_strong", "map_weak")},
        "share_of_strong": got["map"] / got["map_strong"],
        "recall_at_k": got["recall_at_k"],
        "fallback_rate": got["fallback_rate"],
        "model_fallback_rate": got["fallback_model_rate"],
        "map_answered": got["map_answered"],
        "ms_per_episode": got["ms_per_episode"],
        "wall_s": time.perf_counter() - t0,
        "commit": git_commit() or "unknown",
    }


def append(record: dict, path: Path) -> None:
    """Add `record` to the JSON list at `path` (atomically), replacing one of the same key."""
    from curi.atomic import write_text

    rows = json.loads(path.read_text()) if path.exists() else []
    if not isinstance(rows, list):
        raise SystemExit(f"{path} is not a JSON list")
    key = tuple(record[k] for k in KEYS)
    rows = [r for r in rows if tuple(r.get(k) for k in KEYS) != key] + [record]
    write_text(path, json.dumps(rows, indent=1) + "\n")


def render(rows: list[dict], doc: Path = DOC, chart: Path = CHART) -> None:
    """Replace the marked block of docs/learners.md with the records (one table of the
    splits, one of the K curve) and draw the K curve."""
    from _report import replace_block

    head = (
        "| learner | bank | split | K | episodes | mAP | CBA | strong | weak | share of strong "
        "| recall at K | fallback (model) | ms/episode |\n" + "|---" * 13 + "|"
    )
    lines = [head]
    order = {name: i for i, name in enumerate(LEARNERS)}
    for r in sorted(rows, key=lambda r: (r["bank"], r["split"], r["k"], order[r["learner"]])):
        lines.append(
            f"| {r['learner']} | {r['bank']} | {r['split']} | {r['k']:,} | {r['episodes']:,} "
            f"| {r['map']:.3f} | {r['cba']:.3f} | {r['map_strong']:.3f} | {r['map_weak']:.3f} "
            f"| {r['share_of_strong']:.2f} | {r['recall_at_k']:.2f} "
            f"| {r['fallback_rate']:.2f} ({r['model_fallback_rate']:.2f}) "
            f"| {r['ms_per_episode']:.0f} |"
        )
    try:
        replace_block(doc, MARK, "\n".join(lines))
        replace_block(doc, TARGETS_MARK, targets_table(rows))
    except ValueError as e:
        raise SystemExit(str(e)) from None
    _chart(rows, chart)


def targets_table(rows: list[dict], bank: str = "default", k: int = 1024) -> str:
    """Per split, the learner's share of the strong oracle's mAP against its target, beside the
    grammar-only reference and the weak oracle, on the most episodes both learners were measured
    on (hard negatives, `bank`, `k`)."""
    lines = [
        "| split | episodes | propose_verify share (mAP) | grammar_only share (mAP) | weak oracle "
        "| target share | share reached? | above weak? | ahead of grammar_only by |",
        "|---" * 9 + "|",
    ]
    got = {}
    for r in rows:
        if (r["bank"], r["negatives"], r["k"]) == (bank, "hard", k):
            got[(r["learner"], r["split"], r["episodes"])] = r
    for split, target in TARGET_SHARE.items():
        both = [
            n
            for (name, s, n) in got
            if name == "propose_verify" and s == split and ("grammar_only", s, n) in got
        ]
        if not both:
            lines.append(f"| {split} | not measured |  |  |  | {target:.2f} |  |  |  |")
            continue
        n = max(both)
        pv, go = got[("propose_verify", split, n)], got[("grammar_only", split, n)]
        above = (
            "(its training concepts)"
            if split == "instance_iid"
            else ("yes" if pv["map"] > pv["map_weak"] else "no")
        )
        lines.append(
            f"| {split} | {n:,} | {pv['share_of_strong']:.3f} ({pv['map']:.3f}) "
            f"| {go['share_of_strong']:.3f} ({go['map']:.3f}) | {pv['map_weak']:.3f} "
            f"| {target:.2f} | {'yes' if pv['share_of_strong'] >= target else 'no'} | {above} "
            f"| {pv['map'] - go['map']:+.3f} |"
        )
    return "\n".join(lines)


def _chart(rows: list[dict], path: Path) -> None:
    """mAP against K per learner on each (bank, split) with several K, the oracles as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[tuple, list[dict]] = {}
    for r in rows:
        curves.setdefault((r["bank"], r["split"], r["episodes"], r["learner"]), []).append(r)
    curves = {key: rs for key, rs in curves.items() if len(rs) > 2}
    if not curves:
        return
    bank, split, n, _ = max(curves, key=lambda key: key[2])  # the most episodes
    curves = {key: rs for key, rs in curves.items() if key[:3] == (bank, split, n)}
    fig, ax = plt.subplots(figsize=(6, 4))
    for (_, _, _, learner), rs in sorted(curves.items()):
        rs = sorted(rs, key=lambda r: r["k"])
        ax.plot([r["k"] for r in rs], [r["map"] for r in rs], "o-", label=learner)
    r0 = rs[0]
    bank, split, n = r0["bank"], r0["split"], r0["episodes"]
    ax.axhline(r0["map_strong"], color="k", ls="--", lw=1, label="strong oracle")
    ax.axhline(r0["map_weak"], color="gray", ls=":", lw=1, label="weak oracle")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("K (programs executed per episode)")
    ax.set_ylabel("test mAP")
    ax.set_title(f"{bank} bank, {split}, hard negatives, {n} episodes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learner", choices=LEARNERS)
    ap.add_argument("--checkpoint", help="a propose_verify checkpoint (curi train learner=...)")
    ap.add_argument("--bank", default="default", help="a preset name or a bank folder")
    ap.add_argument("--split", nargs="+", default=["concept_iid"])
    ap.add_argument("--negatives", default="hard", choices=("hard", "easy"))
    ap.add_argument("--k", type=int, nargs="+", default=[1024])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--render", action="store_true", help="only render the records in the docs")
    args = ap.parse_args(argv)
    if args.render:
        render(json.loads(args.results.read_text()))
        return 0
    if args.learner is None:
        ap.error("--learner is required (or --render)")
    if args.episodes < 1 or min(args.k) < 1:
        ap.error("--episodes and --k must be at least 1")

    import torch

    from curi.bank import load_bank
    from curi.bank_config import default_data_dir

    torch.set_num_threads(1)
    path = Path(args.bank)
    bank = load_bank(path if path.is_dir() else default_data_dir() / args.bank)
    for split in args.split:
        for k in args.k:
            learner = build_learner(args.learner, bank, args.checkpoint, args.negatives, k)
            rec = measure(learner, args.learner, bank, split, args.negatives, k, args.episodes)
            if args.checkpoint:
                rec["checkpoint_split"] = str(split)
            append(rec, args.results)
            print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

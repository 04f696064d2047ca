"""Scoring a model with `curi.models.score_model`: the embedding path (``embed`` / ``compare``:
the evaluation set embedded once per split) against the per-episode ``predict`` path (the
whole evaluation set rendered and embedded again in every episode), on the same episodes and
with the same network, so the metrics agree and only the time differs.

    python benchmarks/bench_scoring.py --bank tiny --modality image [--episodes 200]
        [--repeats 3] [--predict-repeats 1] [--data-dir DIR]

Models: a small conv net (two stride-2 3x3 convs, 16 and 32 channels, global average pooling)
on 60 x 40 images, or a per-object MLP (20 -> 64 -> 64, summed over real objects) on the schema;
prototypical log-odds (squared distance to the negative prototype minus the positive's). One
torch thread. Prints the median wall time of each path (score_model called and returned, no
oracles) and their ratio."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _report import machine
from torch import nn

from curi import build_bank, load_bank
from curi.models import score_model

MODALITIES = {"image": {"name": "image", "width": 60, "height": 40}, "schema": {"name": "schema"}}


def network(modality: str) -> nn.Module:
    torch.manual_seed(0)
    if modality == "image":  # (N, 3, 40, 60) -> (N, 32)
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64))


def model(modality: str):
    """``embed``, ``compare`` and the ``predict`` made of them, for one modality."""
    net = network(modality).eval()

    def embed(inputs) -> torch.Tensor:
        if isinstance(inputs, tuple):  # schema: objects (N, 5, 20), mask (N, 5) -> (N, 64)
            x, mask = inputs
            return (net(x) * mask.unsqueeze(-1)).sum(1)
        return net(inputs)

    def compare(support, labels, targets) -> torch.Tensor:
        labels = torch.as_tensor(labels, dtype=torch.bool)
        pos, neg = support[labels].mean(0), support[~labels].mean(0)
        return ((targets - neg) ** 2).sum(1) - ((targets - pos) ** 2).sum(1)

    def predict(support, labels, targets) -> torch.Tensor:
        return compare(embed(support), labels, embed(targets))

    return embed, compare, predict


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bank", default="tiny")
    ap.add_argument("--modality", choices=sorted(MODALITIES), default="image")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--predict-repeats", type=int, default=None, help="default: --repeats")
    ap.add_argument("--data-dir", type=Path, default=None, help="default: a temporary folder")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        bank = load_bank(build_bank(args.bank, args.data_dir or Path(tmp), progress=False))
        embed, compare, predict = model(args.modality)
        kw = {
            "modality": MODALITIES[args.modality],
            "episodes": args.episodes,
            "threshold": 0.0,
            "oracles": False,
        }
        fast, by_embed = timed(
            lambda: score_model(None, bank, "concept_iid", embed=embed, compare=compare, **kw),
            args.repeats,
        )
        slow, by_predict = timed(
            lambda: score_model(predict, bank, "concept_iid", **kw),
            args.predict_repeats or args.repeats,
        )
    a, b = by_embed["splits"][0], by_predict["splits"][0]
    np.testing.assert_allclose([a["map"], a["cba"]], [b["map"], b["cba"]], rtol=1e-6)
    print(
        f"Machine: {machine()}. {args.episodes} episodes of concept_iid (test), bank "
        f"{args.bank} ({len(bank.eval_ids):,} evaluation scenes), {args.modality}; median of "
        f"{args.repeats} (embed) and {args.predict_repeats or args.repeats} (predict) runs; "
        f"same metrics (map {a['map']:.4f}, cba {a['cba']:.4f})."
    )
    print("\n| path | seconds | ratio |\n|---|---|---|")
    print(f"| predict (per episode) | {slow:.1f} | {slow / fast:.1f} |")
    print(f"| embed + compare | {fast:.1f} | 1 |")


if __name__ == "__main__":
    main()

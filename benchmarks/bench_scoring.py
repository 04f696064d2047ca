"""Scoring a model with `curi.models.score_in_modality`: the embedding path (``embed`` /
``compare``: the evaluation set embedded once per split) against the per-episode ``predict``
path (the whole evaluation set rendered and embedded again in every episode), on the same
episodes and
with the same network, so the metrics agree and only the time differs.

    python benchmarks/bench_scoring.py --bank tiny --modality image [--episodes 200]
        [--repeats 3] [--predict-repeats 1] [--predict-episodes K] [--data-dir DIR]

``--predict-episodes K`` times the predict path on the first K episodes only (the default
bank's 26,991 images per episode make 200 of them take most of an hour); the embedding path is
then timed on both K and ``--episodes``, the metrics are compared on the K episodes, and the
per-episode times are printed beside the totals.

Models: a small conv net (two stride-2 3x3 convs, 16 and 32 channels, global average pooling)
on 60 x 40 images, or a per-object MLP (20 -> 64 -> 64, summed over real objects) on the schema;
prototypical log-odds (squared distance to the negative prototype minus the positive's). One
torch thread. Prints the median wall time of each path (score_in_modality called and returned, no
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
from curi.models import score_in_modality

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
    ap.add_argument("--predict-episodes", type=int, default=None, help="default: --episodes")
    ap.add_argument("--data-dir", type=Path, default=None, help="default: a temporary folder")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        bank = load_bank(build_bank(args.bank, args.data_dir or Path(tmp), progress=False))
        embed, compare, predict = model(args.modality)
        kw = {"modality": MODALITIES[args.modality], "threshold": 0.0, "oracles": False}

        def by_embed(episodes: int):
            return score_in_modality(
                None, bank, "concept_iid", embed=embed, compare=compare, episodes=episodes, **kw
            )

        k = args.predict_episodes or args.episodes
        fast, embedded = timed(lambda: by_embed(args.episodes), args.repeats)
        fast_k, embedded_k = (
            (fast, embedded) if k == args.episodes else timed(lambda: by_embed(k), args.repeats)
        )
        slow, predicted = timed(
            lambda: score_in_modality(predict, bank, "concept_iid", episodes=k, **kw),
            args.predict_repeats or args.repeats,
        )
    a, b = embedded_k["splits"][0], predicted["splits"][0]
    np.testing.assert_allclose([a["map"], a["cba"]], [b["map"], b["cba"]], rtol=1e-6)
    print(
        f"Machine: {machine()}. concept_iid (test), bank {args.bank} "
        f"({len(bank.eval_ids):,} evaluation scenes), {args.modality}; median of "
        f"{args.repeats} (embed) and {args.predict_repeats or args.repeats} (predict) runs; "
        f"same metrics on {k} episodes (map {a['map']:.4f}, cba {a['cba']:.4f})."
    )
    print("\n| path | episodes | seconds | seconds per episode |\n|---|---|---|---|")
    print(f"| predict (per episode) | {k} | {slow:.1f} | {slow / k:.2f} |")
    if k != args.episodes:
        print(f"| embed + compare | {k} | {fast_k:.1f} | {fast_k / k:.2f} |")
    print(f"| embed + compare | {args.episodes} | {fast:.1f} | {fast / args.episodes:.2f} |")
    print(f"\nRatio on {k} episodes: {slow / fast_k:.1f}")


if __name__ == "__main__":
    main()

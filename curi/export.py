"""Exporting episodes with their scene records (JSON lines, optionally gzip-compressed) and a
small dataset card, so they can be re-rendered in any modality later."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from curi.episodes import EpisodeSampler
from curi.splits import Split

__all__ = ["export_episodes", "read_episodes"]


def _open(path: Path, mode: str, *, compressed: bool | None = None):
    compressed = path.suffix == ".gz" if compressed is None else compressed
    return gzip.open(path, mode + "t") if compressed else open(path, mode)


def export_episodes(
    bank,
    split: Split,
    subset: str,
    out: str | Path,
    *,
    n: int,
    negatives: str = "hard",
    query_negatives: str | None = None,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, Path]:
    """Write episodes 0..n-1 of (split, subset) to `out` (``.jsonl`` or ``.jsonl.gz``), one JSON
    object per line with ids, labels, the concept and the scene records; and a dataset card
    beside it (``<out>.card.md``). Written to a temporary name, then renamed into place."""
    from tqdm import tqdm

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sampler = EpisodeSampler(
        bank, split, subset, negatives, seed=seed, query_negatives=query_negatives, size=n
    )
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    with _open(tmp, "w", compressed=out.suffix == ".gz") as f:
        for i in tqdm(range(n), desc="episodes", disable=not progress):
            f.write(json.dumps(sampler[i].to_dict()) + "\n")
    tmp.rename(out)
    card = out.with_name(out.name + ".card.md")
    card.write_text(
        f"# CURI episodes: {split.name} / {subset}\n\n"
        f"- episodes: {n} (indices 0..{n - 1} of `EpisodeSampler`)\n"
        f"- negatives: {negatives} (query: {sampler.query_negatives}); seed: {seed}\n"
        f"- bank: {bank.path} ({len(bank)} concepts, {bank.num_scenes} scenes, "
        f"curi {bank.manifest['version']})\n"
        f"- split sizes: {split.sizes()}\n"
        "- format: one JSON object per line: `concept_text` (canonical postfix), `support_ids`, "
        "`support_labels`, `query_ids`, `query_labels` (1 positive, 0 negative, positives "
        "first), `support_records` / `query_records` (every object's shape, color, material, "
        "size, location bins x / y, 3D position, rotation and pixel centre).\n"
        "- regenerate exactly: the same bank config, split, subset, negatives and seed.\n"
    )
    return {"episodes": out, "card": card}


def read_episodes(path: str | Path):
    """Yield the episode dicts of an exported file."""
    with _open(Path(path), "r") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)

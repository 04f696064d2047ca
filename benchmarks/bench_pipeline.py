"""The training data pipeline alone (no model), per modality, in episodes per second: the old
per-record path (each episode's scene records built as dicts, packed and rendered; kept here as
`records_path` to measure it) against the record-free path of `curi train` (compact arrays,
`pack_scenes`, one `Renderer.render_packed` call per batch), and the compact arrays alone (what
workers produce when a GPU renders).

    python benchmarks/bench_pipeline.py [--modalities schema image sound] [--batches 3]
        [--device cpu] [--bank tiny] [--data-dir DIR] [--write]

One process, one torch thread: the CPU-time rate is the per-core cost even on a busy machine
(wall-clock rates are printed beside it). ``--write`` replaces the ``pipeline-<device>``
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from _report import machine, write_section

from curi.bank import open_bank
from curi.episodes import EpisodeSampler
from curi.models.config import TrainSettings
from curi.models.data import EpisodeBatches, collate_episodes, concept_max_len, make_renderer
from curi.models.decoder import ConceptTokenizer
from curi.splits import make_split


def records_path(sampler, renderer, tok, max_len: int, indices) -> dict:
    """The pipeline as it was: episode records as dicts, rendered per batch, one item dict per
    episode, then stacked (`curi.models.data.EpisodeDataset` before the record-free path)."""
    episodes = [sampler[int(i)] for i in indices]
    s, q = len(episodes[0].support_ids), len(episodes[0].query_ids)
    ids = np.concatenate([np.r_[e.support_ids, e.query_ids] for e in episodes])
    out = renderer.render(sampler.bank.scene_records(ids))
    data = renderer.to_input(out.data).reshape(len(episodes), s + q, *renderer.input_shape)
    mask = None if out.mask is None else out.mask.reshape(len(episodes), s + q, -1)
    tokens = tok.batch([e.concept_text for e in episodes], max_len=max_len)
    items = []
    for b, e in enumerate(episodes):
        item = {
            "support": data[b, :s],
            "query": data[b, s:],
            "support_labels": torch.from_numpy(e.support_labels.astype(np.int64)),
            "query_labels": torch.from_numpy(e.query_labels.astype(np.int64)),
            "concept_tokens": tokens[b],
            "concept": torch.tensor(e.concept, dtype=torch.long),
            "index": torch.tensor(e.index, dtype=torch.long),
        }
        if mask is not None:
            item["support_mask"], item["query_mask"] = mask[b, :s], mask[b, s:]
        items.append(item)
    return collate_episodes(items)


def _rate(fn, batches: list[list[int]], batch: int, sync) -> tuple[float, float]:
    """(episodes per CPU second, per wall second), medians over `batches` after a warm-up."""
    fn(batches[0])
    walls, cpus = [], []
    for idx in batches[1:]:
        sync()
        w, c = time.perf_counter(), time.process_time()
        fn(idx)
        sync()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return batch / statistics.median(cpus), batch / statistics.median(walls)


def bench(bank, name: str, batch: int, n: int, device: str) -> dict[str, tuple[float, float]]:
    modality = {"name": name, "device": device}
    split = make_split(bank, "concept_iid")
    sampler = EpisodeSampler(bank, split, "train", "hard", seed=0, size=100_000)
    renderer, tok, max_len = make_renderer(modality), ConceptTokenizer(), concept_max_len(bank)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(sampler), batch).tolist() for _ in range(n + 1)]
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    rendered = EpisodeBatches(sampler, modality, max_len=max_len)
    compact = EpisodeBatches(sampler, modality, max_len=max_len, render=False)
    return {
        "records (before)": _rate(
            lambda i: records_path(sampler, renderer, tok, max_len, i), batches, batch, sync
        ),
        "record-free (after)": _rate(rendered.__getitems__, batches, batch, sync),
        "compact arrays only": _rate(compact.__getitems__, batches, batch, sync),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modalities", nargs="+", default=["schema", "image", "sound"])
    ap.add_argument("--batches", type=int, default=3, help="timed batches (after a warm-up)")
    ap.add_argument("--batch", type=int, default=None, help="episodes a batch (default: train)")
    ap.add_argument("--device", default="cpu", help="render device (cpu or cuda)")
    ap.add_argument("--bank", default="tiny")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    torch.set_num_threads(1)
    bank = open_bank(args.bank, args.data_dir, progress=False, build=True)
    rows = [
        "| modality | episodes / batch | path | episodes / CPU s | episodes / s (wall) |",
        "|---|---|---|---|---|",
    ]
    for name in args.modalities:
        batch = args.batch or TrainSettings().batch_for(name)
        for path, (cpu, wall) in bench(bank, name, batch, args.batches, args.device).items():
            rows.append(f"| {name} | {batch} | {path} | {cpu:,.1f} | {wall:,.1f} |")
            print(rows[-1], flush=True)
    body = (
        f"Machine: {machine()}; render device {args.device}; one process, one torch thread; "
        f"bank `{args.bank}`; median of {args.batches} batches after a warm-up.\n\n"
        + "\n".join(rows)
    )
    print(body)
    if args.write:
        write_section(f"pipeline-{args.device}", body)


if __name__ == "__main__":
    main()

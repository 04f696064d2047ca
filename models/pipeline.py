"""The episode pipeline without per-scene records (docs/benchmarks.md, "data pipeline"):
episodes as compact arrays (scene ids, labels, concept tokens: what DataLoader workers
produce), their scenes gathered from the bank's columnar store (`pack_scenes`) and rendered a
whole batch at once (`Renderer.render_packed`), or read from a render cache, and, when that
happens on a GPU, rendered on a side CUDA stream while the model step runs (`RenderAhead`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from curi.episodes import EpisodeSampler
from curi.models.decoder import ConceptTokenizer
from curi.renderers import Renderer
from curi.renderers.base import pack_scenes
from curi.scenes import Scenes

__all__ = [
    "LiveScenes",
    "host_ids",
    "RenderAhead",
    "SceneSource",
    "compact_batch",
    "pass_batch",
    "render_batch",
]


def compact_batch(
    sampler: EpisodeSampler,
    indices: Sequence[int],
    *,
    tokenizer: ConceptTokenizer,
    max_len: int,
) -> dict[str, Tensor]:
    """Episodes `indices` of `sampler` as arrays: ``ids`` (B, S + Q) int64 scene ids (support
    then query), ``support_labels`` (B, S) and ``query_labels`` (B, Q) int64, ``concept_tokens``
    (B, L) int64, ``concept`` and ``index`` (B,) int64. A pure function of the indices."""
    eps = [sampler[int(i)] for i in indices]

    def stack(arrays) -> Tensor:
        return torch.from_numpy(np.stack(arrays).astype(np.int64))

    return {
        "ids": stack([np.r_[e.support_ids, e.query_ids] for e in eps]),
        "support_labels": stack([e.support_labels for e in eps]),
        "query_labels": stack([e.query_labels for e in eps]),
        "concept_tokens": tokenizer.batch([e.concept_text for e in eps], max_len=max_len),
        "concept": torch.tensor([e.concept for e in eps], dtype=torch.long),
        "index": torch.tensor([e.index for e in eps], dtype=torch.long),
    }


class SceneSource(Protocol):
    """Scene ids (a numpy array, or an int64 tensor on any device) -> model inputs:
    ``(x (N, *input_shape), mask (N, 5) or None)`` on `device`; deterministic, so the same
    ids give the same tensors."""

    device: torch.device

    def __call__(self, ids: np.ndarray | Tensor) -> tuple[Tensor, Tensor | None]: ...


def host_ids(ids: np.ndarray | Tensor) -> np.ndarray:
    """Scene ids as an int64 numpy array (a tensor on a GPU is copied to the host)."""
    if isinstance(ids, Tensor):
        return ids.cpu().numpy()
    return np.asarray(ids, np.int64)


class LiveScenes:
    """Scenes rendered on demand: gathered from the columnar store and rendered as one batch.

    Args:
        scenes: the bank's scenes (`ConceptBank.scenes`).
        renderer: the modality's renderer (its device is where the tensors land).
    """

    def __init__(self, scenes: Scenes, renderer: Renderer) -> None:
        self.scenes, self.renderer = scenes, renderer
        self.device = torch.device(getattr(renderer, "device", "cpu"))

    def __call__(self, ids: np.ndarray | Tensor) -> tuple[Tensor, Tensor | None]:
        out = self.renderer.render_packed(pack_scenes(self.scenes, host_ids(ids)))
        return self.renderer.to_input(out.data), out.mask


def render_batch(compact: Mapping[str, Tensor], source: SceneSource) -> dict[str, Tensor]:
    """The batch dict `ProtoNet` reads (`collate_episodes`' keys) from a `compact_batch`:
    every scene of the batch rendered in one call of `source` (on its device); labels, tokens
    and indices stay where they were (the CPU: the training step moves the batch).

    Returns:
        ``support`` (B, S, ...), ``query`` (B, Q, ...), the masks (B, S, 5) / (B, Q, 5) when
        the modality has them, and the compact batch's other keys.
    """
    ids = compact["ids"]
    b, n = ids.shape
    s = compact["support_labels"].shape[1]
    x, mask = source(ids.reshape(-1))
    x = x.reshape(b, n, *x.shape[1:])  # (B, S + Q, ...)
    out = {k: v for k, v in compact.items() if k != "ids"}
    out["support"], out["query"] = x[:, :s], x[:, s:]
    if mask is not None:
        mask = mask.reshape(b, n, -1)  # (B, S + Q, 5)
        out["support_mask"], out["query_mask"] = mask[:, :s], mask[:, s:]
    return out


def pass_batch(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Collate function of datasets whose ``__getitems__`` returns a whole batch."""
    return batch


class RenderAhead:
    """Render compact batches in this process as they are asked for (GPU renderers, the
    device sampler).

    On CUDA, each batch is made (taken from `batches`, which may draw it on the GPU, as
    `curi.models.device_batches` does) and rendered on a side stream: the model step of the
    previous batch, queued on the default stream before the next batch is asked for, runs on
    the GPU while this thread makes the next one (its own synchronisations wait for the side
    stream only); the default stream then waits for the side stream before it reads the
    batch. On the CPU it renders in order.

    Args:
        batches: compact batches (`compact_batch`), e.g. a DataLoader of them.
        source: scene ids -> tensors (`LiveScenes`, `curi.models.cache.CachedScenes`).
    """

    def __init__(self, batches: Iterable[Mapping[str, Tensor]], source: SceneSource) -> None:
        self.batches, self.source = batches, source
        dev = source.device
        self.stream = torch.cuda.Stream(dev) if dev.type == "cuda" else None

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        if self.stream is None:
            for compact in self.batches:
                yield render_batch(compact, self.source)
            return
        batches = iter(self.batches)
        while True:
            with torch.cuda.stream(self.stream):
                compact = next(batches, None)
                if compact is None:
                    return
                batch = render_batch(compact, self.source)
            main = torch.cuda.current_stream(self.stream.device)
            main.wait_stream(self.stream)
            for t in batch.values():
                if t.is_cuda:  # memory made on the side stream, read on the main one
                    t.record_stream(main)
            yield batch

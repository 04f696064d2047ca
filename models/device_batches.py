"""The training stream of ``train.sampler=device``: each step's episodes drawn by
`curi.models.device_sampler.DeviceEpisodeSampler` on the training device and turned into the
batch `ProtoNet` reads there. Schema scenes are rendered once for the whole bank and held on
the device (`DeviceScenes`: a step gathers rows, no CPU in the loop); image and sound scenes
are rendered from the drawn ids as with the DataLoader (`curi.models.pipeline.LiveScenes` with
``modality.device=cuda``, or a render cache). On CUDA every batch is drawn and rendered on a
side stream while the previous step runs (`curi.models.pipeline.RenderAhead`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

from curi.models.decoder import ConceptTokenizer
from curi.models.device_sampler import DeviceEpisodeSampler
from curi.models.pipeline import RenderAhead, SceneSource
from curi.renderers import Renderer
from curi.renderers.base import pack_scenes

__all__ = ["DeviceScenes", "DrawnEpisodes", "device_batches"]

log = logging.getLogger(__name__)

_RENDER_CHUNK = 65_536  # scenes rendered at once when a bank's inputs are built


class DeviceScenes:
    """The model inputs of every scene of a bank, rendered once and held on `device`: ids
    (a tensor there) -> ``(x (N, *input_shape), mask (N, K) or None)`` by gathering rows
    (a `curi.models.pipeline.SceneSource`). For small inputs: a schema scene is 5 x 20 floats,
    400 MB for a bank of a million scenes.

    Args:
        scenes: the bank's scenes (`ConceptBank.scenes`).
        renderer: the modality's renderer.
        device: where the inputs are held.
    """

    def __init__(self, scenes, renderer: Renderer, device: torch.device) -> None:
        self.device = torch.device(device)
        xs, masks = [], []
        for a in range(0, len(scenes), _RENDER_CHUNK):
            ids = np.arange(a, min(a + _RENDER_CHUNK, len(scenes)))
            out = renderer.render_packed(pack_scenes(scenes, ids))
            xs.append(renderer.to_input(out.data).to(self.device))
            if out.mask is not None:
                masks.append(out.mask.to(self.device))
        self.x = torch.cat(xs)  # (N, *input_shape)
        self.mask = torch.cat(masks) if masks else None  # (N, K)

    def __call__(self, ids: Tensor) -> tuple[Tensor, Tensor | None]:
        ids = torch.as_tensor(ids, device=self.device)
        return self.x[ids], None if self.mask is None else self.mask[ids]


class DrawnEpisodes:
    """The compact batches (`curi.models.pipeline.compact_batch`'s keys but ``index``) of
    steps ``start..stop``, drawn on the sampler's device: step t is
    ``sampler.sample(t, batch_size, rank=rank)`` with the concepts' tokens.

    Args:
        sampler: the device sampler.
        batch_size: episodes per step (and process).
        start, stop: the steps.
        rank: this process (DDP).
        max_len: width of the concept tokens.
    """

    def __init__(
        self,
        sampler: DeviceEpisodeSampler,
        batch_size: int,
        *,
        start: int,
        stop: int,
        rank: int = 0,
        max_len: int,
    ) -> None:
        self.sampler, self.batch_size = sampler, int(batch_size)
        self.start, self.stop, self.rank = int(start), int(stop), int(rank)
        concepts = sampler.reference.bank.concepts
        tokens = ConceptTokenizer().batch(list(concepts), max_len=max_len)  # (H, L)
        self.tokens = tokens.to(sampler.device)

    def __len__(self) -> int:
        return max(0, self.stop - self.start)

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        for step in range(self.start, self.stop):
            drawn = self.sampler.sample(step, self.batch_size, rank=self.rank)
            drawn["concept_tokens"] = self.tokens[drawn["concept"]]
            yield drawn


def device_batches(
    sampler: DeviceEpisodeSampler,
    source: SceneSource,
    batch_size: int,
    *,
    start: int,
    stop: int,
    rank: int = 0,
    max_len: int,
) -> RenderAhead:
    """The training batches of steps ``start..stop`` drawn on the device, rendered by
    `source` (`DeviceScenes` for schema), each made on a side stream on CUDA."""
    drawn = DrawnEpisodes(sampler, batch_size, start=start, stop=stop, rank=rank, max_len=max_len)
    return RenderAhead(drawn, source)

"""The training stream of ``train.sampler=device``: the steps' episodes drawn by
`curi.models.device_sampler.DeviceEpisodeSampler` on the training device (on CUDA, several
steps' at once: `steps_per_draw`) and turned into the batch `ProtoNet` reads there. Schema
scenes are rendered once for the whole bank and held on the device (`DeviceScenes`: a step
gathers rows, no CPU in the loop); image and sound scenes are rendered from the drawn ids as
with the DataLoader (`curi.models.pipeline.LiveScenes` with ``modality.device=cuda``, or a
render cache). On CUDA every batch is drawn and rendered on a side stream while the previous
step runs (`curi.models.pipeline.RenderAhead`)."""

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

__all__ = ["DRAW_EPISODES", "DeviceScenes", "DrawnEpisodes", "device_batches", "steps_per_draw"]

log = logging.getLogger(__name__)

_RENDER_CHUNK = 65_536  # scenes rendered at once when a bank's inputs are built
#: Training episodes drawn at once on CUDA (`steps_per_draw`).
DRAW_EPISODES = 4096


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
    steps ``start..stop``, drawn on the sampler's device, with the concepts' tokens.

    The episodes of `steps_per_draw` (K) steps are drawn at once: step t is slice t mod K of
    ``sampler.sample(t // K, K * batch_size, rank=rank)``, still a pure function of (seed,
    step, rank, batch size, K), so a run resumed mid-draw draws what it would have. A draw
    costs about the same kernel launches and host synchronisations whatever its size, so on
    a GPU a big draw spreads them over many steps (`steps_per_draw`).

    Args:
        sampler: the device sampler.
        batch_size: episodes per step (and process).
        start, stop: the steps.
        rank: this process (DDP).
        max_len: width of the concept tokens.
        steps_per_draw: K, the steps drawn at once (1: each step its own draw).
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
        steps_per_draw: int = 1,
    ) -> None:
        self.sampler, self.batch_size = sampler, int(batch_size)
        self.start, self.stop, self.rank = int(start), int(stop), int(rank)
        self.steps_per_draw = int(steps_per_draw)
        if self.steps_per_draw < 1:
            raise ValueError(f"steps_per_draw must be at least 1, got {steps_per_draw}")
        concepts = sampler.reference.bank.concepts
        tokens = ConceptTokenizer().batch(list(concepts), max_len=max_len)  # (H, L)
        self.tokens = tokens.to(sampler.device)

    def __len__(self) -> int:
        return max(0, self.stop - self.start)

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        k, b = self.steps_per_draw, self.batch_size
        block, drawn = None, {}
        for step in range(self.start, self.stop):
            if step // k != block:
                block = step // k
                drawn = self.sampler.sample(block, k * b, rank=self.rank)
                drawn["concept_tokens"] = self.tokens[drawn["concept"]]
            at = (step % k) * b
            yield {key: v[at : at + b] for key, v in drawn.items()}


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
    `source` (`DeviceScenes` for schema), each made on a side stream on CUDA, where the
    episodes of several steps are drawn at once (`steps_per_draw`)."""
    drawn = DrawnEpisodes(
        sampler,
        batch_size,
        start=start,
        stop=stop,
        rank=rank,
        max_len=max_len,
        steps_per_draw=steps_per_draw(batch_size, sampler.device),
    )
    return RenderAhead(drawn, source)


def steps_per_draw(batch_size: int, device: torch.device) -> int:
    """Steps whose episodes are drawn at once: on CUDA enough for about `DRAW_EPISODES`
    episodes (a draw's cost there is its kernel launches and host synchronisations, about
    the same for 256 episodes as for 4,096), 1 elsewhere (on a CPU a draw's cost grows with
    its episodes, and a bigger one only takes more memory)."""
    if torch.device(device).type != "cuda":
        return 1
    return max(1, DRAW_EPISODES // int(batch_size))

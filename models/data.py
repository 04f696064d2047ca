"""Episodes as tensors (paper Appendix E): a torch Dataset that renders `curi.EpisodeSampler`
episodes in the chosen modality on the fly (in DataLoader workers; a batch at once, without
per-scene records: `curi.models.pipeline`), its collate function, the whole-batch datasets of
the training stream, the step-seeded stream of training episode indices, and the chunked mAP
evaluation set.

`episode_dataset` is the public entry point for training one's own model; score it with
`curi.models.score_in_modality` and the same modality config (`curi.models.scoring`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, Sampler

from curi.bits import unpack_rows
from curi.episodes import EpisodeSampler
from curi.errors import ConfigError
from curi.models.decoder import ConceptTokenizer
from curi.models.encoders import ENCODERS
from curi.models.pipeline import LiveScenes, compact_batch, render_batch
from curi.renderers import Renderer, get_renderer
from curi.renderers.base import pack_scenes
from curi.rng import derive_rng

__all__ = [
    "EpisodeBatches",
    "EpisodeDataset",
    "EvalSceneDataset",
    "StepBatchSampler",
    "collate_episodes",
    "concept_max_len",
    "encoder_options",
    "episode_dataset",
    "eval_labels",
    "make_renderer",
    "renders_on_cuda",
]

log = logging.getLogger(__name__)


def make_renderer(modality: Mapping | str) -> Renderer:
    """The renderer of a modality config (``name`` plus the renderer's options, as in
    ``conf/modality/<name>.yaml``).

    Raises:
        ConfigError: unknown modality or a bad option.
    """
    opts = {"name": modality} if isinstance(modality, str) else dict(modality)
    if "name" not in opts:
        raise ConfigError(f"a modality config needs a name (schema, image, sound); got {opts}")
    device = str(opts.get("device", "cpu"))
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"modality.device={device} but CUDA is not available; use modality.device=cpu"
        )
    return get_renderer(opts.pop("name"), **opts)  # a bad name or option: ConfigError


def renders_on_cuda(modality: Mapping) -> bool:
    """True when the modality's renderer runs on a GPU: it must then render in the main
    process (``num_workers=0``; CUDA does not survive a fork) and its tensors stay there."""
    return str(modality.get("device", "cpu")).startswith("cuda")


def encoder_options(renderer: Renderer) -> dict:
    """Keyword options of the encoder that reads `renderer`'s output: the encoder registered
    under the renderer's name, sized for its `Renderer.input_shape` (`Encoder.sized_for`).

    Raises:
        ConfigError: no encoder is registered under the renderer's name.
    """
    return ENCODERS.get(renderer.name).sized_for(renderer.input_shape)


def concept_max_len(bank) -> int:
    """Fixed width of concept token tensors: the bank's longest concept plus ``<eos>``."""
    return max(len(c.split()) for c in bank.concepts) + 1


class EpisodeDataset(Dataset):
    """Episodes of an `EpisodeSampler`, rendered: item i is a dict of tensors of episode i.

    Keys: ``support`` (S, *item) and ``query`` (Q, *item) model inputs, ``support_mask`` /
    ``query_mask`` (S, 5) / (Q, 5) bool for per-object modalities (schema, unless its
    ``mask_channel`` option folds the mask into the inputs as a 21st feature), ``support_labels``
    / ``query_labels`` (S,) / (Q,) int64 (1 = positive), ``concept_tokens`` (L,) int64 padded
    to a fixed `max_len`, ``concept`` and ``index`` int64 scalars.

    Items are a pure function of the index (episodes are, and rendering is deterministic), so
    batches are identical whatever the number of DataLoader workers. The renderer is built
    lazily in each process; tensors are on its device (the CPU, unless the modality renders on
    CUDA: then use ``num_workers=0``, see `renders_on_cuda`). A batch of indices
    (``__getitems__``, which the DataLoader calls with a batch sampler) renders all its scenes
    in one renderer call, gathered from the bank's columnar scenes (`pack_scenes`).

    Args:
        sampler: the episodes.
        modality: renderer config (``name`` and options).
        tokenizer: concept tokenizer (default `ConceptTokenizer()`).
        max_len: width of ``concept_tokens`` (default `concept_max_len` of the bank).
    """

    def __init__(
        self,
        sampler: EpisodeSampler,
        modality: Mapping | str,
        *,
        tokenizer: ConceptTokenizer | None = None,
        max_len: int | None = None,
    ) -> None:
        self.sampler = sampler
        self.modality = {"name": modality} if isinstance(modality, str) else dict(modality)
        self.name = str(self.modality.get("name"))
        self.tokenizer = tokenizer or ConceptTokenizer()
        self.max_len = concept_max_len(sampler.bank) if max_len is None else int(max_len)
        self._renderer: Renderer | None = None
        make_renderer(self.modality)  # fail now, not in a worker, on a bad config

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_renderer"] = None  # rebuilt in the worker
        return state

    @property
    def renderer(self) -> Renderer:
        if self._renderer is None:
            self._renderer = make_renderer(self.modality)
        return self._renderer

    def __len__(self) -> int:
        return len(self.sampler)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Tensor]]:
        if len(indices) == 0:
            return []
        batch = self.batch(indices)
        return [{k: v[b] for k, v in batch.items()} for b in range(len(indices))]

    def batch(self, indices: Sequence[int]) -> dict[str, Tensor]:
        """Episodes `indices` rendered and stacked (what `collate_episodes` of their items
        gives): sampled as compact arrays, their scenes gathered from the bank's columnar
        store and rendered in one `Renderer.render_packed` call."""
        compact = compact_batch(
            self.sampler, indices, tokenizer=self.tokenizer, max_len=self.max_len
        )
        return render_batch(compact, LiveScenes(self.sampler.bank.scenes, self.renderer))


class EpisodeBatches(Dataset):
    """The training stream's datasets: ``__getitems__`` returns a whole batch (use
    `pass_batch` as the collate function), rendered (`EpisodeDataset.batch`; workers render
    on the CPU) or, with ``render=False``, compact (`compact_batch`: scene ids, labels, tokens
    for the main process to render on the GPU or read from a render cache, `RenderAhead`).

    Args:
        sampler: the episodes.
        modality: renderer config (``name`` and options).
        max_len: width of ``concept_tokens``.
        render: render in the process that loads (else compact arrays only).
    """

    def __init__(
        self, sampler: EpisodeSampler, modality: Mapping | str, *, max_len: int, render: bool = True
    ) -> None:
        self.episodes = EpisodeDataset(sampler, modality, max_len=max_len)
        self.render = bool(render)

    def __len__(self) -> int:
        return len(self.episodes)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return self.__getitems__([i])

    def __getitems__(self, indices: Sequence[int]) -> dict[str, Tensor]:
        if self.render:
            return self.episodes.batch(indices)
        e = self.episodes
        return compact_batch(e.sampler, indices, tokenizer=e.tokenizer, max_len=e.max_len)


def episode_dataset(
    bank,
    split,
    subset: str = "train",
    *,
    modality: Mapping | str = "schema",
    negatives: str = "hard",
    seed: int = 0,
    size: int | None = None,
    query_negatives: str | None = None,
) -> EpisodeDataset:
    """Rendered episodes of one split as a torch `Dataset`, for any model.

    Item i is episode i of ``EpisodeSampler(bank, split, subset, negatives, seed)`` (support
    and query sets in a seeded random order, labels alongside) rendered as `modality`: see
    `EpisodeDataset` for the keys. Use it with ``DataLoader(ds, batch_size=B,
    collate_fn=collate_episodes, num_workers=W)``: batches are identical for every W.

    Workers fetch whole batches, and a small episode (schema) costs more to pass between
    processes than to make: on 2 cores, one episode per fetch loaded 867 episodes/s with no
    worker and 193 with two; batches of 32 with two workers, 2,175 (docs/benchmarks.md,
    `benchmarks/bench_loader.py`). Give workers batches of tens of episodes (or batch the
    indices yourself, as `EpisodeBatches` does), or load small episodes in the main process.

    Args:
        bank: a `ConceptBank` (`curi.load_bank`).
        split: a split name (`curi.list_splits`), a split config, or a `Split`.
        subset: ``train``, ``val`` or ``test``.
        modality: ``schema``, ``image`` or ``sound``, or a renderer config (``name`` plus the
            options of ``conf/modality/<name>.yaml``; ``{"name": "schema", "mask_channel":
            True}`` gives one (5, 21) tensor per scene, the mask as its last feature).
        negatives: ``hard`` or ``easy``.
        seed: the episodes' seed.
        size: number of episodes (default: the paper's size of the subset).
        query_negatives: as `curi.EpisodeSampler`.

    Raises:
        ConfigError: a bad split, subset, modality or option.
    """
    sampler = EpisodeSampler(
        bank, split, subset, negatives, seed=seed, size=size, query_negatives=query_negatives
    )
    return EpisodeDataset(sampler, modality)


def collate_episodes(items: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
    """Stack episode dicts into the batch dict `ProtoNet` takes: ``support`` (B, S, ...),
    ``support_labels`` (B, S), ``query`` (B, Q, ...), ``query_labels`` (B, Q), the masks
    (B, S, 5) / (B, Q, 5) when present, ``concept_tokens`` (B, L), ``concept`` and ``index``
    (B,)."""
    if not items:
        raise ValueError("cannot collate an empty batch")
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


class StepBatchSampler(Sampler[list[int]]):
    """The training stream of episode indices, a pure function of (seed, step): step t of
    process `rank` (of `world`) takes positions ``(t * world + rank) * batch_size + j`` of an
    endless sequence of seeded permutations of ``range(num_episodes)`` (one per epoch).

    A run resumed at step t therefore sees exactly the batches of an uninterrupted run, and
    DDP processes see disjoint episodes.

    Args:
        num_episodes: size of the episode pool (the train sampler's size).
        batch_size: episodes per step and process.
        seed: the seed.
        start: first step.
        stop: end step (exclusive).
        rank, world: this process and the number of processes.
    """

    def __init__(
        self,
        num_episodes: int,
        batch_size: int,
        *,
        seed: int,
        start: int,
        stop: int,
        rank: int = 0,
        world: int = 1,
    ) -> None:
        if num_episodes < 1 or batch_size < 1:
            raise ConfigError("the episode pool and the batch size must be positive")
        self.n, self.batch_size, self.seed = int(num_episodes), int(batch_size), int(seed)
        self.start, self.stop, self.rank, self.world = int(start), int(stop), rank, world
        self._orders: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return max(0, self.stop - self.start)

    def _order(self, epoch: int) -> np.ndarray:
        """The permutation of `epoch` (the last two are kept: a step may straddle epochs)."""
        if epoch not in self._orders:
            if len(self._orders) >= 2:
                self._orders.pop(min(self._orders))
            self._orders[epoch] = derive_rng(self.seed, "train-order", epoch).permutation(self.n)
        return self._orders[epoch]

    def indices(self, step: int) -> list[int]:
        """Episode indices of `step` for this process."""
        first = (step * self.world + self.rank) * self.batch_size
        pos = np.arange(first, first + self.batch_size, dtype=np.int64)
        out = np.empty(self.batch_size, np.int64)
        for epoch in np.unique(pos // self.n):
            sel = pos // self.n == epoch
            out[sel] = self._order(int(epoch))[pos[sel] % self.n]
        return out.tolist()

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.start, self.stop):
            yield self.indices(step)


class EvalSceneDataset(Dataset):
    """The bank's mAP evaluation set, rendered in chunks: item c is ``{"x": (C, *item),
    "mask": (C, 5) or absent}`` for evaluation scenes ``c * chunk`` to ``(c + 1) * chunk``.

    Use it with ``DataLoader(..., batch_size=None)`` so the chunks render in workers while the
    model embeds the previous ones; the scenes are rendered once per evaluation.

    Args:
        bank: the `ConceptBank`.
        modality: renderer config (``name`` and options).
        chunk: scenes per item.
    """

    def __init__(self, bank, modality: Mapping, *, chunk: int = 512) -> None:
        if chunk < 1:
            raise ConfigError(f"eval chunk must be >= 1, got {chunk}")
        self.bank, self.modality, self.chunk = bank, dict(modality), int(chunk)
        self.name = str(self.modality.get("name"))
        self.ids = np.asarray(bank.eval_ids, np.int64)
        self._renderer: Renderer | None = None
        make_renderer(self.modality)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_renderer"] = None
        return state

    def __len__(self) -> int:
        return -(-len(self.ids) // self.chunk)

    def __getitem__(self, c: int) -> dict[str, Tensor]:
        if not 0 <= c < len(self):
            raise IndexError(f"chunk {c} out of range [0, {len(self)})")
        if self._renderer is None:
            self._renderer = make_renderer(self.modality)
        ids = self.ids[c * self.chunk : (c + 1) * self.chunk]
        out = self._renderer.render_packed(pack_scenes(self.bank.scenes, ids))
        item = {"x": self._renderer.to_input(out.data)}
        if out.mask is not None:
            item["mask"] = out.mask
        return item


def eval_labels(rows: np.ndarray, concepts: np.ndarray, num_scenes: int) -> np.ndarray:
    """(B, M) bool ground truth of concepts on the evaluation set.

    Args:
        rows: (H, ceil(M / 64)) packed concept-major rows over the evaluation scenes
            (`curi.oracles.eval_set.EvalSet.rows`).
        concepts: (B,) concept indices.
        num_scenes: M, the size of the evaluation set.
    """
    return unpack_rows(rows[np.asarray(concepts, np.int64)], num_scenes)

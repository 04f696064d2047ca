"""Tests of the record-free episode pipeline (models/pipeline.py, `pack_scenes`,
`Renderer.render_packed`): the packed scenes equal the packed records, the batch render equals
the per-record render, and the training stream's batches are identical whatever the number of
DataLoader workers, rendered in the workers or in the main process."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import curi
from curi.errors import ConfigError
from curi.models import RunConfig, TrainSettings, make_renderer
from curi.models.data import EpisodeBatches, EpisodeDataset, StepBatchSampler
from curi.models.decoder import ConceptTokenizer
from curi.models.pipeline import LiveScenes, RenderAhead, compact_batch, pass_batch
from curi.models.runtime import start_runtime
from curi.models.train_batches import train_loader
from curi.renderers import Renderer, get_renderer, list_renderers
from curi.renderers.base import Packed, Rendered, pack_records, pack_scenes

SMALL_IMAGE = {"name": "image", "width": 40, "height": 24, "chunk": 7}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _assert_packed_equal(a: Packed, b: Packed) -> None:
    for f in dataclasses.fields(Packed):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x.dtype == y.dtype and x.shape == y.shape, f.name
        assert np.array_equal(x, y), f.name


def _assert_batches_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        assert torch.equal(a[k], b[k]), k


# --- packing ---------------------------------------------------------------------------------
def test_pack_scenes_equals_packing_the_records(tiny_bank):
    rng = np.random.default_rng(0)
    ids = np.r_[rng.integers(0, tiny_bank.num_scenes, 500), 0, tiny_bank.num_scenes - 1]
    got = pack_scenes(tiny_bank.scenes, ids)
    _assert_packed_equal(got, pack_records(tiny_bank.scene_records(ids)))
    assert got.valid.sum(1).min() >= 2 and not got.valid.all()  # padding is exercised
    # Any shape of ids is flattened; a slice of a Packed is the Packed of the slice.
    _assert_packed_equal(pack_scenes(tiny_bank.scenes, ids[:10].reshape(2, 5)), got[:10])
    # Records rebuilt from packed arrays pack back to the same arrays (the base fallback).
    _assert_packed_equal(pack_records(got.records()), got)
    for bad in (-1, tiny_bank.num_scenes):
        with pytest.raises(IndexError, match="scene ids must be in"):
            pack_scenes(tiny_bank.scenes, [0, bad])


class _RecordsOnly(Renderer):
    """A renderer with no packed path of its own: `render_packed` is the base default."""

    name = "records_only"

    @property
    def item_shape(self):
        return (5,)

    @property
    def value_range(self):
        return (0.0, 8.0)

    def render(self, records):
        rows = [[o["y"] for o in r["objects"]] + [0] * (5 - len(r["objects"])) for r in records]
        return Rendered(torch.tensor(rows, dtype=torch.float32))


@pytest.mark.parametrize("name", [*list_renderers(), "records_only"])
def test_render_packed_equals_render_of_the_records(tiny_bank, name):
    ids = np.arange(0, 4000, 250)  # 16 scenes
    records = tiny_bank.scene_records(ids)
    if name == "records_only":
        r = _RecordsOnly()
    else:
        r = get_renderer(
            name, **{k: v for k, v in SMALL_IMAGE.items() if name == "image" and k != "name"}
        )
    ref = r.render(records)
    got = r.render_packed(pack_scenes(tiny_bank.scenes, ids))
    torch.testing.assert_close(got.data, ref.data, atol=1e-6, rtol=0)
    assert (got.mask is None) == (ref.mask is None)
    if ref.mask is not None:
        assert torch.equal(got.mask, ref.mask)
    assert got.data.abs().sum() > 0  # not an empty render


# --- batches ---------------------------------------------------------------------------------
def _reference_items(bank, sampler, renderer, indices, max_len):
    """The per-record path: each episode's scene records rendered as they were before."""
    tok = ConceptTokenizer()
    out = []
    for i in indices:
        e = sampler[i]
        r = renderer.render(bank.scene_records(np.r_[e.support_ids, e.query_ids]))
        x = renderer.to_input(r.data)
        s = len(e.support_ids)
        item = {
            "support": x[:s],
            "query": x[s:],
            "support_labels": torch.from_numpy(e.support_labels.astype(np.int64)),
            "query_labels": torch.from_numpy(e.query_labels.astype(np.int64)),
            "concept_tokens": tok.batch([e.concept_text], max_len=max_len)[0],
            "concept": torch.tensor(e.concept),
            "index": torch.tensor(e.index),
        }
        if r.mask is not None:
            item["support_mask"], item["query_mask"] = r.mask[:s], r.mask[s:]
        out.append(item)
    return out


@pytest.mark.parametrize("modality", [{"name": "schema"}, SMALL_IMAGE])
def test_batch_path_renders_what_the_record_path_rendered(tiny_bank, modality):
    sampler = curi.EpisodeSampler(tiny_bank, "concept_iid", "train", "hard", seed=5, size=50)
    ds = EpisodeDataset(sampler, modality)
    indices = [3, 17, 42]
    ref = _reference_items(tiny_bank, sampler, make_renderer(modality), indices, ds.max_len)
    items = ds.__getitems__(indices)
    for got, want in zip(items, ref, strict=True):
        assert got.keys() == want.keys()
        for k in want:
            torch.testing.assert_close(got[k], want[k], atol=1e-6, rtol=0, msg=k)
    # The training stream's whole-batch dataset gives those items stacked.
    batch = EpisodeBatches(sampler, modality, max_len=ds.max_len).__getitems__(indices)
    _assert_batches_equal(batch, {k: torch.stack([it[k] for it in items]) for k in items[0]})
    # Compact arrays hold the episodes' scene ids in support-then-query order.
    compact = compact_batch(sampler, indices, tokenizer=ConceptTokenizer(), max_len=ds.max_len)
    e = sampler[17]
    assert compact["ids"][1].tolist() == np.r_[e.support_ids, e.query_ids].tolist()


def _stream(bank, modality, workers: int, *, in_main: bool) -> list[dict]:
    sampler = curi.EpisodeSampler(bank, "concept_iid", "train", "hard", seed=2, size=40)
    max_len = 16
    loader = DataLoader(
        EpisodeBatches(sampler, modality, max_len=max_len, render=not in_main),
        batch_sampler=StepBatchSampler(len(sampler), 3, seed=4, start=0, stop=4),
        collate_fn=pass_batch,
        num_workers=workers,
    )
    if in_main:
        loader = RenderAhead(loader, LiveScenes(bank.scenes, make_renderer(modality)))
    return list(loader)


@pytest.mark.parametrize("modality", [{"name": "schema"}, SMALL_IMAGE])
def test_stream_is_identical_for_every_worker_count_and_render_place(tiny_bank, modality):
    base = _stream(tiny_bank, modality, 0, in_main=False)
    assert len(base) == 4 and base[0]["support"].shape[:2] == (3, 25)
    assert not torch.equal(base[0]["support"], base[1]["support"])  # batches differ
    for workers in (0, 1, 2):
        for in_main in (False, True):
            if (workers, in_main) == (0, False):
                continue
            got = _stream(tiny_bank, modality, workers, in_main=in_main)
            for a, b in zip(base, got, strict=True):
                _assert_batches_equal(a, b)


def test_training_loader_batches_do_not_depend_on_workers(tiny_bank):
    """`curi train`'s own loader (the one the step loop reads) for 0, 1 and 2 workers."""
    rt = start_runtime("cpu")
    split = curi.make_split(tiny_bank, "concept_iid")
    runs = []
    for workers in (0, 1, 2):
        s = TrainSettings(steps=3, batch_size=4, num_workers=workers, train_episodes=64)
        run = RunConfig(bank=tiny_bank.config, train=s, device="cpu")
        renderer = make_renderer(run.modality)
        loader = train_loader(run, rt, tiny_bank, split, 4, start=1, renderer=renderer, max_len=20)
        runs.append(list(loader))
    assert len(runs[0]) == 2  # steps 1 and 2
    for other in runs[1:]:
        for a, b in zip(runs[0], other, strict=True):
            _assert_batches_equal(a, b)
    # Step 1's batch holds the episodes `StepBatchSampler` gives for step 1.
    want = StepBatchSampler(64, 4, seed=0, start=1, stop=2).indices(1)
    assert runs[0][0]["index"].tolist() == want


def test_speed_levers_are_checked_options():
    s = TrainSettings.from_mapping({"channels_last": True, "fused_adam": False, "compile": False})
    assert (s.channels_last, s.fused_adam, s.compile) == (True, False, False)
    assert TrainSettings().fused_adam and not TrainSettings().compile  # the defaults
    for key in ("channels_last", "fused_adam", "compile"):
        with pytest.raises(ConfigError, match=f"train.{key} must be true or false"):
            TrainSettings.from_mapping({key: "fast"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("modality", [{"name": "schema"}, SMALL_IMAGE])
def test_gpu_render_ahead_matches_the_cpu_batches(tiny_bank, modality):
    """On a GPU: batches rendered on a side stream in the main process (workers sampling only)
    equal the CPU-rendered ones (schema exactly; images up to float rounding, which may flip
    a few silhouette pixels), whatever the worker count."""
    cpu = _stream(tiny_bank, modality, 0, in_main=False)
    for workers in (0, 2):
        got = _stream(tiny_bank, dict(modality, device="cuda"), workers, in_main=True)
        for a, b in zip(cpu, got, strict=True):
            assert b["support"].is_cuda and not b["support_labels"].is_cuda
            for k in a:
                diff = (b[k].cpu().float() - a[k].float()).abs()
                if modality["name"] == "schema" or not a[k].is_floating_point():
                    assert diff.max() == 0, k
                else:
                    assert diff.mean() < 1e-3 and (diff > 1e-3).float().mean() < 1e-3, k

"""Tests of the render cache (models/cache.py): built once from the bank's scenes, it holds
their renders as uint8; training reads it; a cache made for another bank, or damaged, is
refused with a clear error unless a rebuild is asked for, and the rebuild serves the new bank."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

import curi
from curi.errors import ConfigError
from curi.models import RunConfig, TrainSettings, make_renderer, start_runtime
from curi.models.cache import CachedScenes, cache_identity, open_render_cache
from curi.models.pipeline import LiveScenes
from curi.models.train import train
from curi.models.train_batches import train_loader

IMAGE = {"name": "image", "width": 16, "height": 16}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def built(tiny_bank, tmp_path_factory):
    """A 16 x 16 image cache of the tiny bank (20,000 scenes, a few seconds)."""
    root = tmp_path_factory.mktemp("caches")
    renderer = make_renderer(IMAGE)
    return root, open_render_cache(root, tiny_bank, renderer, IMAGE, progress=False, chunk=4096)


class _OtherBank:
    """The tiny bank under the same name with other scenes (as after a rebuild with another
    seed): its manifest's scene checksums differ."""

    def __init__(self, bank) -> None:
        self._bank = bank
        files = {k: dict(v) for k, v in bank.manifest["files"].items()}
        files["scenes/position.npy"]["sha256"] = "0" * 64
        self.manifest = {**bank.manifest, "files": files}

    def __getattr__(self, name):
        return getattr(self._bank, name)


def test_cache_holds_the_rendered_scenes_as_uint8(tiny_bank, built):
    root, cache = built
    renderer = make_renderer(IMAGE)
    assert cache.array.shape == (tiny_bank.num_scenes, 3, 16, 16)
    assert cache.array.dtype == np.uint8 and cache.path.parent == root
    ids = np.array([0, 7, 12345, tiny_bank.num_scenes - 1])
    live, _ = LiveScenes(tiny_bank.scenes, renderer)(ids)
    want = (live * 255 + 0.5).clamp(0, 255).to(torch.uint8).numpy()
    assert np.array_equal(cache.array[ids], want)
    # Decoded on the device: the live render within half a uint8 step.
    x, mask = CachedScenes(cache, renderer, torch.device("cpu"))(ids)
    assert mask is None and x.shape == live.shape and x.dtype == torch.float32
    assert (x - live).abs().max() <= 0.5 / 255 + 1e-6
    header = json.loads((cache.path / "header.json").read_text())
    assert header == cache_identity(tiny_bank, renderer, IMAGE)
    assert header["renderer"]["width"] == 16 and header["renderer"]["antialias"] is True
    assert "device" not in header["renderer"]  # where it rendered does not matter


def test_an_existing_cache_is_reused_not_rebuilt(tiny_bank, built):
    root, cache = built
    stamp = (cache.path / "scenes.npy").stat().st_mtime_ns
    again = open_render_cache(root, tiny_bank, make_renderer(IMAGE), dict(IMAGE, chunk=3))
    assert again.path == cache.path  # the chunk does not change what is rendered
    assert (cache.path / "scenes.npy").stat().st_mtime_ns == stamp
    other = open_render_cache(root, tiny_bank, make_renderer(IMAGE), IMAGE, progress=False)
    assert other.path == cache.path
    # Other settings are another cache (another folder), never the first one.
    small = dict(IMAGE, antialias=False)
    ident = cache_identity(tiny_bank, make_renderer(small), small)
    assert ident["renderer"] != json.loads((cache.path / "header.json").read_text())["renderer"]


def test_cache_of_another_bank_or_damaged_is_refused_unless_rebuilt(tiny_bank, built, tmp_path):
    root, cache = built
    copy = tmp_path / "caches"
    shutil.copytree(root, copy)
    renderer = make_renderer(IMAGE)
    other = _OtherBank(tiny_bank)
    with pytest.raises(ConfigError, match=r"another bank.*scenes_sha256.*render_cache_rebuild"):
        open_render_cache(copy, other, renderer, IMAGE, progress=False)
    rebuilt = open_render_cache(copy, other, renderer, IMAGE, rebuild=True, progress=False)
    header = json.loads((rebuilt.path / "header.json").read_text())
    assert header["bank"]["scenes_sha256"]["scenes/position.npy"] == "0" * 64
    assert np.array_equal(rebuilt.array[:50], cache.array[:50])  # same scenes, same renders
    # Now the original bank is the stranger.
    with pytest.raises(ConfigError, match="another bank"):
        open_render_cache(copy, tiny_bank, renderer, IMAGE, progress=False)
    # A truncated array is damaged: refused, then rebuilt on request.
    npy = rebuilt.path / "scenes.npy"
    del rebuilt
    npy.write_bytes(npy.read_bytes()[:1000])
    with pytest.raises(ConfigError, match="damaged"):
        open_render_cache(copy, other, renderer, IMAGE, progress=False)
    killed = npy.with_name(".scenes.npy.tmp-999999999")  # left by a build that was killed
    killed.write_bytes(b"partial")
    fixed = open_render_cache(copy, other, renderer, IMAGE, rebuild=True, progress=False)
    assert np.array_equal(fixed.array, cache.array)
    assert not killed.exists()


def test_schema_is_not_cached(tiny_bank, tmp_path):
    with pytest.raises(ConfigError, match=r"schema ranges over .*leave train.render_cache unset"):
        open_render_cache(tmp_path, tiny_bank, make_renderer("schema"), {"name": "schema"})


def test_training_reads_the_cache(tiny_bank, built, tmp_path):
    root, cache = built
    renderer = make_renderer(IMAGE)
    split = curi.make_split(tiny_bank, "concept_iid")
    s = TrainSettings(
        steps=2,
        batch_size=2,
        train_episodes=16,
        log_every=1,
        eval_every=2,
        checkpoint_every=2,
        val_episodes=2,
        num_workers=0,
        lr=1e-3,
    )
    run = RunConfig(
        bank=tiny_bank.config, modality=IMAGE, pooling={"name": "avg"}, train=s, device="cpu"
    )
    rt = start_runtime("cpu")
    kw = {"start": 0, "renderer": renderer, "max_len": 20}
    live = list(train_loader(run, rt, tiny_bank, split, 2, **kw))
    read = list(train_loader(run, rt, tiny_bank, split, 2, **kw, cache=cache))
    for a, b in zip(live, read, strict=True):
        assert a.keys() == b.keys()
        for k in ("support", "query"):  # the cache fed these: the renders up to uint8 rounding
            diff = (a[k] - b[k]).abs().max()
            assert 0 < diff <= 0.5 / 255 + 1e-6, k
        for k in ("support_labels", "query_labels", "concept_tokens", "index"):
            assert torch.equal(a[k], b[k]), k
    # `train` with train.render_cache builds nothing new and trains from it.
    stamp = (cache.path / "scenes.npy").stat().st_mtime_ns
    cfg = dataclasses.replace(run, train=dataclasses.replace(s, render_cache=str(root)))
    summary = train(cfg, run_dir=tmp_path / "run", bank=tiny_bank, progress=False)
    assert summary["steps"] == 2 and np.isfinite(summary["val"]["map"])
    assert (cache.path / "scenes.npy").stat().st_mtime_ns == stamp
    with pytest.raises(ConfigError, match="render_cache_rebuild must be true or false"):
        TrainSettings.from_mapping({"render_cache": str(root), "render_cache_rebuild": "yes"})

"""Exports read back by the ecosystem's own readers: parquet by Hugging Face `datasets` (typed
columns, images as an `Image` feature) and WebDataset shards by the `webdataset` library and by
`datasets` (per-sample keys holding the rendered files and the labels)."""

import io
import json

import numpy as np
import pytest
from PIL import Image

from curi import make_split
from curi.export import export_episodes, read_episode_file
from curi.renderers.rerender import media

datasets = pytest.importorskip("datasets")
wds = pytest.importorskip("webdataset")


@pytest.fixture(scope="module")
def split(tiny_bank):
    return make_split(tiny_bank, "binding_color")


def _load(kind: str, files, tmp_path):
    return datasets.load_dataset(
        kind, data_files=[str(f) for f in files], split="train", cache_dir=str(tmp_path / "hf")
    )


def test_parquet_is_typed_and_equals_the_json_lines(tiny_bank, split, tmp_path):
    lines = export_episodes(tiny_bank, split, "test", tmp_path / "e.jsonl", n=3, progress=False)
    pq = export_episodes(tiny_bank, split, "test", tmp_path / "e.parquet", n=3, progress=False)
    assert pq["episodes"] == tmp_path / "e.parquet" and pq["episodes"].is_file()
    d = _load("parquet", pq["files"], tmp_path)
    assert len(d) == 3
    assert d.features["concept_text"].dtype == "string"
    assert d.features["support_labels"].feature.dtype == "int8"
    want = list(read_episode_file(lines["episodes"]))
    for row, ep in zip(d, want, strict=True):
        assert row["concept_text"] == ep["concept_text"]
        for key in ("support_ids", "support_labels", "query_ids", "query_labels"):
            assert list(row[key]) == list(ep[key]), key
    assert list(read_episode_file(pq["episodes"]))[0]["query_ids"] == want[0]["query_ids"]


def test_parquet_with_images_decodes_to_pictures(tiny_bank, split, tmp_path):
    out = export_episodes(
        tiny_bank, split, "test", tmp_path / "m.parquet", n=1, progress=False, media=media("image")
    )
    d = _load("parquet", out["files"], tmp_path)
    assert type(d.features["support_images"].feature).__name__ == "Image"
    images = d[0]["support_images"]
    assert len(images) == len(d[0]["support_labels"]) == 25
    assert images[0].size == (240, 160)


def test_webdataset_shards_hold_files_and_labels(tiny_bank, split, tmp_path):
    out = export_episodes(
        tiny_bank, split, "test", tmp_path / "w.tar", n=3, shard_size=2, progress=False,
        media=media("image"),
    )  # fmt: skip
    shards = sorted(str(p) for p in out["files"])
    assert len(shards) == 2 and all(p.endswith(".tar") for p in shards)
    samples = list(wds.WebDataset(shards, shardshuffle=False))
    assert len(samples) == 3
    first = samples[0]
    labels = json.loads(first["json"])["support_labels"]
    assert sum(labels) == 5 and len(labels) == 25
    png = Image.open(io.BytesIO(first["query_00.png"]))
    assert np.asarray(png).ndim == 3
    d = _load("webdataset", shards, tmp_path)
    assert len(d) == 3 and "json" in d.features

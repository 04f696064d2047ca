"""Exports read back by the ecosystem's own readers: parquet by Hugging Face `datasets` (typed
columns, images as an `Image` feature) and WebDataset shards by the `webdataset` library and by
`datasets` (per-sample keys holding the rendered files and the labels), written from Python or
by `curi episodes ... media=image|sound`."""

import io
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import run_curi
from PIL import Image

from curi import make_split
from curi.export import export_episodes, get_media, list_media, read_episode_file
from curi.renderers import get_renderer, list_renderers
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
        tiny_bank,
        split,
        "test",
        tmp_path / "w.tar",
        n=3,
        shard_size=2,
        progress=False,
        media=media("image"),
    )
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


def test_every_renderer_with_files_is_a_kind_of_media():
    """`media=NAME` (found through the ``curi.media`` entry points) covers every renderer that
    writes a file per scene, and builds that renderer's files."""
    with_files = sorted(n for n in list_renderers() if get_renderer(n).file_suffix)
    assert list_media() == with_files == ["image", "sound"]
    assert (get_media("image").suffix, get_media("image").feature) == (".png", "Image")
    assert (get_media("sound").suffix, get_media("sound").feature) == (".wav", "Audio")


def _cli_export(tiny_bank_dir, tmp_path, out, *extra):
    r = run_curi(
        "episodes",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "split=binding_color",
        "progress=false",
        f"out={out}",
        *extra,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]


def test_cli_parquet_with_images_is_the_python_export(tiny_bank, tiny_bank_dir, split, tmp_path):
    _cli_export(tiny_bank_dir, tmp_path, tmp_path / "c.parquet", "n=2", "media=image")
    d = _load("parquet", [tmp_path / "c.parquet"], tmp_path)
    assert len(d) == 2 and type(d.features["query_images"].feature).__name__ == "Image"
    row = d[1]
    assert len(row["query_images"]) == len(row["query_labels"]) == 25
    assert row["query_images"][3].size == (240, 160)
    api = export_episodes(
        tiny_bank, split, "test", tmp_path / "p.parquet", n=2, progress=False, media=media("image")
    )
    got, want = (pq.read_table(p) for p in (tmp_path / "c.parquet", api["episodes"]))
    assert got.equals(want, check_metadata=True)  # labels, ids, records and every PNG


def test_cli_tar_with_sounds_holds_a_wav_per_scene(tiny_bank_dir, tmp_path):
    _cli_export(tiny_bank_dir, tmp_path, tmp_path / "s.tar", "n=1", "media=sound")
    samples = list(wds.WebDataset([str(tmp_path / "s-00000.tar")], shardshuffle=False))
    assert len(samples) == 1
    ep = json.loads(samples[0]["json"])
    wavs = sorted(k for k in samples[0] if k.endswith(".wav"))
    assert len(wavs) == len(ep["support_labels"]) + len(ep["query_labels"]) == 50
    assert all(samples[0][k][:4] == b"RIFF" and samples[0][k][8:12] == b"WAVE" for k in wavs)


# --- rendering an export's files in worker processes -----------------------------------------
@pytest.mark.parametrize("name", ["e.parquet", "e.tar"])
def test_an_export_is_the_same_bytes_for_any_number_of_workers(tiny_bank, split, tmp_path, name):
    """`media` files rendered here (with 1 or 2 torch threads) or in 2 or 3 worker processes
    (one torch thread each) make the same export, byte for byte; torch's threads are put back."""
    import torch

    small = media("image", width=48, height=32)
    before = torch.get_num_threads()
    runs = {}
    for workers, threads in [(1, 1), (1, 2), (2, None), (3, 1)]:
        out = export_episodes(
            tiny_bank,
            split,
            "test",
            tmp_path / f"{workers}-{threads}" / name,
            n=5,
            shard_size=2,
            progress=False,
            media=small,
            workers=workers,
            threads=threads,
        )
        runs[workers, threads] = [p.read_bytes() for p in out["files"]]
        assert torch.get_num_threads() == before
    first = runs[1, 1]
    assert len(first) == (1 if name.endswith(".parquet") else 3)
    assert all(files == first for files in runs.values())


@pytest.mark.slow  # run and reported in docs/benchmarks.md (CI time)
def test_cli_renders_media_in_workers_with_the_renderers_settings(tiny_bank_dir, tmp_path):
    """`curi episodes ... media=image` takes ``workers`` and ``threads`` as `curi episodes
    render` does (documented in --help), with the same bytes for any number of workers."""
    args = ["n=3", "media=image", "shard_size=2"]
    _cli_export(tiny_bank_dir, tmp_path, tmp_path / "a" / "e.tar", *args, "workers=2")
    _cli_export(tiny_bank_dir, tmp_path, tmp_path / "b" / "e.tar", *args, "workers=1", "threads=2")
    for shard in ("e-00000.tar", "e-00001.tar"):
        assert (tmp_path / "a" / shard).read_bytes() == (tmp_path / "b" / shard).read_bytes()
    r = run_curi("episodes", "workers=0", f"out={tmp_path / 'x.tar'}", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("curi episodes: error: workers must be")
    help_text = run_curi("episodes", "--help", cwd=tmp_path).stdout
    assert "workers=null" in help_text and "one per available core" in help_text
    assert "threads=1" in help_text and "torch CPU threads" in help_text

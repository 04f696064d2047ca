"""Episode export: JSON lines, gzip and WebDataset-style tar shards, read back by the one reader."""

import json
import tarfile

import pytest

from curi.episodes import EpisodeSampler
from curi.export import EpisodeFileError, count_episodes, export_episodes, read_episode_file
from curi.splits import make_split


@pytest.fixture(scope="module")
def split(tiny_bank):
    return make_split(tiny_bank, "counting")


@pytest.mark.parametrize("name", ["eps.jsonl", "eps.jsonl.gz", "eps.tar"])
def test_round_trip(tiny_bank, split, tmp_path, name):
    out = export_episodes(
        tiny_bank, split, "test", tmp_path / name, n=5, shard_size=2, progress=False
    )
    got = list(read_episode_file(out["episodes"]))
    sampler = EpisodeSampler(tiny_bank, split, "test", "hard", seed=0, size=5)
    assert got == [json.loads(json.dumps(sampler[i].to_dict())) for i in range(5)]
    assert count_episodes(out["episodes"]) == 5
    assert "counting / test" in out["card"].read_text()


def test_tar_shards_follow_webdataset_layout(tiny_bank, split, tmp_path):
    export_episodes(
        tiny_bank, split, "test", tmp_path / "eps.tar", n=5, shard_size=2, progress=False
    )
    shards = sorted(p.name for p in tmp_path.glob("eps-*.tar"))
    assert shards == ["eps-00000.tar", "eps-00001.tar", "eps-00002.tar"]
    with tarfile.open(tmp_path / "eps-00001.tar") as tar:
        assert tar.getnames() == ["00000002.json", "00000003.json"]
    one = list(read_episode_file(tmp_path / "eps-00002.tar"))
    assert len(one) == 1 and sum(one[0]["support_labels"]) == 5


def test_bad_files(tmp_path):
    with pytest.raises(EpisodeFileError, match="not found"):
        list(read_episode_file(tmp_path / "none.tar"))
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tar file at all" * 30)
    with pytest.raises(EpisodeFileError, match="cannot read"):
        list(read_episode_file(bad))


def test_gzip_exports_are_byte_identical(tiny_bank, split, tmp_path):
    # The gzip header must hold neither the time nor the (temporary) file name.
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b" / "eps.jsonl.gz"
    export_episodes(tiny_bank, split, "test", a, n=3, progress=False)
    export_episodes(tiny_bank, split, "test", b, n=3, progress=False)
    assert a.read_bytes() == b.read_bytes()
    assert len(list(read_episode_file(b))) == 3

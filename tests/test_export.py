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


# --- the path and format of an export --------------------------------------------------------
@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("", r"out='' names no file; give the export to write, e\.g\. out=episodes\.jsonl"),
        (None, r"out=None names no file"),
        ("folder", r"out=.*folder is a folder; give a file in it, e\.g\. out=.*episodes\.jsonl"),
        ("eps.xyz", r"eps\.xyz: unknown format; .* one of \.jsonl, \.jsonl\.gz, \.parquet, \.tar"),
        ("x.tar.gz", r"x\.tar\.gz: unknown format"),  # wrote gzipped JSON lines, not a tar
        ("eps.json", r"unknown format"),
        (".jsonl", r"unknown format"),
        ("file/eps.jsonl", r"file is not a folder; give a path in a folder"),
    ],
)
def test_an_export_path_of_no_known_format_is_refused(tiny_bank, split, tmp_path, out, message):
    """Only the documented formats are written; a folder, an empty name or an unknown
    extension is one clear `ConfigError` naming ``out=`` (before: a traceback, or JSON lines
    under any name), and nothing is written."""
    from curi.errors import ConfigError

    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("a file")
    path = out if out in ("", None) else tmp_path / out
    with pytest.raises(ConfigError, match=message):
        export_episodes(tiny_bank, split, "test", path, n=2, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]
    assert list((tmp_path / "folder").iterdir()) == []


@pytest.mark.parametrize("name", ["eps.xyz", "eps.tar.gz", "eps.json"])
def test_the_reader_takes_only_the_formats_an_export_writes(tiny_bank, split, tmp_path, name):
    """A file of another name is not read as JSON lines (the reader took any name but .tar
    and .parquet as JSON lines, and any .gz as gzipped JSON lines)."""
    out = export_episodes(tiny_bank, split, "test", tmp_path / "e.jsonl", n=2, progress=False)
    other = tmp_path / name
    other.write_bytes(out["episodes"].read_bytes())
    with pytest.raises(EpisodeFileError, match=rf"{name} is not an episode export: .*\.parquet"):
        list(read_episode_file(other))
    assert count_episodes(other) is None


def test_cli_refuses_a_bad_export_path_before_opening_the_bank(tmp_path):
    from conftest import run_curi

    (tmp_path / "folder").mkdir()
    data = tmp_path / "data"  # empty: opening the bank would build it
    for out, start in [
        (tmp_path / "folder", f"curi episodes: error: out={tmp_path / 'folder'} is a folder"),
        ("", "curi episodes: error: out='' names no file"),
        ("e.xyz", "curi episodes: error: out=e.xyz: unknown format"),
    ]:
        r = run_curi("episodes", "bank=tiny", f"data_dir={data}", f"out={out}", cwd=tmp_path)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(start), r.stderr
    r = run_curi(
        "episodes", "render", f"in={tmp_path / 'e.xyz'}", f"out={tmp_path / 'r'}", cwd=tmp_path
    )
    assert r.returncode == 2 and "e.xyz is not an episode export" in r.stderr, r.stderr
    assert not data.exists()


def test_a_fifo_as_an_episode_file_is_named_for_what_it_is(tmp_path):
    """A FIFO given as in= was "episode file not found"."""
    import os

    fifo = tmp_path / "eps.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(EpisodeFileError, match="is a FIFO, not a regular file"):
        list(read_episode_file(fifo))

"""Faults in episode exports (docs/reliability.md, "Exports"): an export killed at any point
leaves either the previous export, readable in full, or files the reader refuses with a clear
`EpisodeFileError`, never a shorter or mixed dataset; the next export removes the dead
process's temporaries; shards deleted, added, truncated or swapped after an export, and a card
from another export, are refused."""

from __future__ import annotations

import io
import json
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from curi.episodes import EpisodeSampler
from curi.export import EpisodeFileError, export_episodes, read_episode_file
from curi.splits import make_split

OLD = {"n": 9, "seed": 1}  # the export already in place
NEW = {"n": 7, "seed": 0}  # the export that is killed (fewer shards: stale ones must go)
SHARD = 2

# The child exports NEW over OLD and stops at a chosen point: before the K-th episode is made
# (writing) or before the K-th rename (publishing); it says HIT and waits for the SIGKILL.
CHILD = """
import os, sys, time
from pathlib import Path
from curi import load_bank, make_split
from curi.episodes import EpisodeSampler
from curi.export import export_episodes

bank_dir, out, n, seed, shard, where, k = sys.argv[1:]
calls = {"n": 0}

def hit():
    calls["n"] += 1
    if calls["n"] == int(k) + 1:
        print("HIT", flush=True)
        time.sleep(60)

if where == "episode":
    get = EpisodeSampler.__getitem__
    def getitem(self, i):
        hit()
        return get(self, i)
    EpisodeSampler.__getitem__ = getitem
else:
    replace = os.replace
    def patched(*a, **kw):
        hit()
        return replace(*a, **kw)
    os.replace = patched
bank = load_bank(bank_dir)
export_episodes(bank, make_split(bank, "counting"), "test", Path(out), n=int(n),
                seed=int(seed), shard_size=int(shard), progress=False)
print("DONE", flush=True)
"""

# (where, k): every phase of each format: while episodes are made, at each rename of a data
# file, and just before the card is renamed into place (the last rename).
KILLS = {
    "eps.tar": [("episode", 1), ("episode", 4), ("replace", 0), ("replace", 2), ("replace", 4)],
    "eps.jsonl": [("episode", 4), ("replace", 0), ("replace", 1)],
    "eps.jsonl.gz": [("episode", 4), ("replace", 0), ("replace", 1)],
}


@pytest.fixture(scope="module")
def split(tiny_bank):
    return make_split(tiny_bank, "counting")


def _episodes(bank, split, n: int, seed: int) -> list[dict]:
    sampler = EpisodeSampler(bank, split, "test", "hard", seed=seed, size=n)
    return [json.loads(json.dumps(sampler[i].to_dict())) for i in range(n)]


def _export(bank, split, out: Path, n: int, seed: int) -> None:
    export_episodes(bank, split, "test", out, n=n, seed=seed, shard_size=SHARD, progress=False)


def _read(path: Path) -> list[dict] | str:
    """The episodes read back, or the reader's error message."""
    try:
        return list(read_episode_file(path))
    except EpisodeFileError as e:
        return str(e)


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


@pytest.mark.parametrize("name", sorted(KILLS))
def test_killed_export_leaves_the_old_export_or_a_clear_error(tiny_bank_dir, tiny_bank, split,
                                                              tmp_path, name):  # fmt: skip
    old = _episodes(tiny_bank, split, **OLD)
    new = _episodes(tiny_bank, split, **NEW)
    runs = []
    for where, k in KILLS[name]:
        folder = tmp_path / f"{where}-{k}"
        _export(tiny_bank, split, folder / name, **OLD)
        args = [str(tiny_bank_dir), str(folder / name), str(NEW["n"]), str(NEW["seed"]),
                str(SHARD), where, str(k)]  # fmt: skip
        child = subprocess.Popen([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE,
                                 text=True)  # fmt: skip
        runs.append((folder, where, k, child))
    for folder, where, k, child in runs:
        try:
            line = child.stdout.readline().strip()  # HIT, or DONE when never reached
            assert line == "HIT", f"{name} {where} {k}: the kill point was not reached ({line})"
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            child.kill()
            child.wait(timeout=30)
            child.stdout.close()
        got = _read(folder / name)
        assert isinstance(got, str) or got in (old, new), (
            f"{name} killed at {where} {k}: read back {len(got)} episodes, neither the old "
            f"export ({len(old)}) nor the new one ({len(new)}) in full"
        )
        # The next export to the same path publishes in full and removes the dead temporaries.
        _export(tiny_bank, split, folder / name, **NEW)
        assert _read(folder / name) == new
        assert _temporaries(folder) == [], f"{name} {where} {k}"


@pytest.fixture
def tar_export(tiny_bank, split, tmp_path) -> Path:
    out = tmp_path / "eps.tar"
    _export(tiny_bank, split, out, n=7, seed=0)
    assert len(list(tmp_path.glob("eps-*.tar"))) == 4
    return out


def test_deleted_shard_is_refused(tar_export):
    (tar_export.parent / "eps-00002.tar").unlink()
    with pytest.raises(EpisodeFileError, match="eps-00002.tar is missing"):
        list(read_episode_file(tar_export))


def test_extra_shard_is_refused(tar_export):
    shutil.copy(tar_export.parent / "eps-00000.tar", tar_export.parent / "eps-00004.tar")
    with pytest.raises(EpisodeFileError, match="eps-00004.tar is not listed in its card"):
        list(read_episode_file(tar_export))


def test_truncated_or_replaced_shard_is_refused(tar_export):
    shard = tar_export.parent / "eps-00001.tar"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(EpisodeFileError, match="eps-00001.tar .*differs from its card"):
        list(read_episode_file(tar_export))
    with pytest.raises(EpisodeFileError, match="differs from its card"):
        list(read_episode_file(shard))  # a shard read alone is checked too
    # A well-formed shard with one episode fewer.
    with tarfile.open(tar_export.parent / "eps-00000.tar") as tar:
        first = tar.getmembers()[0]
        text = tar.extractfile(first).read()
    with tarfile.open(shard, "w") as tar:
        tar.addfile(first, io.BytesIO(text))
    with pytest.raises(EpisodeFileError, match="eps-00001.tar .*differs from its card"):
        list(read_episode_file(tar_export))


def test_missing_or_foreign_card_is_refused(tiny_bank, split, tar_export, tmp_path):
    card = tar_export.with_name("eps.tar.card.md")
    other = tmp_path / "other"
    _export(tiny_bank, split, other / "eps.tar", n=7, seed=5)
    shutil.copy(other / "eps.tar.card.md", card)  # same shard names and counts, other data
    with pytest.raises(EpisodeFileError, match="differs from its card"):
        list(read_episode_file(tar_export))
    card.unlink()
    with pytest.raises(EpisodeFileError, match="no card"):
        list(read_episode_file(tar_export))


@pytest.mark.parametrize("name", ["eps.jsonl", "eps.jsonl.gz"])
def test_changed_json_lines_export_is_refused(tiny_bank, split, tmp_path, name):
    out = tmp_path / name
    _export(tiny_bank, split, out, n=5, seed=0)
    other = tmp_path / "other" / name
    _export(tiny_bank, split, other, n=4, seed=0)  # a complete export of 4 of the 5 episodes
    shutil.copy(other, out)
    with pytest.raises(EpisodeFileError, match="differs from its card"):
        list(read_episode_file(out))
    # Without its card a file published whole is read as it is (e.g. copied elsewhere).
    out.with_name(name + ".card.md").unlink()
    assert len(list(read_episode_file(out))) == 4

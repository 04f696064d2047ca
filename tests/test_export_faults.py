"""Faults in episode exports (docs/reliability.md, "Exports"): an export killed at any point
leaves either the previous export, readable in full, or files the reader refuses with a clear
`EpisodeFileError`, never a shorter or mixed dataset; the next export removes the dead
process's temporaries; shards deleted, added, truncated or swapped after an export, and a card
from another export, are refused."""

from __future__ import annotations

import io
import json
import os
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
AFTER = {"n": 3, "seed": 2}  # the next export (fewer shards than either: theirs must go)
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

# (where, k): every phase of each format: while episodes are made, at the rename of the list of
# files being published (the first rename, before the old card goes), at each rename of a data
# file, and just before the card is renamed into place (the last rename).
KILLS = {
    "eps.tar": [("episode", 1), ("episode", 4)] + [("replace", k) for k in (0, 1, 3, 4, 5)],
    "eps.jsonl": [("episode", 4), ("replace", 0), ("replace", 1), ("replace", 2)],
    "eps.jsonl.gz": [("episode", 4), ("replace", 0), ("replace", 1), ("replace", 2)],
}


# What an export of AFTER leaves in its folder: its files and card, nothing hidden.
FILES = {
    "eps.tar": ["eps-00000.tar", "eps-00001.tar", "eps.tar.card.md"],
    "eps.jsonl": ["eps.jsonl", "eps.jsonl.card.md"],
    "eps.jsonl.gz": ["eps.jsonl.gz", "eps.jsonl.gz.card.md"],
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
def test_killed_export_leaves_the_old_export_or_a_clear_error(
    tiny_bank_dir, tiny_bank, split, tmp_path, name
):
    old = _episodes(tiny_bank, split, **OLD)
    new = _episodes(tiny_bank, split, **NEW)
    after = _episodes(tiny_bank, split, **AFTER)
    runs = []
    for where, k in KILLS[name]:
        folder = tmp_path / f"{where}-{k}"
        _export(tiny_bank, split, folder / name, **OLD)
        args = [
            str(tiny_bank_dir),
            str(folder / name),
            str(NEW["n"]),
            str(NEW["seed"]),
            str(SHARD),
            where,
            str(k),
        ]
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, text=True
        )
        runs.append((folder, where, k, child))
    for folder, where, k, child in runs:
        try:
            line = child.stdout.readline().strip()  # HIT, or DONE when never reached
            assert line == "HIT", f"{name} {where} {k}: the kill point was not reached ({line})"
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=120) == -signal.SIGKILL
        finally:
            child.kill()
            child.wait(timeout=120)
            child.stdout.close()
        got = _read(folder / name)
        assert isinstance(got, str) or got in (old, new), (
            f"{name} killed at {where} {k}: read back {len(got)} episodes, neither the old "
            f"export ({len(old)}) nor the new one ({len(new)}) in full"
        )
        # The next export to the same path (its lock was released by the kill) publishes in
        # full and removes the dead temporaries and every file of both exports it does not
        # publish itself, the killed one's too: it had listed them before renaming them in.
        _export(tiny_bank, split, folder / name, **AFTER)
        assert _read(folder / name) == after, f"{name} {where} {k}"
        assert _temporaries(folder) == [], f"{name} {where} {k}"
        assert sorted(p.name for p in folder.iterdir()) == sorted(FILES[name]), f"{where} {k}"


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


# --- an export replaces only its own files ----------------------------------------------------
def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_an_export_never_deletes_another_exports_or_a_users_files(tiny_bank, split, tmp_path):
    """``eps.tar`` (shards ``eps-NNNNN.tar``, card ``eps.tar.card.md``), ``eps.parquet`` and
    ``eps.jsonl`` are three exports: writing one leaves the others' files alone (the tar
    shards were deleted by every later export to the folder), and a user's own file that
    looks like a shard is never deleted; re-exporting the tar with fewer shards removes only
    the shards its card listed."""
    tar = tmp_path / "eps.tar"
    _export(tiny_bank, split, tar, n=5, seed=0)  # 3 shards
    shards = _read(tar)
    mine = tmp_path / "eps-00007.tar"
    for name in ("eps.parquet", "eps.jsonl", "eps.jsonl.gz"):
        _export(tiny_bank, split, tmp_path / name, n=2, seed=0)
        assert (tmp_path / "eps-00002.tar").is_file(), f"{name} deleted the tar shards"
        assert _read(tar) == shards, name
    mine.write_bytes(b"a user's own file")
    _export(tiny_bank, split, tmp_path / "eps.parquet", n=3, seed=1)
    _export(tiny_bank, split, tar, n=3, seed=1)  # 2 shards: eps-00002.tar was its own
    assert mine.read_bytes() == b"a user's own file"
    assert _names(tmp_path) == [
        "eps-00000.tar",
        "eps-00001.tar",
        "eps-00007.tar",
        "eps.jsonl",
        "eps.jsonl.card.md",
        "eps.jsonl.gz",
        "eps.jsonl.gz.card.md",
        "eps.parquet",
        "eps.parquet.card.md",
        "eps.tar.card.md",
    ]
    mine.unlink()  # (the reader refuses a shard its card does not list)
    assert _read(tar) == _episodes(tiny_bank, split, n=3, seed=1)
    assert len(_read(tmp_path / "eps.jsonl")) == 2 and len(_read(tmp_path / "eps.parquet")) == 3


def test_a_list_left_by_a_killed_export_names_only_its_own_files(tiny_bank, split, tmp_path):
    """The list of files an interrupted export was publishing lets the next export delete only
    files of that export (its shards), never a path outside the folder or another export's."""
    (tmp_path / "sub").mkdir()
    victims = [tmp_path / "victim.txt", tmp_path / "eps.parquet", tmp_path / "sub" / "x"]
    for v in victims:
        v.write_text("keep")
    (tmp_path / "eps-00009.tar").write_bytes(b"a shard of the killed export")
    names = ["../victim.txt", "victim.txt", "eps.parquet", "sub/x", "", ".", "eps-00009.tar", 7]
    (tmp_path / ".eps.tar.card.md.publishing").write_text(json.dumps(names))
    _export(tiny_bank, split, tmp_path / "eps.tar", n=3, seed=0)
    assert all(v.read_text() == "keep" for v in victims)
    assert not (tmp_path / "eps-00009.tar").exists()
    assert _names(tmp_path) == [
        "eps-00000.tar",
        "eps-00001.tar",
        "eps.parquet",
        "eps.tar.card.md",
        "sub",
        "victim.txt",
    ]


# A process that holds the lock of an export (as a running export does) until it is killed.
HOLDER = """
import sys, time
from curi.atomic import exclusive
with exclusive(sys.argv[1], what="x", error=RuntimeError):
    print("HELD", flush=True)
    time.sleep(120)
"""


def test_two_exports_to_the_same_path_do_not_both_succeed(tiny_bank, split, tmp_path):
    """While one export of ``eps.tar`` runs, a second fails at once with a message naming the
    holder (before, the last writer won and both reported success); the lock is released when
    the holder is killed (SIGKILL), so it is never stale; an export to another path runs."""
    from curi.errors import ConfigError

    out = tmp_path / "eps.tar"
    _export(tiny_bank, split, out, n=3, seed=0)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "HELD"
        busy = rf"out=.*eps.tar is being written by another process \(pid {holder.pid}, holding"
        with pytest.raises(ConfigError, match=busy):
            _export(tiny_bank, split, out, n=5, seed=1)
        _export(tiny_bank, split, tmp_path / "eps.jsonl", n=2, seed=0)  # another path: free
        assert _read(out) == _episodes(tiny_bank, split, n=3, seed=0)  # untouched
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=120)
        holder.stdout.close()
    _export(tiny_bank, split, out, n=5, seed=1)
    assert _read(out) == _episodes(tiny_bank, split, n=5, seed=1)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no lock file left


def test_the_cli_names_the_holder_of_an_export(tiny_bank_dir, tmp_path):
    from conftest import run_curi

    from curi.atomic import exclusive
    from curi.errors import ConfigError

    out = tmp_path / "eps.jsonl"
    with exclusive(out, what="x", error=ConfigError):  # this process holds it
        r = run_curi(
            "episodes",
            "bank=tiny",
            f"data_dir={tiny_bank_dir.parent}",
            "n=2",
            "split=counting",
            "progress=false",
            f"out={out}",
            cwd=tmp_path,
        )
    assert r.returncode == 2, r.stderr[-2000:]
    busy = f"curi episodes: error: out={out} is being written by another process (pid {os.getpid()}"
    assert r.stderr.strip().splitlines() == [r.stderr.strip()], r.stderr[-2000:]
    assert r.stderr.startswith(busy), r.stderr[-2000:]
    assert "Traceback" not in r.stderr and not out.exists()


# An export whose files are rendered in 2 worker processes, stopped (HIT) once they run.
WORKERS_CHILD = """
import sys, time
from pathlib import Path
from curi import load_bank, make_split
from curi.episodes import EpisodeSampler
from curi.export import export_episodes
from curi.renderers.rerender import media

get = EpisodeSampler.__getitem__
def getitem(self, i):
    if i == 6:  # the workers have rendered or are rendering episodes 0..5
        print("HIT", flush=True)
        time.sleep(120)
    return get(self, i)
EpisodeSampler.__getitem__ = getitem
bank = load_bank(sys.argv[1])
export_episodes(bank, make_split(bank, "counting"), "test", Path(sys.argv[2]), n=20,
                progress=False, media=media("image", width=32, height=24), workers=2)
"""


def test_a_killed_export_with_workers_leaves_no_lock_held(
    tiny_bank_dir, tiny_bank, split, tmp_path
):
    """The workers rendering an export's files end with it when it is killed (SIGKILL): they
    waited forever for jobs before, holding the export's lock they inherited, so no later
    export to that path could run."""
    import time

    from curi.errors import ConfigError

    out = tmp_path / "eps.tar"
    child = subprocess.Popen(
        [sys.executable, "-c", WORKERS_CHILD, str(tiny_bank_dir), str(out)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "HIT"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=120)
        child.stdout.close()
    deadline = time.monotonic() + 120
    while True:
        try:
            _export(tiny_bank, split, out, n=3, seed=0)
            break
        except ConfigError as e:  # the workers take a moment to end
            assert time.monotonic() < deadline, f"the lock is still held 120 s after the kill: {e}"
            time.sleep(0.2)
    assert _read(out) == _episodes(tiny_bank, split, n=3, seed=0)


@pytest.mark.parametrize(
    "order", [[1, 0, 2], [0, 1, 1], [0, 2], [1, 2]], ids=["moved", "repeated", "gap", "first"]
)
def test_episodes_out_of_order_are_refused_in_one_line(tiny_bank, split, tmp_path, order):
    """An export holds episodes 0..n-1 in order: a file (here without a card to check it
    against) with one moved, repeated or missing is refused at the first out of place."""
    eps = _episodes(tiny_bank, split, 3, 0)
    path = tmp_path / "eps.jsonl"
    path.write_text("".join(json.dumps(eps[i]) + "\n" for i in order))
    with pytest.raises(EpisodeFileError, match=r"episode index \d where \d belongs") as e:
        list(read_episode_file(path))
    assert "\n" not in str(e.value)


def test_a_shard_read_alone_runs_on_from_its_first_episode(tar_export, tmp_path):
    """A shard of an export (episodes 2..3) is read by itself, beside its card or copied
    elsewhere without it: its indices run on from its first episode, not from 0."""
    shard = tar_export.parent / "eps-00001.tar"
    assert [ep["index"] for ep in read_episode_file(shard)] == [2, 3]
    alone = tmp_path / "alone" / "eps-00001.tar"
    alone.parent.mkdir()
    shutil.copy(shard, alone)
    assert [ep["index"] for ep in read_episode_file(alone)] == [2, 3]


def test_a_garbage_tar_is_one_line(tmp_path):
    """tarfile's error lists each compression it tried on a line of its own, so
    `curi episodes render in=<garbage.tar>` ended in five lines (issue 44's sweep of bad
    inputs)."""
    from curi.export import check_episode_file

    bad = tmp_path / "eps.tar"
    bad.write_bytes(b"x" * 1024)
    with pytest.raises(EpisodeFileError, match="method tar: ReadError") as e:
        check_episode_file(bad)
    assert "\n" not in str(e.value) and str(e.value).startswith("cannot read episode file")

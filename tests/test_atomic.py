"""The atomic-write helper: a file or folder appears under its name complete or not at all, an
error leaves the old one as it was, and no temporary is left behind."""

from __future__ import annotations

import os

import pytest

from curi.atomic import (
    atomic_dir,
    atomic_path,
    temporaries,
    temporary_name,
    write_bytes,
    write_text,
)


def test_temporary_is_hidden_beside_the_target_and_names_the_process(tmp_path):
    tmp = temporary_name(tmp_path / "a.json")
    assert tmp.parent == tmp_path
    assert tmp.name == f".a.json.tmp-{os.getpid()}"


def test_a_file_is_published_whole_and_replaces_the_old_one(tmp_path):
    path = tmp_path / "sub" / "metrics.json"  # the folder is created
    write_text(path, "old")
    with atomic_path(path) as tmp:
        tmp.write_text("new")
        assert path.read_text() == "old"  # not visible until the block ends
    assert path.read_text() == "new"
    assert write_bytes(path, b"\x00\x01") == path and path.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in path.parent.iterdir()) == ["metrics.json"]


def test_an_error_removes_the_temporary_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "out.txt"
    write_text(path, "kept")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "kept"
    assert temporaries(path) == []
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "new.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert not (tmp_path / "new.txt").exists()


def test_temporaries_finds_leftovers_of_any_process(tmp_path):
    path = tmp_path / "bank"
    (tmp_path / ".bank.tmp-1").mkdir()
    (tmp_path / ".bank.tmp-2").write_text("")
    (tmp_path / ".other.tmp-3").write_text("")
    assert [p.name for p in temporaries(path)] == [".bank.tmp-1", ".bank.tmp-2"]


def test_a_folder_is_published_whole_and_replaces_the_old_one(tmp_path):
    path = tmp_path / "bank"
    with atomic_dir(path) as tmp:
        (tmp / "a.txt").write_text("1")
        assert not path.exists()
    assert (path / "a.txt").read_text() == "1"
    with atomic_dir(path) as tmp:
        (tmp / "b.txt").write_text("2")
    assert sorted(p.name for p in path.iterdir()) == ["b.txt"]
    with pytest.raises(RuntimeError), atomic_dir(path) as tmp:
        (tmp / "c.txt").write_text("3")
        raise RuntimeError("interrupted")
    assert sorted(p.name for p in path.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bank"]


def test_a_folder_swap_renames_the_new_one_in_before_deleting_the_old(tmp_path, monkeypatch):
    """Killed (here: failing) while deleting the old folder, the new one is already in place
    and the old one is left under its aside name for the caller to remove."""
    import shutil

    from curi.atomic import aside_name, asides

    path = tmp_path / "bank"
    with atomic_dir(path) as tmp:
        (tmp / "old.txt").write_text("old")

    def interrupted(p, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", interrupted)
    with pytest.raises(KeyboardInterrupt), atomic_dir(path) as tmp:
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in path.iterdir()) == ["new.txt"]
    assert asides(path) == [aside_name(path)] and (aside_name(path) / "old.txt").is_file()

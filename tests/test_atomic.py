"""The atomic-write helper: a file or folder appears under its name complete or not at all, an
error leaves the old one as it was, and no temporary is left behind; the one remover deletes
only inside its root and never through a symlink, and every remover of curi goes through it."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from curi.atomic import (
    atomic_dir,
    atomic_path,
    exclusive,
    remove,
    temporaries,
    temporary_name,
    write_bytes,
    write_text,
)
from curi.errors import ConfigError, RemovalError


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


# --- the one remover ---------------------------------------------------------------------------
def _victim(tmp_path):
    """A folder outside every root the tests give, with a file and a subfolder to keep."""
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "keep.txt").write_text("x")
    return victim


def _intact(victim) -> bool:
    return (victim / "keep.txt").read_text() == "x" and (victim / "sub").is_dir()


def test_remove_deletes_a_tree_without_following_the_links_in_it(tmp_path):
    victim, root = _victim(tmp_path), tmp_path / "root"
    (root / "tree" / "deep").mkdir(parents=True)
    (root / "tree" / "deep" / "a.txt").write_text("a")
    (root / "tree" / "to-victim").symlink_to(victim)
    (root / "tree" / "deep" / "to-file").symlink_to(victim / "keep.txt")
    remove(root / "tree", root=root)
    assert not (root / "tree").exists() and _intact(victim)
    (root / "f.txt").write_text("f")
    remove(root / "f.txt", root=root)
    remove(root / "missing", root=root)  # nothing there: nothing to do
    assert list(root.iterdir()) == []


def test_remove_refuses_a_symlink_unless_the_name_is_curis_own(tmp_path):
    victim, root = _victim(tmp_path), tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(victim)
    with pytest.raises(RemovalError, match=r"it is a symlink \(to .*victim\)") as e:
        remove(root / "link", root=root)
    assert "\n" not in str(e.value) and (root / "link").is_symlink() and _intact(victim)
    remove(root / "link", root=root, link=True)  # the link goes, never what it points to
    assert not (root / "link").exists() and not (root / "link").is_symlink() and _intact(victim)


@pytest.mark.parametrize("where", ["through-link", "dotdot", "root-itself", "absolute"])
def test_remove_refuses_paths_outside_its_root(tmp_path, where):
    victim, root = _victim(tmp_path), tmp_path / "root"
    root.mkdir()
    (root / "out").symlink_to(victim)
    path = {
        "through-link": root / "out" / "sub",  # a symlinked folder on the way
        "dotdot": root / ".." / "victim",
        "root-itself": root,
        "absolute": victim / "keep.txt",
    }[where]
    with pytest.raises(RemovalError, match="outside|itself") as e:
        remove(path, root=root, link=True)
    assert "\n" not in str(e.value) and _intact(victim)


_SOURCES = ("curi", "renderers", "oracles", "models")
_ROOT = Path(__file__).resolve().parent.parent


def _removers(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, call) of every call in a module that deletes or replaces a file by itself:
    ``rmtree``, ``unlink``, ``rmdir``, ``os.remove``, ``os.replace``, a path's one-argument
    ``rename`` / ``replace`` (which replace an existing file), ``TemporaryDirectory``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        owner = getattr(getattr(f, "value", None), "id", None)
        one_arg = len(node.args) == 1 and not node.keywords
        if (
            name in ("rmtree", "unlink", "rmdir", "removedirs", "TemporaryDirectory")
            or (owner in ("os", "shutil") and name in ("remove", "replace", "move"))
            or (name in ("rename", "replace") and one_arg and owner not in ("dataclasses",))
        ):
            found.append((node.lineno, name))
    return found


def test_every_remover_goes_through_the_one_helper():
    """Walk every module of the four packages: no call deletes or replaces a file by itself
    outside `curi.atomic` (where `remove`, `atomic_path` and `atomic_dir` do), and every
    call of `remove` names the root it deletes in. The one exception, a rename onto a path
    known to be missing, is listed."""
    allowed = {("curi/bank.py", "rename")}  # an aside put back where no bank is (`_tidy`)
    stray, unrooted = [], []
    for package in _SOURCES:
        for path in sorted((_ROOT / package).rglob("*.py")):
            name = path.relative_to(_ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if name != "curi/atomic.py":
                stray += [(name, line, call) for line, call in _removers(tree)]
            unrooted += [
                (name, node.lineno)
                for node in ast.walk(tree)
                if isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "remove"
                and "root" not in {k.arg for k in node.keywords}
            ]
    assert [s for s in stray if (s[0], s[2]) not in allowed] == []
    assert unrooted == []


def test_a_lock_in_a_folder_that_is_not_writable_says_so(unwritable):
    """It said "cannot open its lock file ...; remove it" of a lock file that never existed."""
    with (
        pytest.raises(ConfigError) as e,
        exclusive(unwritable / "eps.jsonl", what="out=x", error=ConfigError),
    ):
        pass
    assert str(e.value).startswith(f"out=x: the folder {unwritable} is not writable")
    assert "remove it" not in str(e.value)

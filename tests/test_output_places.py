"""Output places that cannot be written end every command that writes in one line (exit 2),
naming the place, before any work (issue 44, item 2): a path under ``/proc`` (root passes
every mode check there, yet can make nothing), a name longer than the file system allows,
a path below a regular file. `curi gap output_dir=/proc/x`, `split save=`, `show out=`,
`lm export out=` and `baselines output_dir=` ended in tracebacks, `episodes out=/proc/x`
advised to "remove" a lock file nobody made, and `episodes out=<a 300-byte name>` ended in an
`OSError` traceback from `check_export_path`. A rank of a distributed run without
``output_dir=`` (each process's default is a folder of its own) waited at the rendezvous: it
is refused in one line before it (issue 44, item 3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from curi.atomic import exclusive
from curi.cli import main
from curi.errors import ConfigError
from curi.export import check_export_path
from curi.paths import output_path

# (command line before the place, the key, the suffix of a file place)
COMMANDS = [
    (["gap"], "output_dir", ""),
    (["train", "train=tiny", "device=cpu"], "output_dir", ""),
    (["eval", "checkpoint=run"], "output_dir", ""),
    (["baselines"], "output_dir", ""),
    (["curve"], "output_dir", ""),
    (["difficulty"], "output_dir", ""),
    (["audit"], "output_dir", ""),
    (["split"], "save", ".json"),
    (["show"], "out", ""),
    (["episodes", "n=4"], "out", ".jsonl"),
    (["episodes", "render", "in=e.jsonl"], "out", ""),
    (["lm", "export"], "out", ""),
    (["lm", "rules", "n=2"], "out", ""),
    (["rules", "n=2"], "out", ""),
    (["score", "tasks=t.jsonl", "predictions=p.jsonl"], "out", ".json"),
    (["lm", "compare", "tasks=t", "results=r"], "out", ".json"),
]
PLACES = ["proc", "too_long", "below_a_file"]
NO_BANK = ("eval", "episodes render", "score")  # commands without a bank group


def _place(kind: str, tmp_path: Path) -> Path:
    if kind == "proc":
        return Path("/proc/curi-test-place")
    if kind == "too_long":
        return tmp_path / ("a" * 300)
    (tmp_path / "f").write_text("x")
    return tmp_path / "f" / "x"


def _says(kind: str, place: Path) -> str:
    return {
        "proc": "the folder /proc is not writable",
        "too_long": f"the name '{'a' * 40}'... is",
        "below_a_file": f"{place.parent} is not a folder",
    }[kind]


@pytest.mark.parametrize("kind", PLACES)
@pytest.mark.parametrize(("args", "key", "suffix"), COMMANDS, ids=lambda a: str(a))
def test_an_output_place_that_cannot_be_written_is_one_line_before_any_work(
    args, key, suffix, kind, tiny_bank_dir, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    place = Path(f"{_place(kind, tmp_path)}{suffix}")
    before = sorted(p.name for p in tmp_path.iterdir())
    name = " ".join(a for a in args[:2] if "=" not in a)
    bank = [] if name in NO_BANK else [f"data_dir={tiny_bank_dir.parent}", "bank=tiny"]
    with pytest.raises(SystemExit) as e:
        main([*args, *bank, f"{key}={place}"])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert e.value.code == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"curi {name}: error: {key}={place}"), lines
    assert _says(kind, place) in lines[0] and "remove" not in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no run folder, no output


def test_the_check_tries_the_folder_and_leaves_nothing_in_it(tmp_path):
    """Writable: nothing of the trial is left; /proc: refused although root passes the mode
    check there (`os.access`), which is all the check read before."""
    (tmp_path / "mine").mkdir()
    assert output_path(tmp_path / "mine", folder=True) == tmp_path / "mine"
    assert output_path(tmp_path / "new" / "deeper", folder=True, key="output_dir")
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]
    assert list((tmp_path / "mine").iterdir()) == []
    with pytest.raises(ConfigError, match=r"^out=/proc/x: the folder /proc is not writable \("):
        output_path("/proc/x", folder=True)
    with pytest.raises(ConfigError, match="holds a NUL character"):
        output_path("a\0b", folder=False)


def test_an_export_name_too_long_is_one_error_not_an_oserror(tmp_path):
    long = tmp_path / ("e" * 300 + ".jsonl")
    with pytest.raises(ConfigError, match=r"^out=.*: the name 'eeee.*is 306 bytes long"):
        check_export_path(long)


def test_a_lock_that_cannot_be_made_is_not_said_to_be_in_the_way():
    """`curi episodes out=/proc/x` said "cannot open its lock file /proc/.x.lock ...; remove
    it": there was nothing to remove."""
    with pytest.raises(ConfigError) as e, exclusive(Path("/proc/x"), what="out", error=ConfigError):
        pass
    assert "the folder /proc is not writable" in str(e.value) and "remove" not in str(e.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="root passes every mode check; others do not")
def test_root_is_refused_where_only_a_trial_shows_it():
    assert os.access("/proc", os.W_OK)  # what the check read before: "writable"
    with pytest.raises(ConfigError, match="not writable"):
        output_path("/proc/y.json", folder=False, key="save")


RANK_1_OF_2 = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29517"}


def test_a_distributed_rank_without_output_dir_is_refused_before_the_rendezvous(monkeypatch):
    """Each process would make its own time-stamped run folder; a rank waited silently at the
    rendezvous for the others (docs/cluster.md: output_dir must be given)."""
    from curi.models.torchrun import torchrun_env

    for key, value in RANK_1_OF_2.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=r"^WORLD_SIZE=2: .* give output_dir=DIR"):
        torchrun_env(output_dir_given=False)
    assert torchrun_env(output_dir_given=True) == (2, 1, 0)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert torchrun_env(output_dir_given=False) == (1, 0, 0)  # one process: its own folder


def test_curi_train_as_a_rank_without_output_dir_is_one_line(tiny_bank_dir, tmp_path):
    import subprocess
    import sys

    args = ["train", "bank=tiny", "train=tiny", f"data_dir={tiny_bank_dir.parent}", "device=cpu"]
    r = subprocess.run(
        [sys.executable, "-c", "from curi.cli import main; main()", *args],
        cwd=tmp_path,
        env={**os.environ, **RANK_1_OF_2},
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: the rank waited at the rendezvous for 30 minutes
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "curi train: error: WORLD_SIZE=2: the processes of a distributed run write one run "
        "folder; give output_dir=DIR (on a filesystem every node sees), the same on every process"
    ], r.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []  # no outputs/train/<time>

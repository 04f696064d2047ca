"""Refusals before the heavy work (issue 44): a scene past the bank's end, an episode file
that does not parse, a checkpoint that is not one, and a checkpoint path that is a FIFO end
in one line before the bank's scene arrays, torch or the file's contents are read. Each
refusal is bounded by the CPU time of the `curi` process (user + sys, not the wall clock,
which a busy machine stretches): 2 s, under what importing torch alone costs."""

from __future__ import annotations

import gzip
import os
import pickle
import resource
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import run_curi

from curi.bank import MANIFEST
from curi.errors import ConfigError, EpisodeFileError
from curi.export import check_episode_file
from curi.models.checkpoint import checkpoint_file

CPU_BOUND_S = 2.0


def _refused(tmp_path: Path, *args: str) -> str:
    """The one line `curi *args` ends with (exit 2), once its CPU time is under the bound."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run_curi(*args, cwd=tmp_path, timeout=600)  # a hang guard, far above the seconds it takes
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert r.returncode == 2, r.stderr[-3000:]
    (line,) = r.stderr.splitlines()
    assert cpu < CPU_BOUND_S, f"{cpu:.2f} s of CPU for {args}: {line}"
    return line


@pytest.fixture
def armless_bank(tiny_bank_dir, tmp_path) -> Path:
    """A data folder whose tiny bank has its manifest but none of its scene arrays: a command
    that reads them fails on that, one that checks first does not get there."""
    data = tmp_path / "data"
    shutil.copytree(tiny_bank_dir, data / tiny_bank_dir.name)
    shutil.rmtree(data / tiny_bank_dir.name / "scenes")
    assert (data / tiny_bank_dir.name / MANIFEST).is_file()
    return data


@pytest.mark.parametrize("scene", ["99999999", "20000"])
def test_a_scene_past_the_end_is_refused_before_the_scenes_are_read(armless_bank, tmp_path, scene):
    args = ["show", "bank=tiny", f"data_dir={armless_bank}", f"scene={scene}"]
    line = _refused(tmp_path, *args, f"out={tmp_path / 'o'}")
    assert line == (
        f"curi show: error: scene={scene} is out of range: the bank has 20,000 scenes, "
        "numbered 0 to 19,999"
    )
    assert not (tmp_path / "o").exists()


def test_a_negative_scene_is_refused_at_once(tiny_bank_dir, tmp_path):
    args = ["show", "bank=tiny", f"data_dir={tiny_bank_dir.parent}", "scene=-1"]
    line = _refused(tmp_path, *args, f"out={tmp_path / 'o'}")
    assert "scene must be an integer in [0, inf], got -1" in line


def _episode_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Files that are not episode exports, and what the refusal says of each."""
    big = b"x" * (1 << 20)
    files = {
        "text.jsonl": (b"hello world\n" + big, "line 1 is not valid JSON"),
        "binary.jsonl": (bytes(range(128, 256)) * 4096, "is not text (byte 0 is not UTF-8)"),
        "empty.jsonl": (b"", "holds no episodes"),
        "blank.jsonl": (b"\n \n", "holds no episodes"),
        "json.jsonl": (b'{"concept_text": "x"}\n' + big, "is not an exported episode: missing"),
        "index.jsonl": (
            b'{"index": 7, "concept_text": "x", "support_labels": [], "query_labels": [], '
            b'"support_records": [], "query_records": []}\n',
            "episode index 7 where 0 belongs",
        ),
        "notgzip.jsonl.gz": (b"plain text\n", "cannot read episode file"),
        "text.jsonl.gz": (gzip.compress(b"hello\n"), "line 1 is not valid JSON"),
        "garbage.parquet": (b"PAR1 not really", "cannot read episode file"),
    }
    out = {}
    for name, (data, says) in files.items():
        (tmp_path / name).write_bytes(data)
        out[name] = (tmp_path / name, says)
    return out


def test_an_episode_file_that_does_not_parse_is_refused_by_its_first_episode(tmp_path):
    for name, (path, says) in _episode_files(tmp_path).items():
        with pytest.raises(EpisodeFileError) as err:
            check_episode_file(path)
        msg = str(err.value)
        assert says in msg and str(path) in msg and "\n" not in msg, (name, msg)


@pytest.mark.parametrize("text", [False, True])
def test_curi_episodes_render_refuses_a_garbage_file_before_the_work(tmp_path, text):
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"this is not an episode file\n" * 100_000)
    args = ["episodes", "render", f"in={garbage}", f"out={tmp_path / 'o'}", f"text={text}"]
    line = _refused(tmp_path, *args)
    assert line == (
        f"curi episodes render: error: {garbage} line 1 is not valid JSON (Expecting value, "
        "column 1); re-export it"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"just some notes, not a checkpoint\n" * 1000, "it is not a torch file"),
        (b"", "it is empty"),
    ],
)
def test_curi_eval_refuses_a_file_that_is_not_a_checkpoint_by_its_first_bytes(
    tmp_path, content, says
):
    notes = tmp_path / "notes.pt"
    notes.write_bytes(content)
    line = _refused(tmp_path, "eval", f"checkpoint={notes}")
    assert line.startswith(f"curi eval: error: {notes} is not a checkpoint: {says}")
    assert "KeyError" not in line and "give a .pt file from a run's checkpoints/" in line


def _unreadable_checkpoints(folder: Path) -> dict[str, tuple[Path, str]]:
    """Files that begin as torch's files do, yet torch cannot read as a checkpoint, and what
    the refusal says of each."""
    folder.mkdir()
    with zipfile.ZipFile(folder / "junk_zip.pt", "w") as z:
        z.writestr("archive/data.pkl", b"junk")
    with zipfile.ZipFile(folder / "junk_pickle.pt", "w") as z:
        z.writestr("archive/data.pkl", b"junk")
        z.writestr("archive/version", b"3\n")
    (folder / "int_pickle.pt").write_bytes(pickle.dumps(12345))
    (folder / "dict_pickle.pt").write_bytes(pickle.dumps({"model": 1, "config": "abc"}))
    (folder / "half_zip.pt").write_bytes(b"PK\x03\x04" + b"\0" * 100)
    return {
        "junk_zip.pt": "(a zip archive without torch's data.pkl and version records)",
        "junk_pickle.pt": "(UnpicklingError: pickle data was truncated)",
        "int_pickle.pt": "(a pickle, but not one torch.save wrote)",
        "dict_pickle.pt": "(a pickle, but not one torch.save wrote)",
        "half_zip.pt": "(BadZipFile: File is not a zip file)",
    }


@pytest.mark.parametrize("command", ["eval", "difficulty"])
def test_a_checkpoint_torch_cannot_read_is_refused_before_torch_and_a_run_folder(
    tiny_bank_dir, tmp_path, command
):
    # was: refused once torch had read it, 3 to 7 s in, leaving outputs/<command>/<time>/
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    bank = [f"data_dir={tiny_bank_dir.parent}", "progress=false"]
    bank += ["bank=tiny"] if command == "difficulty" else []
    for name, says in _unreadable_checkpoints(tmp_path / "in").items():
        path = tmp_path / "in" / name
        line = _refused(cwd, command, f"checkpoint={path}", *bank)
        assert line == (
            f"curi {command}: error: cannot read checkpoint {path} {says}; use one written by "
            "`curi train`"
        )
        assert not list(cwd.iterdir()), name  # no run folder


def test_a_checkpoint_path_that_is_a_fifo_is_named_so_not_missing(tmp_path):
    # was: "checkpoint not found at ..."
    fifo = tmp_path / "ckpt.pt"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"checkpoint '.*ckpt\.pt' is a FIFO, not a regular file"):
        checkpoint_file(fifo)
    line = _refused(tmp_path, "eval", f"checkpoint={fifo}")  # never opened: no reader waits
    assert line == f"curi eval: error: checkpoint '{fifo}' is a FIFO, not a regular file"
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    os.mkfifo(tmp_path / "run" / "checkpoints" / "last.pt")  # a run folder's own, on resume
    with pytest.raises(ConfigError, match=r"checkpoints/last\.pt' is a FIFO, not a regular"):
        checkpoint_file(tmp_path / "run", last=True)
    with pytest.raises(ConfigError, match="checkpoint not found at"):
        checkpoint_file(tmp_path)  # a folder without checkpoints: as before

"""Writes that stay inside what a command owns (docs/reliability.md, "Fourth round"): a sharded
export's settings folder planted as a symlink (or a file) is refused before anything is
written, and the run summary of `curi train` and `curi baselines` is replaced atomically, so a
symlink there never has its target written and a FIFO there never blocks the run."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import run_curi

import curi.export.write
from curi.errors import ConfigError, CuriError
from curi.export import export_episodes
from curi.export.parts import staging_folder
from curi.splits import make_split

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- a sharded export's settings folder -----------------------------------------------------


def _failing_part(monkeypatch, fail: int) -> None:
    """The export's job of part `fail` raises (the run leaves the other parts, as a kill would)."""
    real = curi.export.write._export_range

    def job(*args):
        if args[-1].number == fail:
            raise RuntimeError("killed")
        return real(*args)

    monkeypatch.setattr(curi.export.write, "_export_range", job)


def _plant(out: Path, victim: Path, kind: str) -> Path:
    """Replace the settings folder an earlier run of the same settings left in the staging
    folder of `out` by a symlink to `victim` (or a file); returns its path."""
    (here,) = [p for p in staging_folder(out).iterdir() if not p.name.startswith(".")]
    assert (here / "settings.json").is_file()  # the folder the next run would write in
    shutil.rmtree(here)
    if kind == "link":
        here.symlink_to(victim)
    else:
        here.write_text("mine")
    return here


def _victim(tmp_path: Path) -> dict[Path, bytes]:
    """A folder of a user's, holding the names an export's parts folder holds."""
    victim = tmp_path / "victim"
    victim.mkdir()
    files = {victim / "settings.json": b'{"mine": 1}', victim / "part-00000.tar": b"mine"}
    for path, data in files.items():
        path.write_bytes(data)
    return files


@pytest.mark.parametrize("kind", ["link", "file"])
def test_a_planted_parts_folder_is_refused_before_anything_is_written(
    tiny_bank, tmp_path, monkeypatch, kind
):
    split = make_split(tiny_bank, "counting")
    out, files = tmp_path / "O" / "eps.jsonl", _victim(tmp_path)

    def export():
        export_episodes(tiny_bank, split, "test", out, n=5, jobs=3, progress=False)

    _failing_part(monkeypatch, fail=1)
    with pytest.raises(CuriError, match="part-00001"):
        export()
    here = _plant(out, tmp_path / "victim", kind)
    monkeypatch.undo()
    word = "is a symlink" if kind == "link" else "is a file, not a folder"
    with pytest.raises(ConfigError, match=f"the parts folder .* {word}") as e:
        export()
    assert "\n" not in str(e.value)
    assert {p: p.read_bytes() for p in files} == files  # nothing written or replaced there
    assert sorted(p.name for p in (tmp_path / "victim").iterdir()) == sorted(p.name for p in files)
    assert os.path.lexists(here) and not out.exists()
    if kind == "file":
        assert here.read_text() == "mine"


def test_cli_a_symlinked_parts_folder_is_one_line(tiny_bank_dir, tmp_path, capsys, monkeypatch):
    """The report's repro: a run stopped after some parts, its settings folder replaced by a
    link to a folder holding ``settings.json``, the same command again."""
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    out, files = tmp_path / "E" / "eps.jsonl", _victim(tmp_path)
    args = ["episodes", "bank=tiny", f"data_dir={tiny_bank_dir.parent}", "split=concept_iid"]
    args += ["n=6", "seed=1", "jobs=3", f"out={out}", "progress=false"]
    _failing_part(monkeypatch, fail=2)
    with pytest.raises(SystemExit):
        main(args)
    _plant(out, tmp_path / "victim", "link")
    capsys.readouterr()
    monkeypatch.undo()  # the jobs as they are
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("curi episodes: error: the parts folder") and "symlink" in err[0]
    assert {p: p.read_bytes() for p in files} == files and not out.exists()


# --- the run summary of curi train and curi baselines ---------------------------------------

TINY_TRAIN = [
    "bank=tiny",
    "train=tiny",
    "train.steps=2",
    "train.eval_every=2",
    "train.checkpoint_every=2",
    "train.val_episodes=4",
    "train.batch_size=2",
    "train.train_episodes=40",
    "progress=false",
]


def _train_cfg(bank_dir: Path, out: Path):
    from hydra import compose, initialize_config_module

    over = [*TINY_TRAIN, f"data_dir={bank_dir.parent}", f"output_dir={out}"]
    with initialize_config_module(config_module="curi.conf", version_base="1.3"):
        return compose(config_name="train", overrides=over)


def _outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside.json"
    target.write_text('{"steps": 999}\n')
    return target


def test_train_replaces_a_symlinked_summary_never_writing_its_target(tiny_bank_dir, tmp_path):
    from curi.models import cli as models_cli

    run, target = tmp_path / "run", _outside(tmp_path)
    run.mkdir()
    (run / "summary.json").symlink_to(target)
    models_cli.train(_train_cfg(tiny_bank_dir, run))
    assert target.read_text() == '{"steps": 999}\n'
    assert not (run / "summary.json").is_symlink()
    assert json.loads((run / "summary.json").read_text())["steps"] == 2
    # The finished run again, a link planted meanwhile: its target is not taken for the run's
    # summary; the summary is written anew in its place.
    (run / "summary.json").unlink()
    (run / "summary.json").symlink_to(target)
    models_cli.train(_train_cfg(tiny_bank_dir, run))
    assert target.read_text() == '{"steps": 999}\n'
    assert not (run / "summary.json").is_symlink()
    assert json.loads((run / "summary.json").read_text())["steps"] == 2


def test_train_refuses_a_folder_at_its_summary_before_training(tiny_bank_dir, tmp_path):
    from curi.models import cli as models_cli

    run = tmp_path / "run"
    (run / "summary.json").mkdir(parents=True)
    with pytest.raises(ConfigError, match="summary.json is a folder") as e:
        models_cli.train(_train_cfg(tiny_bank_dir, run))
    assert "\n" not in str(e.value)
    assert not (run / "checkpoints").exists()  # refused before any step


def test_a_fifo_summary_does_not_block_train(tiny_bank_dir, tmp_path):
    """In a process of its own, stopped after 600 s (a run takes seconds): a FIFO at
    ``summary.json`` is replaced by the atomic write, never opened (that blocks for ever)."""
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "summary.json")
    args = [*TINY_TRAIN, f"data_dir={tiny_bank_dir.parent}", f"output_dir={run}"]
    r = run_curi("train", *args, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (run / "summary.json").is_file()
    assert json.loads((run / "summary.json").read_text())["steps"] == 2
    # Finished, a FIFO there again: the rerun writes the summary anew, never reads the FIFO.
    (run / "summary.json").unlink()
    os.mkfifo(run / "summary.json")
    r = run_curi("train", *args, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 2


# Two small configurations of `curi baselines`, as its own tests use (a CPU run takes seconds).
SMALL = (
    "configs=[{name: rn, modality: schema, pooling: {name: relation_net, g_dim: 16, "
    "g_layers: 2, f_hidden: [16]}, splits: [concept_iid]}, {name: tr, modality: schema, "
    "pooling: {name: transformer, d_model: 16, num_layers: 1, dim_feedforward: 16}, "
    "splits: [concept_iid]}]"
)


def test_baselines_replace_a_symlinked_or_fifo_summary(tiny_bank_dir, tmp_path):
    """In a process of its own, stopped after 600 s (the sweep takes under a minute): a run's
    ``summary.json`` a symlink (its target untouched) and another's a FIFO (never opened)."""
    out, target = tmp_path / "O", _outside(tmp_path)
    runs = {name: out / "runs" / name / "concept_iid" / "seed0" / "train" for name in ("rn", "tr")}
    for folder in runs.values():
        folder.mkdir(parents=True)
    (runs["rn"] / "summary.json").symlink_to(target)
    os.mkfifo(runs["tr"] / "summary.json")
    args = [*TINY_TRAIN, "embed_dim=16", "episodes=6", SMALL]
    args += [f"data_dir={tiny_bank_dir.parent}", f"output_dir={out}"]
    r = run_curi("baselines", *args, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert target.read_text() == '{"steps": 999}\n'
    for folder in runs.values():
        assert not (folder / "summary.json").is_symlink()
        assert json.loads((folder / "summary.json").read_text())["steps"] == 2
        assert (folder.parent / "result.json").is_file()

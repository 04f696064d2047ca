"""`curi gap` keeps its rows: each (split, negatives) row is saved as it finishes (gap.json, a
partial gap.md and a gap.partial marker until the last row), the same command run again
computes only the missing rows and ends with the table an uninterrupted run writes, a folder
made with other settings is refused, and Ctrl-C or SIGTERM ends the command in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from curi.cli import main
from curi.oracles import gap_folder
from curi.oracles.gap import _Scorer
from curi.signals import Interrupted

TIMINGS = ("seconds", "stage_seconds")


def _gap(data_dir: Path, out: Path, *extra: str) -> None:
    main(
        [
            "gap",
            "bank=tiny",
            f"data_dir={data_dir}",
            "episodes.test=300",
            "workers=1",
            "progress=false",
            f"output_dir={out}",
            *extra,
        ]
    )


def _saved(out: Path) -> bool:
    """Whether gap.json holds a row (it is written whole: `curi.atomic`)."""
    return (out / "gap.json").exists() and bool(json.loads((out / "gap.json").read_text()))


def _rows(out: Path) -> list[dict]:
    rows = json.loads((out / "gap.json").read_text())
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]


def test_an_interrupted_table_is_finished_by_the_same_command(
    tiny_bank_dir, tmp_path, monkeypatch, capsys
):
    data, splits = tiny_bank_dir.parent, "splits=[instance_iid,concept_iid,counting]"
    _gap(data, tmp_path / "whole", splits)
    whole = _rows(tmp_path / "whole")
    assert len(whole) == 6 and not (tmp_path / "whole" / gap_folder.PARTIAL).exists()
    capsys.readouterr()

    out = tmp_path / "part"
    save = gap_folder.GapFolder.save

    def stop_after_two(self, rows, **kw):
        save(self, rows, **kw)
        if len(rows) == 2:  # as if Ctrl-C came while the third row was being scored
            raise Interrupted(signal.SIGINT)

    with monkeypatch.context() as m:
        m.setattr(gap_folder.GapFolder, "save", stop_after_two)
        with pytest.raises(SystemExit) as e:
            _gap(data, out, splits)
    assert e.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"curi gap: stopped by SIGINT; 2 of 6 rows kept in {out / 'gap.json'}; "
        f"the same command with output_dir={out} computes the rest"
    ]
    assert _rows(out) == whole[:2]
    assert (out / gap_folder.PARTIAL).is_file()
    assert (out / "gap.md").read_text().startswith("# Compositionality gap (partial: 2 of 6 rows)")
    assert not (out / "gap.png").exists()

    scored = set()
    call = _Scorer.__call__

    def counting(self, split, negatives, start, stop):
        scored.add((split.name, negatives))
        return call(self, split, negatives, start, stop)

    monkeypatch.setattr(_Scorer, "__call__", counting)
    _gap(data, out, splits)
    assert scored == {(r["split"], r["negatives"]) for r in whole[2:]}
    assert _rows(out) == whole
    assert not (out / gap_folder.PARTIAL).exists()
    assert (out / "gap.md").read_text().startswith("# Compositionality gap\n")
    assert (out / "gap.png").is_file()


@pytest.mark.parametrize(
    "change, differs",
    [(["episodes.test=40"], "episodes"), (["splits=[counting,boolean]"], "splits")],
)
def test_a_folder_made_with_other_settings_is_refused(
    tiny_bank_dir, tmp_path, capsys, change, differs
):
    data, few = tiny_bank_dir.parent, ["splits=[counting]", "negatives=[hard]"]
    _gap(data, tmp_path, *few, "episodes.test=30")
    before = (tmp_path / "gap.json").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        _gap(data, tmp_path, *few, "episodes.test=30", *change)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0] == (
        f"curi gap: error: {tmp_path} holds a gap table made with other settings ({differs}); "
        "use another output_dir, or the same settings to finish it"
    )
    assert (tmp_path / "gap.json").read_text() == before


def test_a_table_without_its_settings_is_refused(tiny_bank_dir, tmp_path, capsys):
    (tmp_path / "gap.json").write_text("[]\n")
    with pytest.raises(SystemExit) as e:
        _gap(tiny_bank_dir.parent, tmp_path, "splits=[counting]")
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [
        f"curi gap: error: {tmp_path} holds a gap table without its gap.settings.json; "
        "remove it (or the folder) to compute the table again"
    ]


def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT's default in the command: a test run started in the background inherits it
    ignored, and a command leaves an ignored signal ignored (as a shell's background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_signal_ends_the_command_in_one_line_keeping_the_finished_rows(
    tiny_bank_dir, tmp_path, signum
):
    out = tmp_path / "gap"
    args = ["bank=tiny", f"data_dir={tiny_bank_dir.parent}", "episodes.test=1000"]
    args += ["workers=2", "progress=false", f"output_dir={out}"]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from curi.cli import main; main()", "gap", *args],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    try:
        deadline = time.monotonic() + 600  # a hang guard, not a speed check
        while not _saved(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _saved(out), "no row was saved"
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"curi gap: stopped by {name}; "), err
    n = len(json.loads((out / "gap.json").read_text()))
    assert lines[0].endswith(
        f"{n} of 18 rows kept in {out / 'gap.json'}; "
        f"the same command with output_dir={out} computes the rest"
    )
    assert 1 <= n < 18 and (out / gap_folder.PARTIAL).is_file()

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


# --- resuming checks the finished rows (docs/reliability.md, "Fourth round") ---------------
FEW = ("splits=[concept_iid,counting]", "episodes.test=30")  # 4 rows, a few seconds


@pytest.fixture(scope="module")
def finished(tiny_bank_dir, tmp_path_factory) -> Path:
    """A finished table of 4 rows (copied by each test that changes it)."""
    out = tmp_path_factory.mktemp("gap") / "whole"
    _gap(tiny_bank_dir.parent, out, *FEW)
    return out


def _copy(finished: Path, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / "gap"
    shutil.copytree(finished, out, ignore=shutil.ignore_patterns(".hydra", "gap.log"))
    return out


@pytest.fixture
def scored(monkeypatch) -> set:
    """The (split, negatives) rows the command scores (any episode of them)."""
    rows, call = set(), _Scorer.__call__

    def counting(self, split, negatives, start, stop):
        rows.add((split.name, negatives))
        return call(self, split, negatives, start, stop)

    monkeypatch.setattr(_Scorer, "__call__", counting)
    return rows


def _edit(out: Path, change) -> None:
    rows = json.loads((out / "gap.json").read_text())
    (out / "gap.json").write_text(json.dumps(change(rows), indent=2) + "\n")


def _set(i: int, **values):
    def change(rows):
        rows[i].update(values)
        return rows

    return change


def _key(row: dict) -> tuple[str, str]:
    return row["split"], row["negatives"]


def test_a_fresh_table_stores_the_digest_of_each_row_and_rows_keep_their_keys(finished):
    from curi.oracles.gap import ROW_KEYS

    rows = json.loads((finished / "gap.json").read_text())
    stored = json.loads((finished / gap_folder.DIGESTS).read_text())["sha256"]
    assert sorted(stored) == sorted(gap_folder.row_digest(r) for r in rows)
    for row in rows:  # the keys checked on resume are those of a fresh row, no more
        assert set(row) == gap_folder._KEYS and set(ROW_KEYS) <= set(row)
        settings = json.loads((finished / "gap.settings.json").read_text())
        assert gap_folder._fault(row, settings) is None


@pytest.mark.parametrize(
    "change, dropped, why",
    [
        (_set(0, map_random=0.123), [0], "differs from the row written"),
        (_set(1, map_strong=0.123), [1], "has map_gap = "),
        (_set(2, map_strong=float("nan")), [2], "has map_strong = nan, not a rate in [0, 1]"),
        (_set(3, cba_weak=1.5), [3], "has cba_weak = 1.5, not a rate in [0, 1]"),
        (_set(0, d_atom=2.0), [0], "has d_atom = 2.0, not a divergence in [0, 1]"),
        (_set(1, episodes=29), [1], "counts 29 episodes, not 30"),
        (_set(2, note="mine"), [2], "has keys no row has (note)"),
        (lambda r: [*r, dict(r[3], map_prior=0.5)], [3], "is in the file 2 times"),
        (lambda r: [dict(x, seconds=x["seconds"] + 1) for x in r], [0, 1, 2, 3], "differs"),
    ],
    ids=["digest", "gap", "nan", "rate", "divergence", "episodes", "key", "twice", "every"],
)
def test_a_finished_row_that_fails_a_check_is_scored_again(
    tiny_bank_dir, finished, tmp_path, capsys, scored, change, dropped, why
):
    whole = _rows(finished)
    out = _copy(finished, tmp_path)
    _edit(out, change)
    _gap(tiny_bank_dir.parent, out, *FEW)
    assert scored == {_key(whole[i]) for i in dropped}
    assert _rows(out) == whole  # the uninterrupted table, each row once
    logged = [line for line in capsys.readouterr().out.splitlines() if "scoring it again" in line]
    assert len(logged) == len(dropped), logged
    for i, line in zip(dropped, logged, strict=True):
        split, negatives = _key(whole[i])
        assert f"row {split}/{negatives} " in line and why in line, line


def test_rows_an_older_curi_wrote_are_kept_on_their_values(
    tiny_bank_dir, finished, tmp_path, capsys, scored
):
    """A folder without digests (curi before them) resumes: rows of sound values are kept
    as they are, with one line saying they were not checked against digests; a row of
    unsound values is scored again."""
    whole = _rows(finished)
    out = _copy(finished, tmp_path)
    (out / gap_folder.DIGESTS).unlink()
    _edit(out, _set(1, map_weak=float("inf")))
    _gap(tiny_bank_dir.parent, out, *FEW)
    assert scored == {_key(whole[1])} and _rows(out) == whole
    log = capsys.readouterr().out
    assert f"no {gap_folder.DIGESTS} (an older curi wrote the table): 3 rows kept" in log
    rows = json.loads((out / "gap.json").read_text())
    stored = json.loads((out / gap_folder.DIGESTS).read_text())["sha256"]
    assert sorted(stored) == sorted(gap_folder.row_digest(r) for r in rows)


@pytest.mark.parametrize(
    "text, says",
    [
        ("{}", "rows file '{j}': the file must be a list, got {{}}"),
        ("[null]", "rows file '{j}': [0] must be an object, got None"),
        ('[{"split": "counting"}]', "rows file '{j}': [0].negatives is missing"),
        (None, "rows file '{j}': [2].map_weak must be a number, got 'abc'"),
        (None, "rows file '{j}': [0].stage_seconds must be an object, got None"),
    ],
    ids=["object", "null", "keys", "abc", "null-value"],
)
def test_a_rows_file_of_the_wrong_shape_is_refused_before_any_scoring(
    tiny_bank_dir, finished, tmp_path, capsys, scored, text, says
):
    out = _copy(finished, tmp_path)
    if text is not None:
        (out / "gap.json").write_text(text)
    elif "abc" in says:
        _edit(out, _set(2, map_weak="abc"))
    else:
        _edit(out, _set(0, stage_seconds=None))
    before = (out / "gap.json").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        _gap(tiny_bank_dir.parent, out, *FEW)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("curi gap: error: " + says.format(j=out / "gap.json")), err
    assert not scored and (out / "gap.json").read_text() == before


@pytest.mark.parametrize("name", [gap_folder.PARTIAL, gap_folder.DIGESTS, "gap.png"])
def test_a_folder_of_yours_under_a_name_curi_gap_writes_is_refused_not_deleted(
    tiny_bank_dir, finished, tmp_path, capsys, scored, name
):
    out = _copy(finished, tmp_path)
    (out / name).unlink(missing_ok=True)
    (out / name).mkdir()
    (out / name / "yours.txt").write_text("keep me")
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        _gap(tiny_bank_dir.parent, out, *FEW)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [
        f"curi gap: error: {out / name} is a folder, not the file curi gap writes there; "
        "move it out of the folder (curi gap deletes nothing of yours), or use another "
        "output_dir"
    ]
    assert (out / name / "yours.txt").read_text() == "keep me" and not scored


def test_a_damaged_digests_file_is_refused_in_one_line(tiny_bank_dir, finished, tmp_path, capsys):
    out = _copy(finished, tmp_path)
    (out / gap_folder.DIGESTS).write_text('{"sha256": 3}')
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        _gap(tiny_bank_dir.parent, out, *FEW)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [
        f"curi gap: error: digests file '{out / gap_folder.DIGESTS}': sha256 must be a list, "
        "got 3; remove the folder to start again"
    ]


def test_a_stop_between_the_digests_and_the_rows_loses_no_row(finished, tmp_path, monkeypatch):
    """The digests are written before gap.json, with those of the rows written before: a
    stop between the two files (here: as a row gets its divergences) leaves every row in
    gap.json with its digest."""
    out = _copy(finished, tmp_path)
    settings = json.loads((out / "gap.settings.json").read_text())
    whole = json.loads((out / "gap.json").read_text())
    before = [{k: v for k, v in r.items() if not k.startswith("d_")} for r in whole]
    (out / "gap.json").unlink()
    (out / gap_folder.DIGESTS).unlink()
    folder = gap_folder.GapFolder(out, settings, total=4)
    assert folder.claim() == []
    folder.save(before[:2], meta={})
    write = gap_folder.write_text

    def stop_at_the_rows(path, text):
        if Path(path).name == "gap.json":
            raise Interrupted(signal.SIGTERM)
        return write(path, text)

    monkeypatch.setattr(gap_folder, "write_text", stop_at_the_rows)
    with pytest.raises(Interrupted):
        folder.save(whole[:2], meta={})
    monkeypatch.undo()
    assert gap_folder.GapFolder(out, settings, total=4).claim() == before[:2]


def test_stale_temporaries_are_deleted_and_a_complete_table_says_so(
    tiny_bank_dir, finished, tmp_path, capsys, scored
):
    out = _copy(finished, tmp_path)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    stale = [out / f".gap.json.tmp-{gone}", out / f".gap.png.tmp-{gone}"]
    alive = out / f".gap.json.tmp-{os.getppid()}"  # a live writer's: not ours to delete
    for path in (*stale, alive):
        path.write_text("half")
    _gap(tiny_bank_dir.parent, out, *FEW)
    assert not any(p.exists() for p in stale) and alive.read_text() == "half"
    log = capsys.readouterr().out
    assert f"{out}: all 4 rows done: the table is complete" in log
    assert "computing the rest" not in log and not scored
    assert _rows(out) == _rows(finished)


def test_an_empty_output_dir_is_refused_not_the_working_folder(
    tiny_bank_dir, tmp_path, capsys, monkeypatch
):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(SystemExit) as e:
        _gap(tiny_bank_dir.parent, "", "splits=[counting]")  # type: ignore[arg-type]
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [
        "curi gap: error: output_dir is empty; give a folder, or leave output_dir out"
    ]
    assert list(work.iterdir()) == []

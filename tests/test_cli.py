"""End-to-end tests of the `curi` command (subprocesses, as a user runs it)."""

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from conftest import run_curi

ROOT = Path(__file__).resolve().parent.parent


def test_help_lists_commands(tmp_path):
    out = run_curi("--help", cwd=tmp_path)
    assert out.returncode == 0
    assert "bank" in out.stdout
    # each command's line is the first sentence of its config's help header
    assert "  difficulty       predict which test concepts are hard" in out.stdout
    assert "  episodes render  re-render exported episodes" in out.stdout


def test_help_and_an_unknown_command_import_no_layer(tmp_path):
    """Nor numpy: the package's public names load on first use, so `curi --help` is quick."""
    code = (
        "import sys\nfrom curi.cli import main\nmain(['--help'])\n"
        "try:\n    main(['bogus'])\nexcept SystemExit:\n    pass\n"
        "heavy = ('torch', 'hydra', 'omegaconf', 'numpy')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy"
        " or m.startswith(('curi.models', 'curi.oracles', 'curi.renderers'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"


def test_version(tmp_path):
    for flag in ("--version", "-V"):
        out = run_curi(flag, cwd=tmp_path)
        assert out.returncode == 0 and out.stdout == f"curi {version('curi')}\n"


def test_bank_builds_tiny_and_reports(tmp_path):
    out = run_curi(
        "bank",
        "bank=tiny",
        f"data_dir={tmp_path / 'data'}",
        "progress=false",
        "bank.num_draws=5000",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout[out.stdout.index("{") :])
    assert report["concepts"] > 50
    assert (tmp_path / "data" / "tiny" / "manifest.json").is_file()
    # no run folder is left behind: `curi bank` keeps its config and log only in output_dir=
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    # asking for a different bank at the same place is one clear error, exit code 2
    again = run_curi(
        "bank", "bank=tiny", f"data_dir={tmp_path / 'data'}", "bank.num_draws=6000", cwd=tmp_path
    )
    assert again.returncode == 2
    assert re.search(r"curi bank: error: a different bank already exists", again.stderr)
    assert "Traceback" not in again.stderr


def test_unknown_command_and_bad_override(tmp_path):
    out = run_curi("bogus", cwd=tmp_path)
    assert out.returncode == 2 and "unknown command 'bogus'" in out.stderr
    out = run_curi("bank", "bank=nope", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr == (
        "curi bank: error: unknown bank 'nope'; valid: default, paper, paper_legacy, tiny\n"
    )


def test_a_commands_timeout_in_the_tests_is_a_hang_guard():
    """`run_curi`'s 300 s stopped a difficulty run that takes 52 s alone on a loaded 2-core
    machine: a timeout guards against a hang, far above what a busy machine needs."""
    import inspect

    from conftest import run_curi as run

    assert inspect.signature(run).parameters["timeout"].default >= 600


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    test_cmd = blocks[1].strip()
    assert "pytest" in test_cmd
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def test_sweep_with_m_runs_each_job_and_names_the_log(tiny_bank_dir, tmp_path):
    data = f"data_dir={tiny_bank_dir.parent}"
    out = run_curi("split", "-m", "bank=tiny", data, "split=binding_color,counting", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    runs = sorted(p for p in (tmp_path / "multirun" / "split").glob("*/*") if p.is_dir())
    assert [r.name for r in runs] == ["0", "1"]  # a sweep without output_dir= keeps its record
    assert all((r / "split.log").is_file() for r in runs)
    assert '"split": "counting"' in out.stdout


def _file_size_limit():  # in the child, before it runs: RLIMIT_FSIZE of 64 KiB (`ulimit -f 64`)
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))


def test_a_full_disk_is_one_line(tiny_bank_dir, tmp_path):
    """A file size limit (or a full disk) ended every writer in an `OSError: File too large`
    traceback; Python ignores SIGXFSZ, so the process lives to say it in one line, and the
    atomic writes leave nothing behind."""
    out = tmp_path / "d" / "eps.parquet"
    args = ["episodes", "bank=tiny", f"data_dir={tiny_bank_dir.parent}", "n=200", f"out={out}"]
    r = subprocess.run(
        [sys.executable, "-c", "from curi.cli import main; main()", *args, "progress=false"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_file_size_limit,
    )
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"curi episodes: error: could not write out={out}: the disk is full or a file size "
        "limit was hit (Error writing bytes to file. Detail: [errno 27] File too large)"
    )
    assert list((tmp_path / "d").iterdir()) == []


def test_a_checkpoint_on_a_full_disk_is_one_line(tmp_path):
    """torch.save ends a failed write in its own RuntimeError ("unexpected pos ..."); written
    through a file object, that error keeps the OSError as its context, which the command
    line turns into one line, and the temporary file is gone."""
    code = (
        "import resource, sys, torch\n"
        "from pathlib import Path\n"
        "from curi.cli import _storage_error\n"
        "from curi.models.checkpoint import save_checkpoint\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (16384, resource.RLIM_INFINITY))\n"
        "try:\n"
        "    save_checkpoint({'model': {'w': torch.zeros(10**5)}}, Path(sys.argv[1]))\n"
        "except RuntimeError as e:\n"
        "    print(_storage_error(e, {'output_dir': 'R'}))\n"
    )
    path = tmp_path / "last.pt"
    r = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == (
        "could not write output_dir=R: the disk is full or a file size limit was hit "
        "(File too large)"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_file_name_too_long_is_one_line(tiny_bank_dir, tmp_path, capsys, monkeypatch):
    """`curi split save=` with a name whose temporary name is over 255 bytes ended in
    `OSError: File name too long` with a traceback; it is refused before the split is made."""
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    save = tmp_path / ("s" * 245 + ".json")
    args = ["bank=tiny", f"data_dir={tiny_bank_dir.parent}", "split=binding_color"]
    with pytest.raises(SystemExit) as e:
        main(["split", *args, f"save={save}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"curi split: error: save={save}: the name 'ssss")
    assert err[0].endswith("is 250 bytes long; use at most 239 (the file system allows 255)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("flag", "says"),
    [("--nosuch", "'--nosuch'"), ("--multi", "'--multi' (did you mean '--multirun'?)")],
)
def test_a_flag_hydra_does_not_know_is_one_line(flag, says, tmp_path, capsys, monkeypatch):
    """`curi gap --nosuch` ended in Hydra's 8-line usage (issue 44's sweep of bad inputs); an
    abbreviation of a flag is refused too rather than read as the flag."""
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["gap", flag, "seed=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [
        f"curi gap: error: unknown flag {says}; give options "
        "as key=value (the flags Hydra takes: --help, -m, "
        "--cfg job, ...)"
    ], err
    assert list(tmp_path.iterdir()) == []


def test_a_required_value_left_out_is_one_line(tmp_path, capsys, monkeypatch):
    """`curi baselines collect` without output_dir= (``???`` in its config) ended in an
    omegaconf traceback from the command's check (issue 44's sweep of bad inputs)."""
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    for command in (["baselines", "collect"], ["curve", "collect"]):
        with pytest.raises(SystemExit) as e:
            main(command)
        err = capsys.readouterr().err.strip().splitlines()
        name = " ".join(command)
        assert e.value.code == 2 and err == [
            f"curi {name}: error: output_dir= is required; `--help` says what it takes"
        ], err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("command", "deleted"), [("gap", "~bank"), ("gap", "~seed"), ("gap", "~episodes.test")]
)
def test_deleting_an_option_the_command_reads_is_one_line(
    command, deleted, tmp_path, capsys, monkeypatch
):
    """`curi gap ~bank` (or ~seed) ended in an omegaconf traceback from the command's check
    (issue 44's sweep of bad inputs); a deletion that ``+key=`` puts back stays allowed."""
    from curi.cli import main
    from curi.options import check_override_keys, load_options

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main([command, deleted])
    err = capsys.readouterr().err.strip().splitlines()
    key = deleted[1:]
    assert e.value.code == 2 and err == [
        f"curi {command}: error: {deleted} deletes an option this command reads; set it with "
        f"{key}=VALUE instead"
    ], err
    assert list(tmp_path.iterdir()) == []
    check_override_keys(["~split", "+split={name: a, rule: all}"], load_options("split"))


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (
            "checkpoints=[a,b]",
            "checkpoints=['a', 'b'] is not a mapping; give {split name: checkpoint, ...}",
        ),
        ("checkpoints=5", "checkpoints=5 is not a mapping; give {split name: checkpoint, ...}"),
        ("threshold=2", "threshold must be a number in [0, 1], got 2"),
    ],
)
def test_difficulty_options_are_one_line_before_any_work(
    option, says, tmp_path, capsys, monkeypatch
):
    """`curi difficulty checkpoints=[a,b]` ended in an omegaconf traceback (a list has no
    .values()) in the command's check, and threshold=2 (every concept hard: AP is at most 1)
    ran to the end (issue 44's sweep of bad inputs)."""
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["difficulty", option])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [f"curi difficulty: error: {says}"], err
    assert list(tmp_path.iterdir()) == []


def test_split_save_not_a_json_file_is_one_line(tmp_path, capsys, monkeypatch):
    """`curi split save=x.txt` wrote a file that ``split=x.txt`` does not read back (a split
    file is a FILE.json): refused before any work (issue 44's sweep of bad inputs)."""
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["split", "save=x.txt"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [
        "curi split: error: save=x.txt does not end in .json; give save=FILE.json"
    ], err
    assert list(tmp_path.iterdir()) == []

"""What the command line checks before anything runs, and what it takes literally: a name read
from a split file is never resolved as an OmegaConf interpolation (a `${oc.env:...}` in a shared
file would copy a user's secret into reports and logs), while the user's own interpolations
keep working; every enumerated option, empty list and config-group preset of every command is
refused in one line (exit 2) before a bank opens; ``GROUP={...}`` replaces the preset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from conftest import run_curi
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from curi import cli
from curi.cli import _group_values, _literal, main
from curi.errors import OptionError
from curi.options import _flatten, check_config, choices, load_options
from curi.presets import list_presets

SECRET = "s3cr3t-value-never-printed"


def _one_line_error(r, start: str) -> str:
    assert r.returncode == 2, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), r.stderr[-3000:]
    return lines[0]


def _commands() -> list[str]:
    return sorted(ep.name for ep in entry_points(group="curi.commands"))


def _everything(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


# --- strings read from files are literal ------------------------------------------------------
TRICKY = [
    "${oc.env:HOME}",
    "${nope}",
    "\\${a}",
    "\\\\${a}",
    "it's",
    "a\\b",
    "x\\",
    "\\'",
    "${a}${b}",
    "$${x}",
    "a,b=c",
    "}{",
]


@pytest.mark.parametrize("text", TRICKY)
def test_a_literal_override_value_reaches_the_config_as_written(text):
    parser = OverridesParser.create()
    for form in ("x={}", "+split={{name: {}, rule: file}}"):
        value = parser.parse_override(form.format(_literal(text))).value()
        value = value if isinstance(value, str) else value["name"]
        resolved = OmegaConf.to_container(OmegaConf.create({"v": value}), resolve=True)
        assert resolved["v"] == text


@pytest.fixture(scope="module")
def split_files(tiny_bank_dir, tmp_path_factory):
    """A saved split of the tiny bank, renamed `${oc.env:CURI_TEST_SECRET}` and `${nope}`."""
    root = tmp_path_factory.mktemp("splits")
    r = run_curi(
        "split",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "progress=false",
        f"save={root / 'saved.json'}",
        cwd=root,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((root / "saved.json").read_text())
    out = {}
    for stem, name in [("secret", "${oc.env:CURI_TEST_SECRET}"), ("nope", "${nope}")]:
        out[stem] = root / f"{stem}.json"
        out[stem].write_text(json.dumps({**doc, "name": name}))
    return out


def test_a_split_files_name_is_never_resolved(split_files, tiny_bank_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CURI_TEST_SECRET", SECRET)
    data = f"data_dir={tiny_bank_dir.parent}"
    r = run_curi(
        "split",
        "bank=tiny",
        data,
        "progress=false",
        f"split={split_files['secret']}",
        f"output_dir={tmp_path / 's'}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout[r.stdout.index("{") :])["split"] == "${oc.env:CURI_TEST_SECRET}"
    out = tmp_path / "gap"
    r = run_curi(
        "gap",
        "bank=tiny",
        data,
        f"split={split_files['secret']}",
        "negatives=hard",
        "episodes.test=10",
        "workers=1",
        "progress=false",
        f"output_dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads((out / "gap.json").read_text())
    assert [x["split"] for x in rows] == ["${oc.env:CURI_TEST_SECRET}"]
    assert "${oc.env:CURI_TEST_SECRET}" in (out / "gap.md").read_text()
    everything = r.stdout + r.stderr + _everything(tmp_path)
    assert SECRET not in everything and (out / "gap.log").is_file()


def test_an_unresolvable_name_is_no_traceback(split_files, tiny_bank_dir, tmp_path):
    r = run_curi(
        "split",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "progress=false",
        f"split={split_files['nope']}",
        cwd=tmp_path,
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert json.loads(r.stdout[r.stdout.index("{") :])["split"] == "${nope}"


def test_the_users_own_interpolations_still_resolve(tiny_bank_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CURI_TEST_SUB", "sub")
    r = run_curi(
        "gap",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "split=concept_iid",
        "negatives=hard",
        "episodes.test=10",
        "workers=1",
        "progress=false",
        "output_dir=${hydra:runtime.cwd}/${oc.env:CURI_TEST_SUB}/x",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    out = tmp_path / "sub" / "x"
    assert (out / "gap.json").is_file() and (out / ".hydra" / "config.yaml").is_file()


def test_a_value_made_a_list_is_not_resolved_twice(tiny_bank_dir, tmp_path, monkeypatch):
    """``splits=X`` becomes ``[X]``; the resolved X was written back into the config and
    resolved again, so a variable holding ``${...}`` was read as an interpolation."""
    monkeypatch.setenv("CURI_TEST_SECRET", SECRET)
    monkeypatch.setenv("CURI_TEST_SPLITS", "${oc.env:CURI_TEST_SECRET}")
    r = run_curi(
        "gap",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "negatives=hard",
        "splits=${oc.env:CURI_TEST_SPLITS}",
        f"output_dir={tmp_path / 'o'}",
        cwd=tmp_path,
    )
    line = _one_line_error(r, "curi gap: error: unknown split '${oc.env:CURI_TEST_SECRET}'")
    assert SECRET not in line + r.stdout + _everything(tmp_path)


def test_a_fifo_as_split_file_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "s.json"
    os.mkfifo(fifo)
    r = run_curi(
        "split",
        "bank=tiny",
        f"data_dir={tmp_path / 'none'}",
        f"split={fifo}",
        cwd=tmp_path,
        timeout=300,
    )
    line = _one_line_error(r, "curi split: error: split file")
    assert "a FIFO, not a regular file" in line and not (tmp_path / "none").exists()


# --- enumerated options, empty lists and presets, checked up front ---------------------------
def _enumerated() -> list[tuple[str, str]]:
    out = []
    for command in _commands():
        opts = load_options(command.replace(".", "_"))
        out += [(command, k) for k, _ in _flatten(opts.defaults) if k in choices()]
    return out


def test_the_enumerated_options_cover_every_command():
    found = set(_enumerated())
    for command in ("gap", "eval", "baselines", "difficulty", "rules"):
        assert {(command, "prior"), (command, "likelihood")} <= found
    for command in ("episodes", "rules", "show", "train", "eval", "difficulty", "baselines"):
        assert (command, "negatives") in found
    more = {
        ("gap", "negatives"),
        ("episodes", "subset"),
        ("episodes", "media"),
        ("rules", "hypotheses"),
        ("rules", "kinds"),
        ("curve", "mcd.compounds"),
        ("difficulty", "predictors"),
        ("difficulty", "threshold"),
    }
    assert more <= found


def _nested(key: str, value) -> dict:
    head, _, rest = key.partition(".")
    return {head: _nested(rest, value) if rest else value}


@pytest.mark.parametrize(("command", "key"), _enumerated())
def test_every_enumerated_option_refuses_a_value_outside_its_choices(command, key):
    """Every declared closed set: each value passes, and a typo or a bool is one `OptionError`
    line naming the option, the known values and, for the typo, the closest one."""
    opts = load_options(command.replace(".", "_"))
    default = dict(_flatten(opts.defaults))[key]
    valid = [0.5 if v is float else v for v in choices()[key]]  # float: any number
    for value in valid:  # every valid value passes, alone or in a list
        check_config(_nested(key, [value] if isinstance(default, list) else value), opts)
    names = [v for v in valid if isinstance(v, str)]
    typo = names[0] + names[0][-1]
    for bad in (typo, True):
        with pytest.raises(OptionError) as e:
            check_config(_nested(key, [bad] if isinstance(default, list) else bad), opts)
        line = str(e.value)
        assert "\n" not in line and line.startswith(f"{key} must be one of {', '.join(names)}")
        assert f"got {bad!r}" in line
        if bad == typo:
            assert line.endswith(f"(did you mean {names[0]!r}?)"), line


def test_the_library_and_the_command_line_refuse_a_value_alike(tiny_bank, tmp_path, monkeypatch):
    """`curi.Posterior(bank, prior="pcfgg")` and `curi gap prior=pcfgg` raise the same class
    with the same message (and suggestion); the command line prints it as its one line."""
    from curi import Posterior

    with pytest.raises(OptionError) as lib:
        Posterior(tiny_bank, prior="pcfgg")
    assert isinstance(lib.value, ValueError)
    assert str(lib.value).endswith("(did you mean 'pcfg'?)")
    failed = []
    monkeypatch.setattr(cli, "_fail", lambda name, e: failed.append(e) or sys.exit(2))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["gap", "prior=pcfgg", f"data_dir={tmp_path / 'data'}"])
    assert [(type(e), str(e)) for e in failed] == [(type(lib.value), str(lib.value))]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "override", ["prior=foo", "likelihood=foo", "negatives=[hard,hrd]", "splits=[]", "negatives=[]"]
)
def test_gap_refuses_bad_values_before_the_bank_opens(override, tmp_path):
    data = tmp_path / "data"  # no bank there: the check comes first
    r = run_curi(
        "gap",
        "bank=tiny",
        f"data_dir={data}",
        override,
        "episodes.test=10",
        f"output_dir={tmp_path / 'o'}",
        cwd=tmp_path,
    )
    key = override.split("=")[0]
    line = _one_line_error(r, f"curi gap: error: {key} must ")
    assert ("not be empty" if override.endswith("[]") else "one of") in line
    assert not data.exists()


def _groups() -> list[tuple[str, str, str]]:
    out = []
    for command in _commands():
        opts = load_options(command.replace(".", "_"))
        out += [(command, package, group) for package, (group, _) in opts.groups.items()]
    return out


@pytest.mark.parametrize(("command", "package", "group"), _groups())
def test_a_misspelt_preset_is_one_line_for_every_group_of_every_command(
    command, package, group, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main([*command.split("."), f"{package}=nosuch"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"curi {command.replace('.', ' ')}: error: unknown {package}")
    assert f"valid: {', '.join(list_presets(group))}" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_over_presets_checks_each_one(tmp_path):
    r = run_curi("split", "-m", "split=concept_iid,binding_colr", cwd=tmp_path)
    line = _one_line_error(r, "curi split: error: unknown split 'binding_colr'")
    assert "did you mean 'binding_color'" in line and "saved split file FILE.json" in line


# --- an inline config replaces the preset -----------------------------------------------------
def test_an_inline_group_config_replaces_the_preset():
    opts = load_options("split")
    inline = "split={name: adv, rule: adversarial}"
    assert _group_values([inline, "bank={name: b}"], opts) == [
        "~split",
        "+split={name: adv, rule: adversarial}",
        "~bank",
        "+bank={name: b}",
    ]
    show = load_options("show")  # modality@image: a package of another group is merged
    assert _group_values(["image={width: 8}"], show) == ["image={width: 8}"]


def test_the_readme_inline_split_runs(tiny_bank_dir, tmp_path):
    """README: ``curi split 'split={name: adv, rule: adversarial, variant: nosib, save_dir:
    ...}'`` (it failed with "Key 'variant' is not in struct": it was merged into concept_iid)."""
    adv = tmp_path / "adv"
    r = run_curi(
        "split",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "progress=false",
        f"split={{name: adv, rule: adversarial, variant: nosib, save_dir: {adv}}}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout[r.stdout.index("{") :])
    assert report["split"] == "adv" and report["variant"] == "nosib" and report["test"] > 0
    assert len(list(adv.glob("adv-*.json"))) == report["kept"] > 0


def test_the_readme_inline_splits_list_of_difficulty_runs(tiny_bank_dir, tmp_path):
    out = tmp_path / "d"
    r = run_curi(
        "difficulty",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "splits=[{name: adv, rule: adversarial, variant: nosib}]",
        "episodes_per_concept=1",
        "max_concepts=4",
        "progress=false",
        f"output_dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert (out / "auc.md").is_file()


# --- every refusal before torch, the bank and the run folder ----------------------------------
# (command line, what its one-line error says): something of every command that needs only
# the config and the file system to be refused. In the working folder of the test: a file `f`,
# a file `c.pt` that begins as a checkpoint does, a FIFO `fifo.jsonl`; `none` is missing.
REFUSALS = [
    (["train", "train.batch_size=-4"], "train.batch_size must be an integer in [1, 100000]"),
    (["train", "train=tiny", "train.nosuch=1"], "unknown option 'train.nosuch'"),
    (["train", "resume=none"], "checkpoint not found at none"),
    (["eval", "checkpoint=none"], "checkpoint not found at none"),
    (["eval", "checkpoint=c.pt", "episodes=0"], "episodes must be an integer"),
    (["eval", "checkpoint=f"], "f is not a checkpoint: it is not a torch file"),
    (["rules", "theta=2"], "theta must be a number in (0.5, 1.0], got 2"),
    (["rules", "rules=none"], "rules file 'none' does not exist"),
    (["lm", "rules", "out=o", "theta=2"], "theta must be a number"),
    (["gap", "splits=[nosuch]"], "unknown split 'nosuch'; known: adversarial_ext, binding_color"),
    (["gap", "-m", "seed=0,-1"], "seed must be an integer"),
    (["gap", "bank=tiny", "data_dir=none"], "no bank 'tiny' in data_dir 'none'"),
    (["audit", "splits=[nosuch]"], "unknown split 'nosuch'; known: adversarial_ext"),
    (["difficulty", "checkpoint=none"], "checkpoint not found at none"),
    (["difficulty", "splits=[boolean,none.json]"], "split file"),
    (["episodes", "render"], "in= is required"),
    (["episodes", "render", "in=none.jsonl", "out=o"], "episode file not found at none.jsonl"),
    (["episodes", "render", "in=fifo.jsonl", "out=o"], "'fifo.jsonl' is a FIFO, not a"),
    (["episodes", "n=0"], "n must be an integer"),
    (["episodes", "jobs=2", "hydra/launcher=submitit_slurm"], "hydra/launcher=submitit_slurm"),
    (["baselines", "hydra/launcher=submitit_slurm"], "hydra/launcher=submitit_slurm needs a"),
    (["baselines", "collect", "output_dir=."], " holds no baseline sweep"),
    (["curve", "step=0"], "step must be a number"),
    (["curve", "collect", "output_dir=."], " holds no divergence curve"),
    (["lm", "compare", "tasks=none", "results=none"], "none is not a curi task folder"),
    (["lm", "export", "out=o", "tokenizer=/none/tok"], "tokenizer=/none/tok does not exist"),
    (["lm", "export", "out=o", "episodes=none.jsonl"], "episode file not found"),
    (["score", "tasks=none", "predictions=none"], "tasks file 'none' does not exist"),
    (["show", "scene=-1"], "scene must be an integer"),
    (["split", "save=."], "save=. is a folder"),
    (["bank", "data_dir="], "data_dir is empty"),
    (["bank", "data_dir=f"], "data_dir 'f' is a file, not a folder"),
    (["gap", "output_dir=f"], "output_dir="),
]


def _refuse_all(cases: list) -> str:
    """Python that runs every case of `cases` through `curi.cli.main` in one process, with
    `curi.bank.load_bank` replaced by a failure, and prints each case's exit status and
    stderr, then the heavy modules imported (as JSON)."""
    return (
        "import contextlib, io, json, sys\n"
        "import curi.bank\n"
        "def opened(*a, **k):\n    raise SystemExit('a bank was opened')\n"
        "curi.bank.load_bank = opened\n"
        "from curi.cli import main\n"
        "out = []\n"
        f"for args in {cases!r}:\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n            main(args)\n            code = 0\n"
        "        except SystemExit as e:\n            code = e.code\n"
        "    out.append([code, err.getvalue()])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('torch', 'sklearn', 'matplotlib', 'transformers', 'lm_eval'))\n"
        "print(json.dumps({'results': out, 'heavy': heavy}))\n"
    )


def test_every_refusal_comes_before_torch_the_bank_and_a_run_folder(tmp_path):
    """Each command refuses what the config and the file system show, in one line, before it
    imports torch, opens a bank or lets Hydra make its run folder (a refused `curi gap` left
    outputs/gap/<time>/ with .hydra/ and an empty log; `curi train train.batch_size=-4` and
    `curi lm` imported torch first, `curi gap splits=[nosuch]` loaded the bank)."""
    (tmp_path / "f").write_text("x")
    (tmp_path / "c.pt").write_bytes(b"PK\x03\x04")  # a zip archive's first bytes, as torch's
    os.mkfifo(tmp_path / "fifo.jsonl")
    before = sorted(p.name for p in tmp_path.iterdir())
    env = {**os.environ, "CURI_DATA_DIR": str(tmp_path / "data")}
    code = _refuse_all([args for args, _ in REFUSALS])
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    found = json.loads(r.stdout.strip().splitlines()[-1])
    for (args, start), (status, err) in zip(REFUSALS, found["results"], strict=True):
        name = " ".join(a for a in args[:2] if "=" not in a and not a.startswith("-"))
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1, (args, err)
        assert lines[0].startswith(f"curi {name}: error: ") and start in lines[0], (args, lines)
    assert found["heavy"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no run folder, no bank


def test_usage_messages_import_no_layer_below_the_command_line(tmp_path):
    """`curi lm` (the subcommands) took a minute and 870 MB: it imported torch to print them."""
    code = (
        "import sys\nfrom curi.cli import main\n"
        "for args in (['lm'], ['lm', 'export', '--help'], ['train', '--help']):\n"
        "    main(args)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sklearn')))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "lm export" in r.stdout and r.stdout.strip().splitlines()[-1] == "[]"
    assert list(tmp_path.iterdir()) == []


# --- output places and data folders ------------------------------------------------------------
def _places(f: Path, locked: Path) -> list[tuple[list[str], str]]:
    """(command line, what its one-line error says) of every kind of output place that cannot
    be written: a file where a folder goes, a folder that is not writable."""
    return [
        (["gap", f"output_dir={f}"], f"output_dir={f} is a file, not a folder"),
        (["gap", f"output_dir={locked / 'g'}"], f"the folder {locked} is not writable"),
        (["audit", f"output_dir={locked}"], f"the folder {locked} is not writable"),
        (["bank", f"output_dir={locked / 'b'}"], f"the folder {locked} is not writable"),
        (["episodes", "render", "in=e.jsonl", f"out={f}"], f"out={f} is a file, not a folder"),
        (["episodes", "render", "in=e.jsonl", f"out={locked / 'r'}"], "is not writable"),
        (["episodes", f"out={locked / 'e.jsonl'}"], f"the folder {locked} is not writable"),
        (["lm", "export", f"out={f}"], f"out={f} is a file, not a folder"),
        (["lm", "export", f"out={locked / 'lm'}"], f"the folder {locked} is not writable"),
        (["lm", "rules", f"out={locked}"], f"the folder {locked} is not writable"),
        (["rules", f"out={locked / 'r'}"], f"the folder {locked} is not writable"),
        (["show", f"out={locked / 's'}"], f"the folder {locked} is not writable"),
        (["split", f"save={locked / 's.json'}"], f"the folder {locked} is not writable"),
        (["score", "tasks=t", "predictions=p", f"out={locked / 's.json'}"], "is not writable"),
        (["lm", "compare", "tasks=t", "results=r", f"out={locked / 'c'}"], "is not writable"),
        (["bank", f"data_dir={f}"], f"data_dir '{f}' is a file, not a folder; give a folder"),
        (["gap", f"data_dir={f / 'sub'}"], f"data_dir '{f / 'sub'}' is a file (under {f})"),
        (["gap", "data_dir="], "data_dir is empty; give a folder, or leave data_dir out"),
    ]


def test_output_places_that_cannot_be_written_are_one_line(tmp_path, unwritable, capsys):
    """`curi gap output_dir=<a file>` or an unwritable folder, `curi episodes render out=<a
    file>`, `curi lm export out=<a file or unwritable>` ended in tracebacks; `curi bank
    data_dir=` built the bank in the working folder, `data_dir=<a file>` said to build the
    bank there."""
    from curi.cli import main

    f = tmp_path / "f"
    f.write_text("x")
    for args, says in _places(f, unwritable):
        with pytest.raises(SystemExit) as e:
            main(args)
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and says in err[0], (args, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "unwritable"]


def test_a_working_folder_that_is_not_writable_is_one_line(unwritable, capsys, monkeypatch):
    """The default run folder (outputs/gap/<time>) goes under the working folder."""
    from curi.cli import main

    monkeypatch.chdir(unwritable)
    with pytest.raises(SystemExit) as e:
        main(["gap"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"curi gap: error: output_dir={unwritable}/outputs/gap/")
    assert f"the folder {unwritable} is not writable (" in err[0]
    assert err[0].endswith("; give a folder where you can write")


# --- the wording of errors, logs and suggestions ---------------------------------------------
def test_a_misspelt_command_is_one_line_with_the_closest(capsys):
    """`curi bnak` printed the whole usage, with no suggestion."""
    for argv, says in [
        (["bnak"], "curi: error: unknown command 'bnak' (did you mean 'bank'?); commands: "),
        (["lm", "exprot"], "unknown command 'lm exprot' (did you mean 'lm export'?)"),
        (
            ["episodes", "rendr"],
            "unknown command 'episodes rendr' (did you mean 'episodes render'?)",
        ),
    ]:
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and says in err[0], err


def test_known_presets_are_listed_as_words_not_a_python_list():
    """`curi gap splits=[nosuch]` said "known: ['adversarial_ext', 'binding_color', ...]"."""
    from curi.errors import ConfigError
    from curi.presets import list_presets, load_preset

    with pytest.raises(ConfigError) as e:
        load_preset("split", "countng")
    assert str(e.value) == (
        "unknown split 'countng' (did you mean 'counting'?); known: "
        + ", ".join(list_presets("split"))
    )


def test_an_unknown_key_of_a_group_is_one_line_with_its_keys(tmp_path, capsys, monkeypatch):
    """Hydra's six lines ("Could not override ... Key 'nosuch' is not in struct")."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["train", "train=tiny", "train.batch_sise=4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(
        "curi train: error: unknown option 'train.batch_sise' (did you mean 'batch_size'?); "
        "valid: train.alpha, train.amp,"
    )
    assert err[0].endswith("(+train.batch_sise=VALUE adds a key the preset lacks)")
    main(["train", "train=tiny", "train.sampler=loader", "--help"])  # a key the preset has
    assert list(tmp_path.iterdir()) == []


def test_a_run_logs_no_progress_bars_and_no_reuse_line(tiny_bank_dir, tmp_path, capsys):
    """Progress bars go to a terminal only (never into a log or a captured stream), and
    "bank ... already built; reusing it" is a DEBUG line: an error is one line."""
    out = tmp_path / "g"
    args = ["bank=tiny", f"data_dir={tiny_bank_dir.parent}", "splits=[concept_iid]"]
    main(["gap", *args, "negatives=[hard]", "episodes.test=10", "workers=1", f"output_dir={out}"])
    got = capsys.readouterr()
    for text in (got.out, got.err, (out / "gap.log").read_text()):
        assert "%|" not in text and "reusing it" not in text, text
    assert "concept_iid/hard: mAP strong" in (out / "gap.log").read_text()
    with pytest.raises(SystemExit):  # an error after the bank opens: one line in all
        main(["split", *args[:2], "split={name: b, rule: binding, held_out: [nosuch]}"])
    got = capsys.readouterr()
    assert got.out == "" and len(got.err.strip().splitlines()) == 1, got

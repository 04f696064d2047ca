"""What the command line checks before anything runs, and what it takes literally: a name read
from a split file is never resolved as an OmegaConf interpolation (a `${oc.env:...}` in a shared
file would copy a user's secret into reports and logs), while the user's own interpolations
keep working; every enumerated option, empty list and config-group preset of every command is
refused in one line (exit 2) before a bank opens; ``GROUP={...}`` replaces the preset."""

from __future__ import annotations

import json
import os
import re
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from conftest import run_curi
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from curi.cli import _group_values, _literal, main
from curi.errors import ConfigError
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
        timeout=60,
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
    opts = load_options(command.replace(".", "_"))
    default = dict(_flatten(opts.defaults))[key]
    valid = [0.5 if v is float else v for v in choices()[key]]  # float: any number
    for value in valid:  # every valid value passes, alone or in a list
        check_config(_nested(key, [value] if isinstance(default, list) else value), opts)
    names = ", ".join(v for v in valid if isinstance(v, str))
    for bad in ("nosuch", True):
        with pytest.raises(ConfigError, match="^" + re.escape(f"{key} must be one of {names}")):
            check_config(_nested(key, [bad] if isinstance(default, list) else bad), opts)


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

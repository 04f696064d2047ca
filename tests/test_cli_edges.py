"""The command-line edges, each as a user meets it: unknown keys and wrong types
end in one line naming the key and the valid ones; `split=` takes a preset or a saved split
file on every command; a bank is built only where asked; a run's config and log go to its
output_dir and nowhere else; `--help` gives each option's meaning; the gap and eval charts
are titled and labelled."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from conftest import run_curi

from curi.errors import ConfigError
from curi.options import check_config, help_text, load_options, read_comments
from curi.presets import conf_dir

# the commands whose configs this suite documents key by key (the others' are listed by name)
DOCUMENTED = ("bank", "split", "gap", "train", "eval", "show", "baselines")


def _one_line_error(r, start: str) -> str:
    assert r.returncode == 2, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    return lines[0]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- unknown keys and wrong types ------------------------------------------------------------
@pytest.mark.parametrize("override", ["+splts=[counting]", "splts=[counting]", "++splts=[x]"])
def test_misspelt_top_level_key_is_refused_naming_the_valid_ones(override, tmp_path):
    r = run_curi("gap", "bank=tiny", override, cwd=tmp_path)
    line = _one_line_error(r, "curi gap: error: unknown option 'splts'")
    assert "did you mean 'splits'" in line and "valid: " in line and "episodes" in line
    assert _files(tmp_path) == []  # refused before anything ran or was written


def test_misspelt_nested_key_and_foreign_group_are_refused(tmp_path):
    r = run_curi("gap", "+episodes.tset=5", cwd=tmp_path)
    _one_line_error(r, "curi gap: error: unknown option 'episodes.tset'")
    r = run_curi("gap", "+pooling=avg", cwd=tmp_path)  # a group the command does not have
    _one_line_error(r, "curi gap: error: unknown option 'pooling'")


def test_foreign_group_message_lists_each_valid_option_once():
    """`curi eval pooling=avg`: eval's `split` is both a key and a group with a default; the
    valid options name it once."""
    from curi.options import check_override_keys

    with pytest.raises(ConfigError, match="this command has no pooling group") as e:
        check_override_keys(["pooling=avg"], load_options("eval"))
    valid = str(e.value).split("valid: ", 1)[1].split(", ")
    assert "split" in valid and "checkpoint" in valid
    assert len(valid) == len(set(valid)), valid
    assert valid == sorted(valid)


def test_wrong_type_is_one_message_not_a_worker_traceback(tmp_path):
    data = tmp_path / "data"
    args = ["bank=tiny", f"data_dir={data}", f"output_dir={tmp_path / 'o'}"]
    r = run_curi("gap", "episodes.test=abc", *args, cwd=tmp_path)
    _one_line_error(
        r, "curi gap: error: episodes.test must be an integer (default 20000), got 'abc'"
    )
    r = run_curi("gap", "progress=3", *args, cwd=tmp_path)
    _one_line_error(r, "curi gap: error: progress must be true or false")
    assert not data.exists()


def test_check_config_types_and_lists():
    opts = load_options("gap")
    base = {"splits": "boolean", "negatives": "hard", "episodes": {"test": 3.0}, "seed": 1}
    out = check_config(base, opts)
    assert out["splits"] == ["boolean"] and out["negatives"] == ["hard"]
    for bad, msg in [
        ({"seed": 1.5}, "seed must be an integer"),
        ({"episodes": {"test": True}}, "episodes.test must be an integer"),
        ({"prior": [1]}, "prior must be a single value"),
        ({"splits": {"a": 1}}, "splits must be a list"),
        ({"episodes": 3}, "episodes must be a mapping"),
        ({"bogus": 1}, "unknown option 'bogus'"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            check_config(bad, opts)
    # a config group's own keys are left to the library that reads them (BankConfig, ...)
    assert check_config({"bank": {"anything": 1}}, opts) == {"bank": {"anything": 1}}


def test_unknown_key_inside_a_group_is_one_message(tmp_path):
    r = run_curi(
        "bank", "bank=tiny", "+bank.num_scene=5", f"data_dir={tmp_path / 'd'}", cwd=tmp_path
    )
    line = _one_line_error(r, "curi bank: error: unknown bank option(s) ['num_scene']")
    assert "num_scenes" in line and not (tmp_path / "d").exists()


def test_bad_media_is_one_message_before_the_bank_opens(tmp_path):
    """``media=`` names a kind of rendered file for a parquet or tar export; anything else is
    refused in one line, before a bank is looked for (the data_dir here does not exist)."""
    args = ["bank=tiny", f"data_dir={tmp_path / 'none'}", "n=2"]
    r = run_curi("episodes", *args, f"out={tmp_path / 'e.parquet'}", "media=video", cwd=tmp_path)
    _one_line_error(
        r, "curi episodes: error: media must be one of image, sound or null, got 'video'"
    )
    r = run_curi("episodes", *args, f"out={tmp_path / 'e.jsonl'}", "media=image", cwd=tmp_path)
    _one_line_error(
        r, "curi episodes: error: rendered files go into .parquet or .tar exports, not e.jsonl"
    )
    assert _files(tmp_path) == []


# (command, its arguments, whether out= names a folder): every command with an out= option
OUTPUTS = [
    ("lm export", ["n=2"], True),
    ("lm rules", ["n=2"], True),
    ("rules", ["n=2"], True),
    ("show", [], True),
    ("episodes render", ["in=e.jsonl"], True),
    ("lm compare", ["tasks=t", "results=r"], False),
    ("score", ["tasks=t.jsonl", "predictions=p.txt"], False),
]


@pytest.mark.parametrize(("command", "args", "folder"), OUTPUTS, ids=[c for c, _, _ in OUTPUTS])
def test_out_of_the_wrong_kind_is_one_line_before_the_bank_opens(
    command, args, folder, tmp_path, capsys, monkeypatch
):
    """A file where an output folder goes (`curi lm export out=F`), or a folder where an
    output file goes, failed with a FileExistsError or IsADirectoryError traceback, the lm
    export and `curi score` after their work."""
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / ("f" if folder else "d")
    out.touch() if folder else out.mkdir()
    bank = [] if command in ("score", "episodes render") else ["bank=tiny", "data_dir=none"]
    with pytest.raises(SystemExit) as e:
        main([*command.split(), *bank, *args, f"out={out}"])
    kind = "a file, not a folder; give a folder" if folder else "a folder; give a file"
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"curi {command}: error: out={out} is {kind} to write"
    ]
    assert _files(tmp_path) == [out.name]


# --- split= takes a preset or a saved split file ----------------------------------------------
@pytest.fixture(scope="module")
def saved_split(tiny_bank_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("split") / "bc.json"
    r = run_curi(
        "split",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "progress=false",
        "split=binding_color",
        f"save={path}",
        cwd=path.parent,
    )
    assert r.returncode == 0, r.stderr
    return path


def test_saved_split_file_drives_curi_split_and_gap(saved_split, tiny_bank_dir, tmp_path):
    data = f"data_dir={tiny_bank_dir.parent}"
    r = run_curi("split", "bank=tiny", data, f"split={saved_split}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    want = json.loads(saved_split.read_text())
    report = json.loads(r.stdout[r.stdout.index("{") :])
    assert report["split"] == "binding_color" and report["test"] == len(want["test"])
    out = tmp_path / "gap"
    r = run_curi(
        "gap",
        "bank=tiny",
        data,
        f"split={saved_split}",
        "negatives=hard",
        "episodes.test=20",
        "workers=1",
        "progress=false",
        f"output_dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads((out / "gap.json").read_text())
    assert [(x["split"], x["negatives"], x["n_test"]) for x in rows] == [
        ("binding_color", "hard", len(want["test"]))
    ]
    missing = run_curi(
        "gap",
        "bank=tiny",
        data,
        f"split={tmp_path / 'nope.json'}",
        f"output_dir={tmp_path / 'g2'}",
        cwd=tmp_path,
    )
    _one_line_error(missing, "curi gap: error: split file")


@pytest.mark.parametrize("command", ["gap", "train"])
def test_a_split_file_of_another_bank_leaves_no_run_folder(
    saved_split, tiny_bank_dir, tmp_path, command
):
    """A split file naming a concept outside the bank, or saved for another bank, is refused
    from the bank's concepts.txt before Hydra makes the run folder (outputs/...): it was
    refused once the bank was loaded, the folder left behind."""
    text = saved_split.read_text()
    spoilt = {
        "train[0] = 99999 is outside the bank's concept indices": text.replace(
            '"train": [', '"train": [99999, ', 1
        ),
        "was saved for another bank (None concepts": text.replace('"num_concepts": ', '"x": ', 1),
    }
    (tmp_path / "cwd").mkdir()
    for i, (says, content) in enumerate(spoilt.items()):
        path = tmp_path / f"{i}.json"
        path.write_text(content)
        args = [command, "bank=tiny", f"data_dir={tiny_bank_dir.parent}", f"split={path}"]
        r = run_curi(*args, "progress=false", cwd=tmp_path / "cwd")
        line = _one_line_error(r, f"curi {command}: error: split file '{path}'")
        assert says in line
        assert _files(tmp_path / "cwd") == []


def test_saved_split_trains_and_eval_takes_a_preset_split(saved_split, tiny_bank_dir, tmp_path):
    """`curi train split=FILE.json` and the README's `curi eval split=binding_color` (which
    failed with "No match in the defaults list")."""
    data = f"data_dir={tiny_bank_dir.parent}"
    run = tmp_path / "run"
    r = run_curi(
        "train",
        "bank=tiny",
        "train=tiny",
        data,
        f"split={saved_split}",
        "device=cpu",
        "train.steps=2",
        "train.eval_every=2",
        "train.checkpoint_every=2",
        "train.val_episodes=4",
        "progress=false",
        f"output_dir={run}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2
    cfg = (run / ".hydra" / "config.yaml").read_text()
    assert "rule: file" in cfg and str(saved_split) in cfg
    ev = tmp_path / "eval"
    r = run_curi(
        "eval",
        f"checkpoint={run}",
        "split=binding_color",
        "episodes=8",
        "device=cpu",
        "num_workers=0",
        "progress=false",
        f"output_dir={ev}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    metrics = json.loads((ev / "metrics.json").read_text())
    assert metrics["split"] == "binding_color" and metrics["oracles"]["n_test"] > 0
    assert (ev / "eval.png").stat().st_size > 0 and (ev / ".hydra" / "config.yaml").is_file()
    assert (ev / "eval.log").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval", "run"]  # nothing elsewhere


# --- banks are built only where asked ---------------------------------------------------------
def test_misspelt_data_dir_is_an_error_saying_how_to_build(tmp_path):
    typo = tmp_path / "dta"
    r = run_curi("split", "bank=tiny", f"data_dir={typo}", cwd=tmp_path)
    line = _one_line_error(r, "curi split: error: no bank 'tiny' in data_dir")
    assert f"curi bank bank=tiny data_dir={typo}" in line and "build=true" in line
    assert not typo.exists()


def test_build_true_builds_where_asked(tmp_path):
    small = [
        "bank=tiny",
        "bank.num_scenes=2000",
        "bank.num_draws=3000",
        "bank.min_positives=5",
        "progress=false",
    ]
    r = run_curi("split", *small, f"data_dir={tmp_path / 'd'}", "build=true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "d" / "tiny" / "manifest.json").is_file()


def test_open_bank_builds_only_in_the_default_folder(tmp_path, monkeypatch):
    from curi.bank import open_bank
    from curi.errors import BankError

    small = {"name": "s", "num_scenes": 2000, "num_draws": 3000, "min_positives": 5, "workers": 1}
    with pytest.raises(BankError, match="no bank 's' in data_dir"):
        open_bank(small, tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()
    monkeypatch.setenv("CURI_DATA_DIR", str(tmp_path / "cache"))
    assert open_bank(small, None, progress=False).path == tmp_path / "cache" / "s"
    assert open_bank(small, tmp_path / "y", progress=False, build=True).path.is_dir()


# --- the run's config and log go to output_dir, and nothing elsewhere ---------------------------
def test_output_dir_holds_config_and_log_and_nothing_else_is_written(tiny_bank_dir, tmp_path):
    data = f"data_dir={tiny_bank_dir.parent}"
    work = tmp_path / "work"
    work.mkdir()
    r = run_curi("bank", "bank=tiny", data, "progress=false", cwd=work)
    assert r.returncode == 0, r.stderr
    r = run_curi("split", "bank=tiny", data, "progress=false", cwd=work)
    assert r.returncode == 0, r.stderr
    assert _files(work) == []  # no outputs/<command>/<time> left behind
    out = tmp_path / "out"
    r = run_curi("split", "bank=tiny", data, "progress=false", f"output_dir={out}", cwd=work)
    assert r.returncode == 0, r.stderr
    assert (out / ".hydra" / "config.yaml").is_file() and (out / "split.log").is_file()
    assert _files(work) == []


def test_sweep_jobs_go_under_output_dir(tiny_bank_dir, tmp_path):
    data = f"data_dir={tiny_bank_dir.parent}"
    out = tmp_path / "sweep"
    r = run_curi(
        "split",
        "-m",
        "bank=tiny",
        data,
        "split=binding_color,counting",
        f"output_dir={out}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert all((out / n / "split.log").is_file() for n in ("0", "1"))
    assert all((out / n / ".hydra" / "config.yaml").is_file() for n in ("0", "1"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]


# --- a refused run leaves the folder's record (.hydra/) as it was -------------------------------
RECORD = ("config.yaml", "overrides.yaml", "hydra.yaml")


def _record(out: Path) -> dict[str, bytes]:
    return {name: (out / ".hydra" / name).read_bytes() for name in RECORD}


def test_a_refused_gap_leaves_the_finished_folders_record_as_it_was(tiny_bank_dir, tmp_path):
    """`curi gap seed=1 prior=pcfg` into a finished seed-0 folder was refused, but Hydra had
    rewritten .hydra/ first: the folder then said seed 1, pcfg. A run that is not refused
    still writes its record, as Hydra wrote it."""
    out = tmp_path / "gap"
    args = ["gap", "bank=tiny", f"data_dir={tiny_bank_dir.parent}", "episodes.test=100"]
    args += ["splits=[concept_iid]", "negatives=[hard]", "progress=false", f"output_dir={out}"]
    assert run_curi(*args, cwd=tmp_path).returncode == 0
    before = _record(out)
    hydra = before["hydra.yaml"].decode()
    assert "output_subdir: .hydra" in hydra and "hydra.output_subdir=null" not in hydra
    assert before["overrides.yaml"].decode().splitlines()[-1] == f"- output_dir={out}"
    r = run_curi(*args, "seed=1", "prior=pcfg", cwd=tmp_path)
    _one_line_error(r, f"curi gap: error: {out} holds a gap table made with other settings")
    assert _record(out) == before
    assert run_curi(*args, "workers=1", cwd=tmp_path).returncode == 0  # the same table: runs
    assert "- workers=1" in _record(out)["overrides.yaml"].decode()


def test_a_refused_train_leaves_the_runs_record_as_it_was(tiny_bank_dir, tmp_path):
    run = tmp_path / "run"
    args = ["train", "bank=tiny", "train=tiny", f"data_dir={tiny_bank_dir.parent}"]
    args += ["device=cpu", "train.steps=2", "train.eval_every=2", "train.checkpoint_every=2"]
    args += ["train.val_episodes=4", "progress=false", f"output_dir={run}"]
    assert run_curi(*args, cwd=tmp_path).returncode == 0
    before = _record(run)
    r = run_curi(*args, "seed=1", cwd=tmp_path)
    _one_line_error(r, f"curi train: error: output_dir {run} already holds a run")
    assert _record(run) == before


def test_a_refused_baselines_leaves_the_sweeps_record_as_it_was(tiny_bank_dir, tmp_path):
    """The sweep's lock is held (here by this process): the second command is refused; the
    first one found a folder without a record, so it wrote one before its refusal."""
    from curi.jobs import sweep_lock

    out = tmp_path / "sweep"
    out.mkdir()
    args = ["baselines", "bank=tiny", "train=tiny", f"data_dir={tiny_bank_dir.parent}"]
    args += ["only=[schema-relation_net]", "splits=[concept_iid]", f"output_dir={out}"]
    with sweep_lock(out):
        r = run_curi(*args, cwd=tmp_path)
        _one_line_error(r, f"curi baselines: error: output_dir={out} (a sweep) is being written")
        before = _record(out)
        r = run_curi(*args, "seeds=[7]", "episodes=99", cwd=tmp_path)
        _one_line_error(r, f"curi baselines: error: output_dir={out} (a sweep) is being written")
    assert _record(out) == before and b"seeds=[7]" not in before["overrides.yaml"]


def test_a_link_in_place_of_the_record_folder_is_refused_before_hydra(tiny_bank_dir, tmp_path):
    """The record is never written through a symlink (its target would be overwritten)."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / ".hydra").symlink_to(elsewhere)
    r = run_curi(
        "split", "bank=tiny", f"data_dir={tiny_bank_dir.parent}", f"output_dir={out}", cwd=tmp_path
    )
    _one_line_error(r, f"curi split: error: the run's config goes to {out / '.hydra'}, which is")
    assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in out.iterdir()) == [".hydra"]


# --- --help --------------------------------------------------------------------------------------
def _commands() -> list[str]:
    return sorted(ep.name.replace(".", "_") for ep in entry_points(group="curi.commands"))


@pytest.mark.parametrize("config", _commands())
def test_help_lists_every_option_of_every_command(config):
    if not (conf_dir() / f"{config}.yaml").is_file():
        pytest.skip(f"{config}.yaml is not installed yet")
    opts = load_options(config)
    text = help_text(opts, config.replace("_", " "))
    for key, value in opts.defaults.items():
        if key in opts.groups and value is None:
            assert f"\n{key}=null  (config group" in text
        elif not isinstance(value, dict) or not value:
            assert f"\n  {key}=" in text, key


@pytest.mark.parametrize("config", DOCUMENTED)
def test_help_gives_each_option_its_meaning(config, tmp_path):
    opts = load_options(config)
    from curi.options import _flatten

    undocumented = [k for k, _ in _flatten(opts.defaults) if k not in opts.comments]
    assert undocumented == [], f"{config}.yaml: give these keys a comment: {undocumented}"
    r = run_curi(config, "--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    some = next(k for k in opts.defaults if k not in opts.groups)
    row = next(line for line in r.stdout.splitlines() if line.startswith(f"  {some}="))
    assert opts.comments[some][:20] in r.stdout and row
    assert _files(tmp_path) == []


def test_help_shows_the_chosen_group_option(tmp_path):
    r = run_curi("train", "train=tiny", "--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "  train.steps=20" in r.stdout and "train.lr=null" in r.stdout
    assert "Adam learning rate" in r.stdout and "tiny  " in r.stdout


def test_comments_are_read_beside_and_above_keys():
    text = "# file\nname: x\n\n# above\na: 1\nb:\n  c: [1,\n     2]   # continued\nd: '#' # real\n"
    assert read_comments(text) == {"a": "above", "b.c": "continued", "d": "real"}


# --- the charts ----------------------------------------------------------------------------------
def _rows():
    from curi.oracles.paper import PAPER_GAP

    rows = []
    for k, split in enumerate([*list(PAPER_GAP)[:4], "mine"]):
        for neg in ("hard", "easy"):
            rows.append(
                {
                    "split": split,
                    "negatives": neg,
                    "map_strong": 0.5 + 0.1 * k,
                    "map_weak": 0.1,
                    "map_random": 0.05,
                    "map_gap": 0.4 + 0.1 * k,
                    "cba_strong": 0.7,
                    "cba_weak": 0.6,
                    "cba_random": 0.5,
                    "cba_gap": 0.1,
                }
            )
    return rows


def test_gap_chart_has_title_axis_labels_and_gap_labels_above_paper_marks(tmp_path):
    import matplotlib.pyplot as plt

    from curi.oracles.paper import PAPER_GAP
    from curi.oracles.report import gap_figure, plot_title, write_report

    rows = _rows()
    title = plot_title(rows, bank="tiny (993 concepts)", episodes=500)
    assert "tiny" in title and "500 test episodes" in title and "easy, hard negatives" in title
    fig = gap_figure(rows, title)
    assert fig._suptitle.get_text() == title
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() in ("mAP", "class-balanced accuracy")
        if "hard" not in ax.get_title():
            continue
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        marks = [line for line in ax.get_lines() if line.get_marker() == "D"]
        assert marks  # the paper's oracles are drawn
        for note in ax.texts:
            x, y = note.xy
            split = ticks[round(x)]
            if split in PAPER_GAP:  # the label sits above the paper's diamonds
                col = 0 if ax.get_ylabel() == "mAP" else 3
                assert y >= max(PAPER_GAP[split][col], PAPER_GAP[split][col + 1])
    plt.close(fig)
    paths = write_report(rows, tmp_path, title=title)
    assert paths["png"].stat().st_size > 0


def test_eval_plot_is_written(tmp_path):
    from curi.models.plots import plot_metrics

    m = {
        "checkpoint": "/r/best.pt",
        "step": 3,
        "split": "boolean",
        "negatives": "hard",
        "episodes": 8,
        "subset": "test",
        "config": {"bank": {"name": "tiny"}},
        "model": {"map": 0.3, "cba": 0.6},
        "oracles": {
            "map_strong": 0.9,
            "map_weak": 0.2,
            "map_random": 0.1,
            "cba_strong": 0.95,
            "cba_weak": 0.6,
            "cba_random": 0.5,
        },
    }
    path = plot_metrics([m, {**m, "split": "counting", "oracles": None}], tmp_path / "e.png")
    assert path.stat().st_size > 0


def test_help_describes_each_preset_in_whole_sentences(capsys):
    """A preset's description was the first line of its file's comment, cut mid-sentence
    (pooling=avg: "... then an MLP")."""
    from curi.cli import main

    main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "then an MLP 256-512-384-256 with BatchNorm and ReLU. concat " in text

    from curi.options import describe
    from curi.presets import list_presets

    for group in ("bank", "split", "modality", "pooling", "train"):
        for name in list_presets(group):
            about = describe(group, name)
            assert about.endswith(".") and f"{name} {about}" in text, (group, name, about)
    assert describe("pooling", "avg").endswith("an MLP 256-512-384-256 with BatchNorm and ReLU.")


# --- train settings that cannot work ---------------------------------------------------------
def test_more_warmup_than_steps_is_refused_before_any_work(tmp_path):
    # was: accepted, and the rate never left about 0 (warmup 500 of 20 steps)
    out = tmp_path / "run"
    args = ["bank=tiny", "train=tiny", f"data_dir={tmp_path / 'data'}", f"output_dir={out}"]
    r = run_curi("train", *args, "train.warmup_steps=500", cwd=tmp_path)
    line = _one_line_error(r, "curi train: error: train.warmup_steps=500 is more than ")
    assert "train.steps=20" in line and "train.warmup_steps <= train.steps" in line
    assert not out.exists() and not (tmp_path / "data").exists()
    from curi.models.config import TrainSettings

    TrainSettings.from_mapping({"steps": 20, "warmup_steps": 20})  # as many is fine
    with pytest.raises(ConfigError, match="train.warmup_steps=21 is more than train.steps=20"):
        TrainSettings.from_mapping({"steps": 20, "warmup_steps": 21})

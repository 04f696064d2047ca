"""Tests of `curi baselines` (CPU, tiny bank, two small configurations, a few steps): the table's
rows against each run's own metrics and the paper's numbers, skipping finished runs, resuming an
interrupted one, refusing a run folder made with other settings, the default sweep's plan, bad
configurations, and the paper's table stored as data against an independent transcription."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import run_curi
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import curi.models.baselines as baselines_mod
import curi.models.evaluate as evaluate_mod
import curi.models.train as train_mod
from curi.errors import ConfigError, RemovalError
from curi.models import cli as models_cli
from curi.models.baseline_table import baseline_table, table_markdown
from curi.models.baselines import parse_baselines, plan_runs
from curi.models.config import check_resumable
from curi.oracles.paper import BASELINE_SPLITS, PAPER_BASELINES, paper_baseline
from curi.presets import load_preset

# Two small configurations (the paper's poolers, narrowed so a CPU test trains in seconds).
SMALL = (
    "configs=[{name: rn, modality: schema, pooling: {name: relation_net, g_dim: 16, "
    "g_layers: 2, f_hidden: [16]}, splits: [concept_iid]}, {name: tr, modality: schema, "
    "pooling: {name: transformer, d_model: 16, num_layers: 1, dim_feedforward: 16}, "
    "splits: [concept_iid]}]"
)
TINY = [
    "bank=tiny",
    "train=tiny",
    "train.steps=2",
    "train.eval_every=2",
    "train.checkpoint_every=2",
    "train.val_episodes=4",
    "train.batch_size=2",
    "train.train_episodes=40",
    "embed_dim=16",
    "episodes=6",
    "progress=false",
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cfg(*overrides: str):
    with initialize_config_module(config_module="curi.conf", version_base="1.3"):
        return compose("baselines", list(overrides))


def _small(bank_dir, out, *more: str):
    return _cfg(*TINY, SMALL, f"data_dir={bank_dir.parent}", f"output_dir={out}", *more)


def test_command_tabulates_runs_beside_the_paper_then_skips_them(
    tiny_bank_dir, tmp_path, monkeypatch
):
    out = tmp_path / "bl"
    models_cli.baselines(_small(tiny_bank_dir, out))
    table = json.loads((out / "baselines.json").read_text())
    rows = {r["config"]: r for r in table["rows"]}
    assert list(rows) == ["rn", "tr"] and table["configs"] == ["rn", "tr"]
    oracle = json.loads((out / "oracles" / "concept_iid.json").read_text())["row"]
    for name, pooling, paper in (("rn", "relation_net", 0.607), ("tr", "transformer", 0.598)):
        r = rows[name]
        run = out / "runs" / name / "concept_iid" / "seed0"
        metrics = json.loads((run / "eval" / "metrics.json").read_text())
        # the table's number is the test mAP of that run's best-by-val checkpoint
        assert metrics["checkpoint"].endswith("best.pt") and metrics["episodes"] == 6
        assert r["test_map"] == metrics["model"]["map"] and r["split"] == "concept_iid"
        assert (r["modality"], r["pooling"], r["seeds"], r["steps"]) == ("schema", pooling, [0], 2)
        assert np.isclose(r["paper_map"], paper) and np.isclose(r["diff"], r["test_map"] - paper)
        assert r["oracle_strong"] == oracle["map_strong"] and oracle["episodes"] == 6
        assert r["oracle_prior"] == oracle["map_prior"] is not None
        assert (run / "eval" / "concepts.parquet").is_file()
    assert (out / "baselines.png").read_bytes()[:4] == b"\x89PNG"
    md = (out / "baselines.md").read_text()
    assert "| concept_iid | " in md and "(60.7)" in md and "(59.8)" in md
    assert "prior-only oracle |" in md

    # finished runs are skipped: nothing trains or evaluates again, the table is the same
    def refuse(*a, **k):
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr(train_mod, "train", refuse)  # each job imports them when it runs
    monkeypatch.setattr(evaluate_mod, "evaluate_checkpoint", refuse)
    for name in ("rn", "tr"):  # run.json as an older curi wrote it, without threads and the
        path = out / "runs" / name / "concept_iid" / "seed0" / "run.json"  # newer train keys
        saved = json.loads(path.read_text())
        assert saved.pop("threads") == 1  # one torch thread a job, as it ran:
        assert json.loads((path.parent / "result.json").read_text())["threads"] == 1
        train = saved["run"]["train"]
        assert train["sampler"] == "auto"  # part of the run's identity
        for key in ("sampler", "lr_schedule", "warmup_steps"):
            train.pop(key)
        path.write_text(json.dumps(saved))
    models_cli.baselines(_small(tiny_bank_dir, out))
    again = json.loads((out / "baselines.json").read_text())
    assert again["rows"] == table["rows"]
    monkeypatch.undo()

    # an interrupted run (trained, not yet tested) resumes from its last checkpoint
    run = out / "runs" / "tr" / "concept_iid" / "seed0"
    (run / "result.json").unlink()
    calls = []
    real = train_mod.train

    def spy(*a, **k):
        calls.append(k["resume"])
        return real(*a, **k)

    monkeypatch.setattr(train_mod, "train", spy)
    models_cli.baselines(_small(tiny_bank_dir, out))
    assert calls == [run / "train"]  # only the interrupted run, resumed, not restarted
    lines = (run / "train" / "metrics.jsonl").read_text().splitlines()
    assert sum(json.loads(x)["tag"] == "train" for x in lines) == 2  # no step trained twice
    resumed = json.loads((out / "baselines.json").read_text())["rows"]
    for new, old in zip(resumed, table["rows"], strict=True):  # training time adds up
        assert new.pop("train_seconds") >= old.pop("train_seconds")
        assert new == old

    # a run folder made with other settings is refused, or run again with force
    with pytest.raises(ConfigError, match="other settings"):
        models_cli.baselines(_small(tiny_bank_dir, out, "train.steps=3", "only=[rn]"))
    calls.clear()
    models_cli.baselines(_small(tiny_bank_dir, out, "train.steps=3", "only=[rn]", "force=true"))
    assert calls == [None]  # started again from scratch
    (row,) = json.loads((out / "baselines.json").read_text())["rows"]
    assert row["config"] == "rn" and row["steps"] == 3


def test_default_sweep_is_the_baseline_table():
    c = OmegaConf.to_container(_cfg("output_dir=/nonexistent"), resolve=True)
    plan = parse_baselines(c["configs"])
    runs = plan_runs(plan, bank=c["bank"], train=c["train"], out_dir="/o")
    got = {(r.baseline.name, r.split) for r in runs}
    nine = set(BASELINE_SPLITS)
    assert got == (
        {("schema-relation_net", s) for s in nine}
        | {("schema-transformer", s) for s in nine}
        | {("image-relation_net", "concept_iid"), ("schema-relation_net-alpha1", "concept_iid")}
    )
    by_name = {r.baseline.name: r.run for r in runs}
    assert by_name["schema-relation_net-alpha1"].train.alpha == 1
    assert by_name["schema-relation_net"].train.alpha == 0
    assert by_name["image-relation_net"].modality == load_preset("modality", "image")
    assert c["bank"]["name"] == "paper" and c["episodes"] == 20000
    cuda = parse_baselines(c["configs"], only=["image-relation_net"], render_device="cuda")
    assert cuda[0].modality["device"] == "cuda"
    assert [b.splits for b in parse_baselines(c["configs"], splits=["counting"])] == [
        ("counting",)
    ] * 4
    # another learner: not in the default sweep, selectable by name, on the nine splits
    (pv,) = parse_baselines(c["configs"], only=["schema-propose_verify"])
    assert pv.learner == {**load_preset("learner", "propose_verify"), "name": "propose_verify"}
    assert not pv.default and set(pv.splits) == nine and pv.modality["name"] == "schema"
    runs = plan_runs([pv], bank=c["bank"], train=c["train"], out_dir="/o")  # builds no model
    assert [r.dir.parts[-3:] for r in runs][0] == ("schema-propose_verify", "instance_iid", "seed0")


@pytest.mark.parametrize(
    ("configs", "match"),
    [
        ([], "non-empty list"),
        ([{"modality": "schema", "pooling": "bogus", "splits": ["boolean"]}], "unknown pooling"),
        ([{"modality": "smell", "pooling": "avg", "splits": ["boolean"]}], "unknown modality"),
        ([{"modality": "schema", "pooling": "avg", "splits": ["nope"]}], "unknown splits"),
        ([{"modality": "schema", "pooling": "avg"}], "splits must be"),
        (
            [{"modality": "schema", "pooling": "avg", "splits": ["boolean"], "lr": 1}],
            "unknown keys",
        ),
        ([{"modality": "schema", "pooling": "avg", "splits": ["boolean"], "alpha": -1}], "alpha"),
        (
            [
                {
                    "modality": "schema",
                    "pooling": "avg",
                    "splits": ["boolean"],
                    "train": {"alpha": 1},
                }
            ],
            "not in its train",
        ),
        (
            [{"modality": "schema", "pooling": "avg", "splits": ["boolean"], "name": "../x"}],
            "name",
        ),
        ([{"modality": "schema", "pooling": "avg", "splits": ["boolean"]}] * 2, "repeated"),
        ([{"learner": "bogus", "splits": ["boolean"]}], "unknown learner"),
        ([{"learner": {"name": "propose_verify", "k": 0}, "splits": ["boolean"]}], "learner.k"),
        (
            [{"learner": "propose_verify", "pooling": "avg", "splits": ["boolean"]}],
            "pooling configure a protonet, not learner=propose_verify",
        ),
        (
            [{"learner": "propose_verify", "modality": "image", "splits": ["boolean"]}],
            "modality schema only",
        ),
        ([{"learner": "propose_verify", "splits": ["boolean"], "default": "no"}], "default"),
        (
            [{"learner": "propose_verify", "splits": ["boolean"], "default": False}],
            "name some in only=",
        ),
    ],
)
def test_bad_configurations_are_clear_errors(configs, match):
    with pytest.raises(ConfigError, match=match):
        parse_baselines(configs)


def test_bad_settings_fail_before_any_run(tmp_path):
    plan = parse_baselines([{"modality": "schema", "pooling": "avg", "splits": ["boolean"]}])
    with pytest.raises(ConfigError, match="train.steps"):
        plan_runs(plan, bank={"name": "tiny"}, train={"steps": 0}, out_dir=tmp_path)
    rn = {"name": "relation_net", "g_layers": 1}
    bad = parse_baselines([{"modality": "schema", "pooling": rn, "splits": ["boolean"]}])
    with pytest.raises(ConfigError, match="at least 2 layers"):
        plan_runs(bad, bank={"name": "tiny"}, train={}, out_dir=tmp_path)
    with pytest.raises(ConfigError, match="only: unknown"):
        parse_baselines(
            [{"modality": "schema", "pooling": "avg", "splits": ["boolean"]}],
            only=["schema-relation_net"],
        )


def test_curi_baselines_reports_a_bad_configuration_in_one_line(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from curi.cli import main; main()",
            "baselines",
            "bank=tiny",
            "only=[no-such]",
            f"output_dir={tmp_path}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2
    assert "curi baselines: error: only: unknown configurations ['no-such']" in out.stderr
    assert "Traceback" not in out.stderr


# The paper's table (CURI paper, Appendix G.7: test mAP %, hard negatives, alpha = 0), an
# independent transcription: schema rel-net, schema transformer, image transformer, image
# rel-net, sound best.
SPEC = """
instance_iid | 63.9 | 59.8 | 61.5 | 58.6 | 23.5
concept_iid | 60.7 | 59.8 | 60.8 | 58.5 | 23.6
counting | 57.4 | 40.7 | 32.4 | 40.3 | 13.8
extrinsic | 59.8 | 60.9 | 62.1 | 60.8 | 25.7
intrinsic | 55.1 | 57.9 | 54.1 | 47.6 | 29.4
boolean | 51.1 | 46.9 | 44.0 | 38.4 | 25.5
complexity | 52.8 | 49.7 | 45.6 | 45.4 | 26.0
binding_color | 15.3 | 15.9 | 14.2 | 14.8 | 9.4
binding_shape | 30.4 | 30.9 | 28.7 | 29.1 | 17.5
"""


def test_paper_baselines_agree_with_an_independent_transcription():
    models = [
        ("schema", "relation_net"),
        ("schema", "transformer"),
        ("image", "transformer"),
        ("image", "relation_net"),
    ]
    for line in SPEC.strip().splitlines():
        split, *cells = [c.strip() for c in line.split("|")]
        values = [float(c) for c in cells]
        for (modality, pooling), want in zip(models, values[:4], strict=True):
            assert paper_baseline(modality, pooling, split)[0] == want, (split, modality, pooling)
        sound = max(paper_baseline("sound", p, split)[0] for p in ("avg", "concat", "relation_net"))
        assert sound == values[4], split
    # every table of Appendix G.7 has 11 models, G.8 six (no transformer, no sound)
    assert len(PAPER_BASELINES["hard"]) == 11 and len(PAPER_BASELINES["easy"]) == 6
    assert paper_baseline("schema", "transformer", "boolean", "easy") is None
    assert paper_baseline("sound", "relation_net", "concept_iid") == (21.8, None)  # std NaN


def test_a_run_of_curi_train_with_the_same_overrides_is_resumable_by_the_sweep(tmp_path):
    over = ["bank=tiny", "train=tiny", "train.steps=7"]
    with initialize_config_module(config_module="curi.conf", version_base="1.3"):
        made = models_cli.run_config(
            compose("train", [*over, "split=counting", "pooling=transformer", "output_dir=/o"])
        )
    c = OmegaConf.to_container(_cfg(*over, "output_dir=/o"), resolve=True)
    plan = parse_baselines(c["configs"], only=["schema-transformer"], splits=["counting"])
    (run,) = plan_runs(plan, bank=c["bank"], train=c["train"], out_dir=tmp_path)
    check_resumable(made, run.run, tmp_path / "last.pt")  # raises on any difference that matters
    other = dataclasses.replace(run.run, split="counting")  # a name, not the preset's rule
    with pytest.raises(ConfigError, match="split"):
        check_resumable(made, other, tmp_path / "last.pt")
    # a run saved by an older curi, before the schema renderer had mask_channel, resumes; a
    # run that set the option otherwise does not
    older = {k: v for k, v in made.modality.items() if k != "mask_channel"}
    assert "mask_channel" in made.modality
    check_resumable(dataclasses.replace(made, modality=older), run.run, tmp_path / "last.pt")
    flipped = dataclasses.replace(made, modality={**made.modality, "mask_channel": True})
    with pytest.raises(ConfigError, match="modality"):
        check_resumable(flipped, run.run, tmp_path / "last.pt")


def test_table_averages_seeds_and_marks_what_the_paper_lacks():
    def res(config, split, seed, m, modality="schema", pooling="relation_net", alpha=0.0):
        return {
            "config": config,
            "split": split,
            "seed": seed,
            "modality": modality,
            "pooling": pooling,
            "alpha": alpha,
            "negatives": "hard",
            "test_map": m,
            "test_cba": 0.7,
            "best_val_map": m,
            "checkpoint_step": 10 * (seed + 1),
            "steps": 20,
            "train_seconds": 5.0,
        }

    results = [
        res("lang", "boolean", 0, 0.40, alpha=1.0),
        res("lang", "boolean", 1, 0.50, alpha=1.0),
        res("avg", "mcd", 0, 0.30, pooling="avg"),
        res("avg", "counting", 0, 0.20, modality="sound", pooling="transformer"),
    ]
    table = baseline_table(
        results,
        {("boolean", "hard"): {"map_strong": 0.9, "map_weak": 0.4, "map_prior": 0.1}},
        settings={"bank": "b", "episodes": 5, "seeds": [0, 1]},
    )
    rows = {(r["config"], r["split"]): r for r in table["rows"]}
    lang = rows[("lang", "boolean")]
    assert np.isclose(lang["test_map"], 0.45) and np.isclose(
        lang["test_map_std"], np.std([0.4, 0.5], ddof=1)
    )
    assert lang["seeds"] == [0, 1] and lang["checkpoint_steps"] == [10, 20]
    assert lang["train_seconds"] == 10.0 and np.isclose(lang["paper_map"], 0.511)
    assert lang["oracle_strong"] == 0.9 and rows[("avg", "mcd")]["oracle_strong"] is None
    assert rows[("avg", "mcd")]["paper_map"] is None  # not a paper split
    assert rows[("avg", "counting")]["paper_map"] is None  # the paper ran no sound transformer
    md = table_markdown(table)
    assert "lang (alpha=1)" in md and "no per-split numbers with language" in md
    assert "| boolean | 45.0 (51.1) | – | 90.0 | 40.0 | 10.0 |" in md
    assert "| mcd | – | 30.0 (n/a) | n/a | n/a | n/a |" in md
    assert lang["oracle_prior"] == 0.1
    assert "| lang | boolean | 45.0 ± 7.1 | 51.1 ± 1.4 | -6.1 |" in md
    assert "another learner" not in md
    # another learner: no paper number even where the paper has its modality and pooling
    pv = {**res("pv", "boolean", 0, 0.6, pooling="avg"), "learner": "propose_verify"}
    pv["best_val_map"] = None  # chosen on held-out training concepts, never on val
    table = baseline_table([*results, pv], settings={"bank": "b"})
    row = {(r["config"], r["split"]): r for r in table["rows"]}[("pv", "boolean")]
    assert row["learner"] == "propose_verify" and row["paper_map"] is row["diff"] is None
    assert row["best_val_map"] is None
    md = table_markdown(table)
    assert "| boolean | 45.0 (51.1) | – | 60.0 (—) |" in md and "—: another learner" in md
    assert "| pv | boolean | 60.0 | — | — | 70.0 | n/a |" in md


@pytest.mark.parametrize("link", ["configuration", "run"])
def test_force_never_deletes_through_a_symlink(tiny_bank_dir, tmp_path, link):
    """`force=true` empties a run folder made with other settings only inside the sweep's
    folder: a symlinked configuration folder (``runs/<cfg>``) or run folder is refused in one
    line before anything runs, and the folder it points to is kept."""
    out, victim = tmp_path / "bl", tmp_path / "victim"
    run = victim / "concept_iid" / "seed0" if link == "configuration" else victim
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"run": "made with other settings"}')
    (run / "precious.txt").write_text("keep")
    where = out / "runs" / "rn" if link == "configuration" else out / "runs/rn/concept_iid/seed0"
    where.parent.mkdir(parents=True)
    where.symlink_to(victim)
    with pytest.raises(RemovalError, match="will not delete") as e:
        models_cli.baselines(_small(tiny_bank_dir, out, "only=[rn]", "force=true"))
    assert "\n" not in str(e.value)
    assert sorted(p.name for p in run.iterdir()) == ["precious.txt", "run.json"]


def _one_line(r, *words: str) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    assert all(w in lines[0] for w in words), lines[0]


def test_a_fifo_in_a_sweep_folder_is_one_line_not_a_hang(tmp_path):
    """Each command in a process of its own, stopped after 60 s: a FIFO in place of
    ``sweep.json`` or a run's ``result.json`` is refused, never read (it would block)."""
    out = tmp_path / "O"
    out.mkdir()
    os.mkfifo(out / "sweep.json")
    r = run_curi("baselines", "collect", f"output_dir={out}", cwd=tmp_path, timeout=300)
    _one_line(r, "sweep.json", "is a FIFO, not a regular file")
    (out / "sweep.json").unlink()
    runs = [{"name": "rn/concept_iid/seed0", "dir": "runs/rn"}]
    (out / "sweep.json").write_text(json.dumps({"settings": {}, "runs": runs, "oracles": []}))
    (out / "runs" / "rn").mkdir(parents=True)
    os.mkfifo(out / "runs" / "rn" / "result.json")
    r = run_curi("baselines", "collect", f"output_dir={out}", cwd=tmp_path, timeout=300)
    _one_line(r, "result.json", "is a FIFO, not a regular file")


def test_a_fifo_run_json_is_one_line_not_a_hang(tiny_bank_dir, tmp_path):
    out = tmp_path / "O"
    (out / "runs" / "rn" / "concept_iid" / "seed0").mkdir(parents=True)
    os.mkfifo(out / "runs" / "rn" / "concept_iid" / "seed0" / "run.json")
    args = [*TINY, SMALL, f"data_dir={tiny_bank_dir.parent}", f"output_dir={out}", "only=[rn]"]
    r = run_curi("baselines", *args, cwd=tmp_path, timeout=300)
    _one_line(r, "run.json", "is a FIFO, not a regular file")


# --- a tampered sweep folder ends in one line naming the file and the field --------------------

RUN = "runs/rn/concept_iid/seed0"
SWEEP_FILES = {  # a finished sweep of one run, as run_baselines writes it
    "sweep.json": {
        "settings": {"bank": "tiny", "episodes": 6, "eval_seed": 0, "seeds": [0]},
        "runs": [{"name": "rn/concept_iid/seed0", "dir": RUN}],
        "oracles": [{"split": "concept_iid", "negatives": "hard", "file": "oracles/ci.json"}],
    },
    f"{RUN}/result.json": {
        **{"config": "rn", "split": "concept_iid", "seed": 0, "modality": "schema"},
        **{"pooling": "relation_net", "alpha": 0.0, "negatives": "hard", "test_map": 0.08},
        **{"test_cba": 0.66, "test_episodes": 6, "best_val_map": None, "checkpoint_step": 2},
        **{"steps": 2, "train_seconds": 1.4, "train_cpu_seconds": 1.4, "eval_seconds": 1.2},
        **{"device": "cpu", "dir": RUN},
    },
    "oracles/ci.json": {"eval": {"episodes": 6}, "row": {"map_strong": 1.0, "map_weak": 0.3}},
}


def _set(key, value):
    return lambda d: d.update({key: value})


def _drop(*keys):
    def edit(d):
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]

    return edit


TAMPERED = {  # id: (file, edit of its JSON or its new JSON, what the message says)
    "sweep-a-list": ("sweep.json", [1], "the file must be an object, got [1]"),
    "sweep-runs-a-number": ("sweep.json", _set("runs", 5), "runs must be a list, got 5"),
    "sweep-run-a-number": ("sweep.json", _set("runs", [5]), "runs[0] must be an object, got 5"),
    "sweep-run-without-dir": ("sweep.json", _drop("runs", 0, "dir"), "runs[0].dir is missing"),
    "sweep-dir-a-number": (
        "sweep.json",
        _set("runs", [{"name": "x", "dir": 5}]),
        "runs[0].dir must be a string, got 5",
    ),
    "sweep-without-oracles": ("sweep.json", _drop("oracles"), "oracles is missing"),
    "sweep-oracle-without-file": (
        "sweep.json",
        _drop("oracles", 0, "file"),
        "oracles[0].file is missing",
    ),
    "sweep-settings-a-number": ("sweep.json", _set("settings", 5), "settings must be an object"),
    "result-a-list": (f"{RUN}/result.json", [1], "the file must be an object, got [1]"),
    "result-test-map-a-string": (
        f"{RUN}/result.json",
        _set("test_map", "abc"),
        "test_map must be a number or null, got 'abc'",
    ),
    "result-without-config": (f"{RUN}/result.json", _drop("config"), "config is missing"),
    "oracles-a-list": ("oracles/ci.json", [1], "the file must be an object, got [1]"),
    "oracles-row-a-number": ("oracles/ci.json", _set("row", 5), "row must be an object, got 5"),
    "oracles-map-a-string": (
        "oracles/ci.json",
        _set("row", {"map_strong": "abc"}),
        "row.map_strong must be a number or null, got 'abc'",
    ),
    "failure-a-list": (f"{RUN}/failed.json", [1], "the file must be an object, got [1]"),
}


def _write_sweep(out, file=None, edit=None):
    """The sweep of `SWEEP_FILES` under `out`, `file` edited by `edit` (a function of its JSON,
    or its new JSON); a failure file replaces the run's result."""
    files = json.loads(json.dumps(SWEEP_FILES))
    if file and file.endswith("failed.json"):
        del files[f"{RUN}/result.json"]
        files[file] = {"error": "RuntimeError: out of memory"}
    if file:
        files[file] = edit(files[file]) or files[file] if callable(edit) else edit
    for name, body in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(body))


def test_the_hand_written_sweep_collects():
    """`SWEEP_FILES` is a sweep `collect_baselines` reads (so each tampering below is the only
    fault)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        _write_sweep(Path(tmp))
        table = baselines_mod.collect_baselines(tmp)
    assert [r["test_map"] for r in table["rows"]] == [0.08] and table["incomplete"] == []
    assert table["rows"][0]["oracle_strong"] == 1.0


@pytest.mark.parametrize(("file", "edit", "message"), TAMPERED.values(), ids=TAMPERED)
def test_curi_baselines_collect_of_a_tampered_sweep_is_one_line(
    file, edit, message, tmp_path, capsys, monkeypatch
):
    from curi.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "sweep"
    _write_sweep(out, file, edit)
    with pytest.raises(SystemExit) as e:
        main(["baselines", "collect", f"output_dir={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"curi baselines collect: error: {_kind(file)} file '{out / file}'")
    assert message in err[0]


def _kind(file: str) -> str:
    return {"sweep": "sweep", "result": "result", "ci": "oracle", "failed": "failure"}[
        file.rsplit("/", 1)[-1].removesuffix(".json")
    ]


@pytest.mark.parametrize(
    ("file", "text", "match"),
    [
        (f"{RUN}/result.json", "[1]", r"result file .*: the file must be an object, got \[1\]"),
        ("oracles/concept_iid.json", "[1]", r"oracle file .*: the file must be an object"),
        (f"{RUN}/run.json", '{"run": 5}', "holds a run made with other settings"),  # as before
    ],
    ids=["result", "oracles", "run"],
)
def test_a_sweep_over_a_tampered_file_stops_before_any_run(
    tiny_bank_dir, tmp_path, file, text, match
):
    out = tmp_path / "bl"
    (out / file).parent.mkdir(parents=True)
    (out / file).write_text(text)
    with pytest.raises(ConfigError, match=match):
        models_cli.baselines(_small(tiny_bank_dir, out, "only=[rn]"))
    assert not (out / "sweep.json").exists()  # stopped before any job


def test_the_training_sampler_is_part_of_a_runs_identity(tiny_bank):
    """The loader and the device sampler draw other episodes: a sweep folder made with one is
    not the other's (`curi baselines` refuses it, or reruns it with force)."""
    from curi.models.baselines import _identity
    from curi.models.config import RunConfig

    ev = {"episodes": 10, "seed": 0, "negatives": "hard"}
    runs = [
        RunConfig.from_mapping({"bank": tiny_bank.config, "train": {"sampler": s}})
        for s in ("loader", "device")
    ]
    assert _identity(runs[0], ev, 1) != _identity(runs[1], ev, 1)
    graph = RunConfig.from_mapping(
        {"bank": tiny_bank.config, "train": {"sampler": "loader", "cuda_graph": False}}
    )
    assert _identity(graph, ev, 1) == _identity(runs[0], ev, 1)  # how a step runs is not


PV = (
    "configs=[{name: pv, learner: {name: propose_verify, steps: 2, batch: 2, k: 4, "
    "select_episodes: 2, fallback_steps: 2}, default: false, splits: [concept_iid]}]"
)


def test_the_propose_verify_learner_runs_as_a_configuration(tiny_bank_dir, tmp_path, monkeypatch):
    """Trained by its own training on the split's training concepts, tested by `evaluate_run`
    on the sweep's test episodes beside the oracles; its paper cell is "—"; a finished run is
    skipped and a trained one is tested without training again."""
    import curi.models.propose_verify_train as pv_mod

    out = tmp_path / "bl"
    cfg = _cfg(*TINY, PV, "only=[pv]", f"data_dir={tiny_bank_dir.parent}", f"output_dir={out}")
    models_cli.baselines(cfg)
    table = json.loads((out / "baselines.json").read_text())
    (row,) = table["rows"]
    run = out / "runs" / "pv" / "concept_iid" / "seed0"
    metrics = json.loads((run / "eval" / "metrics.json").read_text())
    result = json.loads((run / "result.json").read_text())
    assert metrics["learner"] == "propose_verify" and metrics["episodes"] == 6
    assert row["learner"] == "propose_verify" and row["test_map"] == metrics["map"]
    assert row["paper_map"] is None and row["steps"] == 2 and row["best_val_map"] is None
    assert result["fallback_model_rate"] == metrics["fallback_model_rate"]
    assert result["pooling"] == "avg"  # of its fallback protonet
    assert (run / "train" / "checkpoints" / "best.pt").is_file()
    oracle = json.loads((out / "oracles" / "concept_iid.json").read_text())["row"]
    assert row["oracle_strong"] == oracle["map_strong"]  # the same test episodes
    assert "| concept_iid | " in (md := (out / "baselines.md").read_text()) and "(—)" in md
    ident = json.loads((run / "run.json").read_text())
    assert ident["learner"]["fallback_steps"] == 2 and "train" not in ident["run"]

    def refuse(*a, **k):
        raise AssertionError("trained again")

    monkeypatch.setattr(pv_mod, "train_run", refuse)
    models_cli.baselines(cfg)  # finished: skipped
    assert json.loads((out / "baselines.json").read_text())["rows"] == table["rows"]
    (run / "result.json").unlink()  # trained, not yet tested: tested without training
    models_cli.baselines(cfg)
    again = json.loads((out / "baselines.json").read_text())["rows"]
    assert [r["test_map"] for r in again] == [row["test_map"]]
    with pytest.raises(ConfigError, match="other settings"):
        models_cli.baselines(
            _cfg(
                *TINY,
                PV.replace("k: 4", "k: 5"),
                "only=[pv]",
                f"data_dir={tiny_bank_dir.parent}",
                f"output_dir={out}",
            )
        )

"""The text modality: scene clauses, the round trip of a task's structured fields through its
text, the JSON-lines and parquet export read by `datasets`, `curi rules` end to end, and
exported episodes re-rendered as text."""

import json

import pyarrow.parquet as pq
import pytest
from conftest import run_curi

from curi import RuleTaskSampler, make_split
from curi.export import export_episodes
from curi.renderers.text import TextFormatError, TextRenderer, parse_input, scene_text
from curi.renderers.text_export import ROW_SCHEMA, export_rule_tasks, render_episodes_as_text

DISCRETE = ("size", "color", "material", "shape", "x", "y")


@pytest.fixture(scope="module")
def sampler(tiny_bank):
    return RuleTaskSampler(
        tiny_bank, make_split(tiny_bank, "binding_color"), "test", rule_rate=0.5, size=40
    )


def _objects(record):
    return [{k: o[k] for k in DISCRETE} for o in record["objects"]]


def test_scene_text_from_records_and_from_the_bank_agree(tiny_bank):
    ids = list(range(0, 20_000, 997))
    records = tiny_bank.scene_records(ids)
    assert TextRenderer(tiny_bank).scenes(ids) == [scene_text(r) for r in records]
    text = scene_text(records[0])
    assert text.count(";") == len(records[0]["objects"]) - 1
    o = records[0]["objects"][0]
    assert text.startswith(
        f"{o['size']} {o['color']} {o['material']} {o['shape']} at ({o['x']}, {o['y']})"
    )
    with pytest.raises(ValueError, match="object 0"):
        scene_text({"objects": [{"shape": "torus"}]})
    with pytest.raises(ValueError, match="by id"):
        TextRenderer().scenes([0])


def test_round_trip_of_the_structured_fields(tiny_bank, sampler):
    """The text of every request reads back as the task's support scenes, labels, context
    rules and request; the target is the reply and the qualifier."""
    text = TextRenderer(tiny_bank)
    n_rules = 0
    for i in range(len(sampler)):
        task = sampler[i].to_dict()
        rows = text.rows(task)
        assert len(rows) == len(task["requests"])
        support = tiny_bank.scene_records([e["id"] for e in task["support"]])
        for j, (row, req) in enumerate(zip(rows, task["requests"], strict=True)):
            back = parse_input(row["input"])
            assert [s["objects"] for s in back["support"]] == [_objects(r) for r in support]
            assert [s["label"] for s in back["support"]] == [e["label"] for e in task["support"]]
            assert back["context_rules"] == task["context_rules"]
            if req["kind"] == "scene":
                record = tiny_bank.scene_records([req["id"]])[0]
                assert back["request"] == {"kind": "scene", "objects": _objects(record)}
            else:
                assert back["request"] == {"kind": req["kind"], "rule": req["rule"]}
            assert row["target"] == f"{req['reply']} {req['qualifier']}"
            assert (row["task"], row["request"], row["kind"]) == (i, j, req["kind"])
            assert row["concept"] == task["concept"] and set(row) == set(ROW_SCHEMA)
        n_rules += len(task["context_rules"])
    assert n_rules > 0


@pytest.mark.parametrize(
    "bad,line",
    [
        ("contexts:\nrequest: scene: small red rubber cube at (1, 2)", 1),
        ("context:\nexample: small red rubber cube at (1, 2) => 2\nrequest: equals r", 2),
        ("context:\nexample: small red wooden cube at (1, 2) => 1\nrequest: equals r", 2),
        ("context:\nrule: entails r => 1\nrequest: equals r", 2),
        ("context:\nrequest: entails r", 2),
        ("context:\nexample: small red rubber cube at (1, 2) => 1", 2),
    ],
)
def test_bad_text_names_the_line(bad, line):
    with pytest.raises(TextFormatError, match=f"line {line}"):
        parse_input(bad)


def test_export_loads_with_datasets(sampler, tmp_path):
    datasets = pytest.importorskip("datasets")
    paths = export_rule_tasks(sampler, tmp_path / "set", n=10, progress=False)
    tasks = [json.loads(line) for line in paths["tasks"].read_text().splitlines()]
    assert tasks == [sampler[i].to_dict() for i in range(10)]
    n = sum(len(t["requests"]) for t in tasks)
    js = datasets.load_dataset("json", data_files=str(paths["text_jsonl"]), split="train")
    pa = datasets.load_dataset("parquet", data_files=str(paths["text_parquet"]), split="train")
    assert len(js) == len(pa) == n
    assert js[0]["input"] == pa[0]["input"] and js[0]["target"] == pa[0]["target"]
    assert pa.column_names == list(ROW_SCHEMA)
    assert pq.read_table(paths["text_parquet"]).num_rows == n
    mix = json.loads(paths["mix"].read_text())
    assert mix["tasks"] == 10 and mix["requests"] == n
    meta = json.loads(paths["meta"].read_text())
    assert meta["split"] == "binding_color" and meta["rows"] == n and meta["rule_rate"] == 0.5
    assert not list((tmp_path / "set").glob(".*tmp*"))  # published atomically


def test_curi_rules_writes_a_task_set_and_prints_the_mix(tiny_bank_dir, tmp_path):
    rules_file = tmp_path / "rules.txt"
    rules_file.write_text(
        "# my rules\nx color? red = lambda S. exists=\n\nx shape? cube = lambda S. for-all=\n"
    )
    out = tmp_path / "rules"
    r = run_curi(
        "rules",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "n=12",
        f"out={out}",
        "split=binding_color",
        "rule_rate=0.5",
        f"rules={rules_file}",
        "progress=false",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "request:" in r.stdout and "class:" in r.stdout and "? D" in r.stdout
    tasks = [json.loads(s) for s in (out / "tasks.jsonl").read_text().splitlines()]
    assert len(tasks) == 12
    asked = {q["rule"] for t in tasks for q in t["requests"] if q["kind"] != "scene"}
    assert asked <= {"x color? red = lambda S. exists=", "x shape? cube = lambda S. for-all="}
    rules_file.write_text("x color? red = lambda S. exists=\nx colour? red = lambda S. exists=\n")
    bad = run_curi(
        "rules",
        "bank=tiny",
        f"data_dir={tiny_bank_dir.parent}",
        "n=2",
        f"out={out}",
        f"rules={rules_file}",
        cwd=tmp_path,
    )
    assert bad.returncode == 2
    assert "line 2" in bad.stderr and "does not parse" in bad.stderr
    assert bad.stderr.count("\n") <= 2 and "Traceback" not in bad.stderr


def test_exported_episodes_re_render_as_text(tiny_bank, tmp_path):
    split = make_split(tiny_bank, "concept_iid")
    out = export_episodes(tiny_bank, split, "test", tmp_path / "eps.jsonl", n=3, progress=False)
    paths = render_episodes_as_text(out["episodes"], tmp_path / "text", progress=False)
    rows = [json.loads(s) for s in paths["text_jsonl"].read_text().splitlines()]
    eps = [json.loads(s) for s in (tmp_path / "eps.jsonl").read_text().splitlines()]
    assert len(rows) == sum(len(e["query_labels"]) for e in eps)
    first = parse_input(rows[0]["input"])
    assert [s["objects"] for s in first["support"]] == [
        _objects(r) for r in eps[0]["support_records"]
    ]
    assert first["request"]["objects"] == _objects(eps[0]["query_records"][0])
    assert rows[0]["target"] == str(eps[0]["query_labels"][0])
    assert rows[0]["scene"] == eps[0]["query_ids"][0]
    assert pq.read_table(paths["text_parquet"]).num_rows == len(rows)


def test_curi_episodes_render_text(tiny_bank, tmp_path):
    """`curi episodes render ... text=true`: any exported episode set re-rendered as text rows."""
    split = make_split(tiny_bank, "binding_color")
    out = export_episodes(tiny_bank, split, "test", tmp_path / "eps.jsonl", n=2, progress=False)
    r = run_curi(
        "episodes",
        "render",
        f"in={out['episodes']}",
        f"out={tmp_path / 'txt'}",
        "text=true",
        "progress=false",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    rows = [json.loads(s) for s in (tmp_path / "txt" / "text.jsonl").read_text().splitlines()]
    assert len(rows) == 50 and {row["target"] for row in rows} == {"0", "1"}
    assert all(row["input"].startswith("context:\nexample: ") for row in rows)
    assert not (tmp_path / "outputs").exists()

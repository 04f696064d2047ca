"""The table script (`benchmarks/gpu_table.py`) end to end on the CPU with the tiny bank, its
results file accumulating across calls, its refusals of bad input and its rendered block."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_table.py"


@pytest.fixture(scope="module")
def table():
    spec = importlib.util.spec_from_file_location("gpu_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def _run(tiny_bank_dir, tmp_path, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    base = ["--bank", "tiny", "--device", "cpu", "--data-dir", str(tiny_bank_dir.parent)]
    return subprocess.run(
        [sys.executable, str(SCRIPT), *base, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,  # a hang guard: about 30 s a call on a loaded 2-core machine
    )


def test_cells_are_the_paper_schema_cells_in_the_table_order(table):
    cells = table.cells()
    assert len(cells) == 63  # 4 poolers x 9 splits hard, 3 x 9 easy (no easy transformer)
    assert [c[0] for c in cells[:9]] == ["relation_net"] * 9 and {c[2] for c in cells[:36]} == {
        "hard"
    }
    assert [c[0] for c in cells[9:18]] == ["transformer"] * 9
    assert {c[2] for c in cells[36:]} == {"easy"} and (
        "transformer",
        "concept_iid",
        "easy",
    ) not in cells


def test_two_calls_accumulate_cells_with_every_key(tiny_bank_dir, tmp_path, table):
    res = tmp_path / "res.json"
    args = ["--minutes", "0.3", "--results", str(res), "--commit", "abc123"]
    for call in (1, 2):
        r = _run(tiny_bank_dir, tmp_path, *args, "--out", str(tmp_path / f"out{call}"))
        assert r.returncode == 0, r.stderr[-3000:]
    records = json.loads(res.read_text())
    assert len(records) >= 2
    assert [(r["pooler"], r["split"], r["negatives"]) for r in records[:2]] == table.cells()[:2]
    for rec in records:
        assert set(table.REQUIRED) <= set(rec)
        assert rec["commit"] == "abc123" and rec["bank"] == "tiny" and rec["seed"] == 0
        assert 0 < rec["test_map"] <= 1 and rec["episodes"] == rec["steps"] * rec["batch"]
        assert rec["val_curve"] and rec["test_episodes"] == 100


def test_render_shows_every_paper_cell(table, tmp_path):
    doc = tmp_path / "fidelity.md"
    mark = "table:baselines-measured"
    doc.write_text(f"before\n<!-- {mark} -->\nold\n<!-- /{mark} -->\nafter\n")
    rec = dict.fromkeys(table.REQUIRED, 0)
    rec.update(pooler="avg", split="boolean", negatives="easy", bank="tiny", commit="0123456789ab",
               test_map=0.5, episodes=1024)  # fmt: skip
    table.render([rec], doc)
    text = doc.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    rows = [
        x
        for x in text.splitlines()
        if x.startswith("| schema") or x.startswith("| image") or x.startswith("| sound")
    ]
    assert len(rows) == 153
    cell = "| schema | avg | boolean | easy | 50.0 (1) | 55.0 ± 2.1 | -5.0 | 1,024 | tiny |"
    assert f"{cell} 012345678 |" in text
    assert sum("unmeasured" in x for x in rows) == 152


@pytest.mark.parametrize(
    "args, says",
    [
        (["--minutes", "0"], "--minutes must be a positive"),
        (["--minutes", "-1"], "--minutes must be a positive"),
        (["--cells", "relation_net/nowhere/hard"], "unknown cell"),
        (["--cells", "transformer/concept_iid/easy"], "unknown cell"),
    ],
)
def test_bad_options_are_one_line_and_write_nothing(table, tmp_path, capsys, args, says):
    res = tmp_path / "res.json"
    assert table.main([*args, "--results", str(res), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert not res.exists()


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "does not parse"),
        ('{"a": 1}', "JSON list of objects"),
        ('[{"device": "x"}]', "record 0 lacks"),
    ],
)
def test_a_bad_results_file_is_refused_and_kept(table, tmp_path, capsys, content, says):
    res = tmp_path / "res.json"
    res.write_text(content)
    assert table.main(["--results", str(res), "--device", "cpu", "--commit", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert res.read_text() == content


def test_a_record_of_another_bank_with_the_same_name_is_refused(
    table, tiny_bank_dir, tmp_path, capsys
):
    res = tmp_path / "res.json"
    rec = dict.fromkeys(table.REQUIRED, 0)
    rec.update(bank="tiny", bank_sha256="f" * 64, pooler="avg", split="boolean", negatives="hard")
    res.write_text(json.dumps([rec]))
    before = res.read_text()
    argv = ["--bank", "tiny", "--device", "cpu", "--data-dir", str(tiny_bank_dir.parent)]
    assert table.main([*argv, "--results", str(res), "--commit", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another bank" in err[0]
    assert res.read_text() == before


def test_cuda_asked_for_without_a_gpu_is_one_line(table, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert table.main(["--results", str(tmp_path / "r.json"), "--commit", "x"]) == 2
    assert "torch sees no GPU" in capsys.readouterr().err

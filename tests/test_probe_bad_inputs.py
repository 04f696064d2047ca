"""The sweep of bad inputs (`benchmarks/probe_bad_inputs.py`, issue 44: "a sweep of bad inputs
ends in one line every time"): a few of its probes, one or two per kind of bad input, each run
as a fresh `curi` process and judged as the script judges it (exit 2, one line on stderr, no
traceback, nothing left in the working folder); the list itself covers every command. The
whole sweep takes minutes and stays a script; the probes come from its list, their one home."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "probe_bad_inputs.py"

SAMPLE = [
    "bank, name escapes",
    "CURI_DATA_DIR a file",
    "gap, seed a word",
    "gap, split file nested deep",
    "gap, the bank group deleted",
    "train, resume a FIFO",
    "eval, checkpoint a text file",
    "show, scene past the end",
    "episodes, out an unknown suffix",
    "episodes render, in binary",
    "lm export, tokenizer garbage",
    "rules, a rule that does not parse",
    "score, tasks binary",
]
# Refused in one line, yet after the run folder was made (outputs/...): the checkpoint was
# read, and the split file checked against the bank, only once the command ran.
LEFT_A_FOLDER = [
    *(f"{cmd}, checkpoint {what}" for cmd in ("eval", "difficulty")
      for what in ("a zip of junk", "a pickled integer", "a pickled dict")),
    "gap, split file index outside",
    "gap, split file of another bank",
]  # fmt: skip


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("probe_bad_inputs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path  # the script puts benchmarks/ first, to import bench_refusals
    return module


@pytest.fixture(scope="module")
def listed(script, tiny_bank_dir, tmp_path_factory):
    """(the probes by description, the folder of their inputs)."""
    tmp = tmp_path_factory.mktemp("probes")
    script.inputs(tmp)
    try:
        yield {p.what: p for p in script.probes(tmp, tiny_bank_dir.parent)}, tmp
    finally:
        script.bench_refusals.lock(tmp / "locked", False)  # pytest can remove it then


def test_the_list_has_every_command_and_at_least_121_probes(listed):
    probes = listed[0].values()
    assert len(probes) >= 121
    lines = {" ".join(p.args) for p in probes}
    for ep in entry_points(group="curi.commands"):
        name = ep.name.replace(".", " ")
        assert any(line.startswith(f"{name} ") for line in lines), name


@pytest.fixture(scope="module")
def exported(script, listed, tiny_bank_dir):
    """`listed`, with the saved split and episode files (and their spoilt copies) made."""
    script.make_exports(listed[1], tiny_bank_dir.parent)
    return listed


@pytest.mark.parametrize("what", SAMPLE)
def test_a_bad_input_ends_in_one_line(script, listed, what, tmp_path):
    _one_line(script, listed, what, tmp_path)


@pytest.mark.parametrize("what", LEFT_A_FOLDER)
def test_a_bad_input_refused_late_leaves_no_run_folder(script, exported, what, tmp_path):
    _one_line(script, exported, what, tmp_path)


def _one_line(script, listed, what: str, tmp_path: Path) -> None:
    probes, tmp = listed
    env = {**os.environ, "CURI_DATA_DIR": str(tmp / "default_data")}
    (tmp_path / "cwd").mkdir()
    # a hang guard far above the few seconds a refusal takes on a loaded machine
    r = script.run_probe(probes[what], tmp_path / "cwd", timeout=600, env=env)
    assert script.judge(probes[what], r) == "", r.stderr[-3000:]


@pytest.mark.parametrize("device", ["tpu", "cuda:x"])
def test_a_device_of_no_known_form_is_refused_before_a_run_folder(tiny_bank_dir, tmp_path, device):
    from curi import validate
    from curi.errors import ConfigError

    for ok in ("auto", "cpu", "cuda", "cuda:3"):
        assert validate.device(ok) == ok
    with pytest.raises(ConfigError, match="device must be auto, cpu, cuda or cuda:N"):
        validate.device("CUDA")
    r = subprocess.run(
        [sys.executable, "-c", "from curi.cli import main; main()", "train", "bank=tiny",
         f"data_dir={tiny_bank_dir.parent}", f"device={device}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,  # a hang guard: ~1 s when quiet
    )  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "device must be" in lines[0], r.stderr
    assert not list(tmp_path.iterdir())  # no run folder (outputs/...)

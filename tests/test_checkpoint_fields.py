"""Tests of the checkpoint fields beside the weights, which the weights' digest does not cover
(`curi.models.checkpoint.check_fields`, `load_optimizer`): ``config``, ``step``,
``best_step``, ``best_map`` and the optimizer state are each refused in one line naming the
field when out of range, and a checkpoint `curi train` writes today still resumes. Also the
run folder's ``metrics.jsonl`` that is not a regular file (a FIFO would block for ever)."""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_curi
from hydra import compose, initialize_config_module

from curi.errors import ConfigError
from curi.models import RunConfig, build_model, make_renderer
from curi.models import cli as models_cli
from curi.models.checkpoint import (
    MetricLogger,
    check_checkpoint,
    load_checkpoint,
    load_optimizer,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# four steps, a checkpoint every two, validation at step 3 and at the end: step 2's checkpoint
# holds no best yet (best_map -inf, best_step None), step 4's a best_step
OVER = ["train.steps=4", "train.checkpoint_every=2", "train.eval_every=3", "train.val_episodes=4"]


def _cfg(bank_dir: Path, out: Path, *overrides: str):
    base = ["bank=tiny", "train=tiny", f"data_dir={bank_dir.parent}", f"output_dir={out}"]
    with initialize_config_module(config_module="curi.conf", version_base="1.3"):
        return compose("train", [*base, "progress=false", "device=cpu", *OVER, *overrides])


@pytest.fixture(scope="module")
def run_dir(tiny_bank_dir, tmp_path_factory) -> Path:
    """A run of `curi train` as today's code writes it (checkpoints at steps 2 and 4)."""
    out = tmp_path_factory.mktemp("fields") / "run"
    models_cli.train(_cfg(tiny_bank_dir, out))
    return out


def _edited(run_dir: Path, tmp_path: Path, name: str = "step_0000004.pt", **fields) -> Path:
    """A copy of a checkpoint of `run_dir` with `fields` replaced (as a hand edit leaves it:
    the weights and their digest untouched)."""
    payload = torch.load(run_dir / "checkpoints" / name, weights_only=True)
    payload.update(fields)
    path = tmp_path / name
    torch.save(payload, path)
    return path


def _refused(path: Path, field: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_checkpoint(path)
    msg = str(err.value)
    assert f"is damaged: its {field} is " in msg and str(path) in msg, msg
    assert "\n" not in msg and len(msg) < 400
    with pytest.raises(ConfigError) as cheap:  # the command's check, before its run folder
        check_checkpoint(path)
    assert str(cheap.value) == msg
    return msg


def test_checkpoints_written_today_load_and_resume(run_dir, tiny_bank_dir, tmp_path):
    early, _ = load_checkpoint(run_dir / "checkpoints" / "step_0000002.pt")
    assert early["step"] == 2 and early["best_step"] is None and early["best_map"] == -math.inf
    late, _ = load_checkpoint(run_dir / "checkpoints" / "step_0000004.pt")
    assert late["step"] == 4 and late["best_step"] in (3, 4) and 0 <= late["best_map"] <= 1
    # resumed from before the first validation: the checks accept what `curi train` wrote
    resumed = tmp_path / "resumed"
    step2 = run_dir / "checkpoints" / "step_0000002.pt"
    models_cli.train(_cfg(tiny_bank_dir, resumed, f"resume={step2}"))
    end, _ = load_checkpoint(resumed / "checkpoints" / "last.pt")
    assert end["step"] == 4 and end["best_step"] == late["best_step"]
    for k, v in late["model"].items():  # the resumed run is the uninterrupted one
        assert torch.equal(v, end["model"][k]), k


def test_the_cheap_check_passes_what_loads_and_refuses_what_does_not(run_dir, tmp_path):
    # `check_checkpoint` reads the pickle without torch, tensors as placeholders
    for name in ("step_0000002.pt", "step_0000004.pt", "best.pt", "last.pt"):
        path = run_dir / "checkpoints" / name
        assert check_checkpoint(path) == path
    assert check_checkpoint(run_dir) == run_dir / "checkpoints" / "best.pt"
    assert check_checkpoint(run_dir, last=True) == run_dir / "checkpoints" / "last.pt"
    payload, _ = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    legacy = tmp_path / "legacy.pt"  # torch's format before the zip archive
    torch.save(payload, legacy, _use_new_zipfile_serialization=False)
    assert check_checkpoint(legacy) == legacy and load_checkpoint(legacy)[0]["step"] == 4
    other = tmp_path / "other.pt"  # another learner's: passed to its own loader
    torch.save({"learner": "propose_verify", "state_dict": payload["model"]}, other)
    assert check_checkpoint(other, learners=("protonet", "propose_verify")) == other
    cases = {
        "format": ({**payload, "format": 2}, "is not a curi checkpoint (format 1)"),
        "learner": ({"learner": "propose_verify"}, "is not a curi checkpoint (format 1)"),
        "no weights": ({**payload, "model": {"w": [1.0]}}, "holds no model weights"),
        "a list": ([payload], "is not a curi checkpoint (format 1)"),
    }
    for case, (content, says) in cases.items():
        path = tmp_path / f"{case}.pt"
        torch.save(content, path)
        with pytest.raises(ConfigError) as loaded:
            load_checkpoint(path)
        with pytest.raises(ConfigError) as checked:
            check_checkpoint(path)
        assert says in str(loaded.value) and str(checked.value) == str(loaded.value), case


def test_the_cheap_check_builds_no_object_a_checkpoint_never_holds(tmp_path):
    ran = tmp_path / "ran"

    class Crafted:
        def __reduce__(self):
            return (open, (str(ran), "w"))

    path = tmp_path / "crafted.pt"
    torch.save({"format": 1, "step": 3, "model": {"w": Crafted()}}, path)
    with pytest.raises(ConfigError) as checked:
        check_checkpoint(path)
    with pytest.raises(ConfigError) as loaded:
        load_checkpoint(path)
    assert str(checked.value) == str(loaded.value) and "it needs io.open" in str(checked.value)
    assert not ran.exists()


@pytest.mark.parametrize("step", [10**12, 5, -7, "abc", 2.0, True, None])
def test_a_step_out_of_range_is_refused(run_dir, tmp_path, step):
    msg = _refused(_edited(run_dir, tmp_path, step=step), "step")
    assert "[0, 4]" in msg  # the checkpoint's own train.steps


@pytest.mark.parametrize("best_step", [5, -1, "3", 3.0])
def test_a_best_step_out_of_range_is_refused(run_dir, tmp_path, best_step):
    _refused(_edited(run_dir, tmp_path, best_step=best_step), "best_step")


@pytest.mark.parametrize("best_map", [99.0, float("nan"), -0.5, math.inf, "0.5", None])
def test_a_best_map_out_of_range_is_refused(run_dir, tmp_path, best_map):
    _refused(_edited(run_dir, tmp_path, best_map=best_map), "best_map")


def test_a_best_map_without_a_best_step_is_refused(run_dir, tmp_path):
    path = _edited(run_dir, tmp_path, "step_0000002.pt", best_map=0.5)
    _refused(path, "best_map")
    # an mAP of exactly 0 or 1 is one
    load_checkpoint(_edited(run_dir, tmp_path, best_map=1))


@pytest.mark.parametrize("config", ["abc", ["a"], None])
def test_a_config_that_is_not_a_mapping_is_refused(run_dir, tmp_path, config):
    # was: "unknown run option(s) ['a', 'b', 'c']" for the string
    _refused(_edited(run_dir, tmp_path, config=config), "config")


def test_a_step_past_the_end_is_refused_by_curi_train_in_one_line(run_dir, tiny_bank_dir, tmp_path):
    # was: exit 0 and a summary claiming 10^12 steps with nothing trained
    bad = _edited(run_dir, tmp_path, step=10**12)
    args = ["train", "bank=tiny", "train=tiny", "device=cpu", "progress=false", *OVER]
    args += [f"data_dir={tiny_bank_dir.parent}", f"output_dir={tmp_path / 'out'}", f"resume={bad}"]
    r = run_curi(*args, cwd=tmp_path, timeout=600)
    assert r.returncode == 2, r.stderr[-2000:]
    (line,) = r.stderr.splitlines()
    assert "its step is 1000000000000, not an integer in [0, 4]" in line
    assert not (tmp_path / "out" / "summary.json").exists()


def _optimizer(run_dir: Path):
    """The model and Adam of the run's config, as `curi train` builds them to resume."""
    payload, _ = load_checkpoint(run_dir / "checkpoints" / "step_0000004.pt")
    run = RunConfig.from_mapping(payload["config"])
    model = build_model(run, make_renderer(run.modality))
    return payload, torch.optim.Adam(model.parameters(), lr=1e-3)


def _junk(state: dict, case: str) -> object:
    """The optimizer state `state` spoilt as `case` says."""
    first = state["state"][0]
    if case == "not a mapping":
        return "junk"
    if case == "no groups":
        return {**state, "param_groups": []}
    if case == "other parameters":
        return {**state, "param_groups": [{**state["param_groups"][0], "params": [0, 1]}]}
    if case == "lr a string":
        return {**state, "param_groups": [{**state["param_groups"][0], "lr": "abc"}]}
    if case == "betas NaN":
        return {**state, "param_groups": [{**state["param_groups"][0], "betas": (math.nan, 0.9)}]}
    if case == "a parameter the model lacks":
        return {**state, "state": {**state["state"], 10**6: first}}
    if case == "a misshapen moment":
        return {**state, "state": {0: {**first, "exp_avg": torch.zeros(3, 1, 7)}}}
    if case == "NaN in a moment":
        moment = first["exp_avg_sq"].clone()
        moment.view(-1)[0] = math.nan
        return {**state, "state": {**state["state"], 0: {**first, "exp_avg_sq": moment}}}
    assert case == "a step that is a string"
    return {**state, "state": {**state["state"], 0: {**first, "step": "x"}}}


JUNK = [
    "not a mapping",
    "no groups",
    "other parameters",
    "lr a string",
    "betas NaN",
    "a parameter the model lacks",
    "a misshapen moment",
    "NaN in a moment",
    "a step that is a string",
]


@pytest.mark.parametrize("case", JUNK)
def test_an_optimizer_state_that_does_not_fit_the_model_is_refused(run_dir, case):
    payload, opt = _optimizer(run_dir)
    load_optimizer(opt, payload, Path("x.pt"))  # the state as saved fits
    payload, opt = _optimizer(run_dir)
    before = opt.state_dict()
    spoilt = {**payload, "optimizer": _junk(payload["optimizer"], case)}
    with pytest.raises(ConfigError) as err:
        load_optimizer(opt, spoilt, Path("x.pt"))
    msg = str(err.value)
    assert msg.startswith("checkpoint x.pt is damaged: its optimizer state "), msg
    assert "\n" not in msg and len(msg) < 400
    assert opt.state_dict()["state"] == before["state"] == {}  # nothing loaded


def test_nan_in_adams_state_is_refused_on_resume(run_dir, tiny_bank_dir, tmp_path):
    # was: trained on, then failed at validation
    payload = torch.load(run_dir / "checkpoints" / "step_0000002.pt", weights_only=True)
    spoilt = _edited(
        run_dir,
        tmp_path,
        "step_0000002.pt",
        optimizer=_junk(payload["optimizer"], "NaN in a moment"),
    )
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"its optimizer state 'exp_avg_sq' of parameter 0 holds"):
        models_cli.train(_cfg(tiny_bank_dir, out, f"resume={spoilt}"))
    assert not (out / "checkpoints").exists()


def test_a_fifo_at_metrics_jsonl_is_refused_on_resume_not_waited_on(
    run_dir, tiny_bank_dir, tmp_path
):
    # was: `path.open("a")` waited for a reader of the FIFO for ever
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    args = ["train", "bank=tiny", "train=tiny", "device=cpu", "progress=false", *OVER]
    args += ["train.steps=6", f"data_dir={tiny_bank_dir.parent}", f"output_dir={run}"]
    r = run_curi(*args, cwd=tmp_path, timeout=600)  # a hang guard (seconds when it works)
    assert r.returncode == 2, r.stderr[-2000:]
    (line,) = r.stderr.splitlines()
    assert f"{run / 'metrics.jsonl'} is a FIFO, not a regular file" in line


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks")
def test_a_link_at_metrics_jsonl_is_refused_and_its_target_untouched(tmp_path):
    run, target = tmp_path / "run", tmp_path / "elsewhere.jsonl"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to(target)  # dangling: `open("a")` created the target
    with pytest.raises(ConfigError, match=r"metrics.jsonl is a symlink, not a regular file"):
        MetricLogger(run, resume_step=3)
    assert not target.exists()

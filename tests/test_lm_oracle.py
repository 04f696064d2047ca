"""The Bayesian oracle as an lm-evaluation-harness model (`curi.models.lm.oracle_lm`), run by
lm-eval's own evaluator on an exported task folder: its metrics equal the oracle's computed
directly from the episode tables, so the prompt text holds the whole episode and the task's
metric code is right. lm-eval's random `dummy` model runs on the same tasks; `curi lm compare`
reads the results beside the oracles and refuses results of other tasks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

lm_eval = pytest.importorskip("lm_eval")

from lm_eval import evaluator as lm_evaluator  # noqa: E402
from lm_eval.models.dummy import DummyLM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from curi.errors import PredictionsError  # noqa: E402
from curi.models.lm.compare import compare, oracle_items, oracle_metrics  # noqa: E402
from curi.models.lm.export import export_tasks  # noqa: E402
from curi.models.lm.oracle_lm import FLOOR, OracleLM, log_likelihoods  # noqa: E402
from curi.models.lm.task import doc_to_text, read_manifest, read_table  # noqa: E402
from curi.splits import make_split  # noqa: E402

METRICS = ("cba", "ap", "eval_ap")


@pytest.fixture(scope="module", autouse=True)
def _no_env_report():
    """lm-eval logs the environment (pip list, nvidia-smi ...: seconds) into every result;
    nothing here reads it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lm_evaluator, "add_env_info", lambda storage: None)
        yield


@pytest.fixture(scope="module")
def folder(tiny_bank, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm_oracle")
    split = make_split(tiny_bank, "counting")  # the weak oracle is far from perfect on it
    export_tasks(
        tiny_bank, [split], out, negatives=("hard", "easy"), n=4, eval_scenes=40, progress=False
    )
    return out


def _evaluate(model, folder, tasks=("curi",)):
    return lm_eval.simple_evaluate(
        model=model,
        tasks=list(tasks),
        task_manager=TaskManager(include_path=str(folder), include_defaults=False),
        bootstrap_iters=0,
        log_samples=False,
        verbosity="ERROR",
    )


@pytest.fixture(scope="module")
def weak_results(folder, tiny_bank):
    return _evaluate(OracleLM(tiny_bank, folder, policy="weak"), folder)


def test_log_likelihoods_keep_the_oracles_ranking_and_decision():
    tiny = np.nextafter(0.0, 1.0)
    p = [0.0, tiny, 1e-300, 0.2, 0.5, np.nextafter(0.5, 1.0), 0.9, np.nextafter(1.0, 0.0), 1.0]
    lls = [log_likelihoods(float(x)) for x in p]
    score = [pos - neg for neg, pos in lls]
    assert all(math.isfinite(v) and v <= 0 for ll in lls for v in ll)
    assert all(a < b for a, b in zip(score, score[1:], strict=False))  # strictly increasing
    assert [s > 0 for s in score] == [x > 0.5 for x in p]
    assert lls[0][1] == FLOOR and lls[-1][0] == FLOOR


def test_oracle_reads_each_prompt_into_the_oracles_probability(folder, tiny_bank):
    """Without the episode tables: the strong oracle's p of every document from its text."""
    lm = OracleLM(tiny_bank, folder, policy="strong")
    for task in read_manifest(folder)["tasks"]:
        docs = read_table(folder / f"{task}.docs.jsonl.gz")
        got = lm.probabilities(task, [doc_to_text(folder, d) for d in docs])
        want = [p for _, _, _, p in oracle_items(tiny_bank, folder, task, "strong")]
        # equal up to the order of a floating-point sum (numpy sums one scene or many rows)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_oracle_through_lm_eval_equals_the_oracle(folder, tiny_bank, weak_results):
    seen = []
    for task in read_manifest(folder)["tasks"]:
        direct = oracle_metrics(oracle_items(tiny_bank, folder, task, "weak"))
        got = weak_results["results"][task]
        for m in METRICS:
            assert got[f"{m},none"] == pytest.approx(direct[m], abs=1e-9, nan_ok=True), (task, m)
            seen.append(direct[m])
    assert any(0 < v < 0.99 for v in seen)  # a weak oracle far from perfect: a real check


class _Dummy(DummyLM):
    """lm-eval's random model (`--model dummy`) without its tokenizer, which lm-eval would
    download only to log its special tokens (no download here)."""

    tokenizer = None


def test_dummy_model_runs_and_stays_in_range(folder):
    res = _evaluate(_Dummy(), folder, ["curi_counting_hard"])["results"]["curi_counting_hard"]
    assert all(0 <= res[f"{m},none"] <= 1 for m in ("cba", "ap"))


def _write(results: dict, path):
    path.mkdir(parents=True, exist_ok=True)
    keep = {k: results[k] for k in ("results", "n-samples", "config")}
    (path / "results_2026-01-01T00-00-00.json").write_text(json.dumps(keep, default=str))


def test_compare_puts_the_results_beside_the_oracles(folder, tiny_bank, weak_results, tmp_path):
    from curi.models.lm.cli import lm_compare

    _write(weak_results, tmp_path / "res" / "oracle")
    rows = compare(tiny_bank, folder, tmp_path / "res")
    assert [r["task"] for r in rows] == ["curi_counting_hard", "curi_counting_easy"]
    for r in rows:  # the weak oracle as a model: its own column, exactly
        assert r["cba_model"] == pytest.approx(r["cba_weak"], abs=1e-9)
        assert r["ap_model"] == pytest.approx(r["ap_weak"], abs=1e-9)
        assert r["ap_strong"] >= r["ap_weak"] and 0 <= r["ap_random"] <= 1
    cfg = OmegaConf.create(
        {
            "bank": {"name": "tiny", "num_scenes": 20_000, "num_draws": 40_000},
            "data_dir": str(tiny_bank.path.parent),
            "results": str(tmp_path / "res"),
            "tasks": str(folder),
            "prior": "log_linear",
            "likelihood": "size_principle",
            "seed": 0,
            "out": str(tmp_path / "rows.json"),
            "progress": False,
        }
    )
    lm_compare(cfg)
    assert json.loads((tmp_path / "rows.json").read_text()) == json.loads(json.dumps(rows))


def test_compare_refuses_results_of_other_tasks(folder, tiny_bank, weak_results, tmp_path):
    other = {**weak_results, "results": {"hellaswag": {"acc,none": 0.3}}}
    _write(other, tmp_path / "a")
    with pytest.raises(PredictionsError, match="hold none of the tasks of"):
        compare(tiny_bank, folder, tmp_path / "a")
    fewer = json.loads(json.dumps(weak_results, default=str))
    fewer["n-samples"]["curi_counting_hard"]["original"] = 7
    _write(fewer, tmp_path / "b")
    with pytest.raises(PredictionsError, match="scored 7 documents, the task folder holds 260"):
        compare(tiny_bank, folder, tmp_path / "b")
    with pytest.raises(PredictionsError, match="no lm-eval results"):
        compare(tiny_bank, folder, tmp_path / "empty")

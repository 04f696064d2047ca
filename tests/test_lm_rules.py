"""The rule-query tasks of `curi rules` as lm-evaluation-harness generation tasks
(`curi.models.lm.rules`) and the rule oracle as a generating lm-eval model
(`curi.models.lm.rules_oracle`): through lm-eval's own evaluator the oracle that wrote the
gold replies scores exact 1, and another oracle scores exactly what `curi score` gives its
predictions; the prompts are `curi rules`' text; a folder of another bank is one line."""

from __future__ import annotations

import json
import math
import shutil

import pytest

lm_eval = pytest.importorskip("lm_eval")

from hydra import compose, initialize_config_module  # noqa: E402
from lm_eval import evaluator as lm_evaluator  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from curi import RuleTaskSampler, make_split  # noqa: E402
from curi.errors import BankError, ConfigError  # noqa: E402
from curi.models.lm.cli import lm_rules  # noqa: E402
from curi.models.lm.rules import (  # noqa: E402
    END,
    MANIFEST,
    aggregate,
    doc_to_text,
    export_rule_tasks_lm,
    read_prediction,
    read_rules_manifest,
)
from curi.models.lm.rules_oracle import RuleOracleLM  # noqa: E402
from curi.models.lm.task import read_table  # noqa: E402
from curi.oracles.rule_scores import read_predictions, read_tasks, score_predictions  # noqa: E402
from curi.renderers.text_export import export_rule_tasks  # noqa: E402

TASK = "curi_rules_concept_iid"
OPTIONS = {"subset": "test", "rule_rate": 0.5, "theta": 0.8}  # as tests/test_score.py
N = 12


@pytest.fixture(scope="module", autouse=True)
def _no_env_report():
    """lm-eval logs the environment (pip list, ...: seconds) into every result."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lm_evaluator, "add_env_info", lambda storage: None)
        yield


@pytest.fixture(scope="module")
def folder(tiny_bank, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm_rules")
    split = make_split(tiny_bank, "concept_iid")
    export_rule_tasks_lm(tiny_bank, [split], out, n=N, progress=False, **OPTIONS)
    return out


@pytest.fixture(scope="module")
def task_set(tiny_bank, tmp_path_factory):
    """The same tasks written by `curi rules` (structured and text)."""
    sampler = RuleTaskSampler(tiny_bank, make_split(tiny_bank, "concept_iid"), size=N, **OPTIONS)
    return export_rule_tasks(sampler, tmp_path_factory.mktemp("rules"), n=N, progress=False)


def _evaluate(model, folder):
    return lm_eval.simple_evaluate(
        model=model,
        tasks=["curi_rules"],
        task_manager=TaskManager(include_path=str(folder), include_defaults=False),
        bootstrap_iters=0,
        log_samples=False,
        verbosity="ERROR",
    )["results"]


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9


def test_prompts_are_the_text_of_curi_rules(folder, task_set):
    docs = read_table(folder / f"{TASK}.docs.jsonl.gz")
    rows = [json.loads(x) for x in task_set["text_jsonl"].read_text().splitlines()]
    assert len(docs) == len(rows) > N
    for doc, row in zip(docs, rows, strict=True):
        assert doc_to_text(folder, doc) == row["input"] + END
        assert (doc["index"], doc["request"], doc["target"]) == (
            row["task"],
            row["request"],
            row["target"],
        )
    assert "description:" in (folder / f"{TASK}.yaml").read_text()


def test_the_oracle_through_lm_eval_is_exact(folder, task_set, tiny_bank):
    """The oracle of the task set reads every prompt back and replies as `curi rules`' gold:
    exact 1, and its consistency and label accuracy are `curi score`'s to 1e-9."""
    got = _evaluate(RuleOracleLM(tiny_bank, folder), folder)[TASK]
    tasks = read_tasks(task_set["tasks"])
    gold = [(r["reply"], r["qualifier"]) for t in tasks for r in t["requests"]]
    want = score_predictions(tasks, gold)["model"]
    assert got["exact,none"] == got["reply,none"] == got["qualifier,none"] == 1.0
    assert not math.isnan(want["consistency"])  # implications among the oracle's replies
    assert _close(got["consistency,none"], want["consistency"] / 100)
    assert _close(got["label,none"], want["label_accuracy"] / 100)


def test_the_oracle_is_exact_on_weak_hypotheses_and_asserted_rules_of_a_file(tiny_bank, tmp_path):
    """Other options of `curi rules`: the weak oracle, easy negatives, rules asserted and asked
    from a list (one not in the bank, executed), another threshold."""
    rules = ["x color? blue = lambda S. exists=", *tiny_bank.concepts[5:200:40]]
    assert rules[0] not in tiny_bank.concepts
    split = make_split(tiny_bank, "counting")
    export_rule_tasks_lm(
        tiny_bank, [split], tmp_path, n=8, progress=False, hypotheses="weak",
        negatives="easy", rules=rules, rule_rate=1.0, context_rules=2, theta=0.7,
    )  # fmt: skip
    got = _evaluate(RuleOracleLM(tiny_bank, tmp_path), tmp_path)["curi_rules_counting"]
    assert got["exact,none"] == got["qualifier,none"] == 1.0


class _Flipped(RuleOracleLM):
    """The oracle with the reply and qualifier of every third prompt (by length) turned:
    replies that contradict the others."""

    def answers(self, task, prompts):
        turn = {"1": "0", "0": "1", "?": "1", "M": "D", "D": "M"}
        out = super().answers(task, prompts)
        return [(turn[r], turn[q]) if len(p) % 3 == 0 else (r, q)
                for p, (r, q) in zip(prompts, out, strict=True)]  # fmt: skip


def test_another_model_scores_as_curi_score_scores_it(folder, task_set, tiny_bank, tmp_path):
    """The weak oracle at another threshold, some replies turned: its lm-eval metrics are
    `curi score`'s numbers of its replies written as a predictions file; and a task cut short
    (lm-eval's ``limit``) reads its answer patterns on the requests kept."""
    model = _Flipped(tiny_bank, folder, hypotheses="weak", theta=0.6)
    got = _evaluate(model, folder)[TASK]
    rows = [json.loads(x) for x in task_set["text_jsonl"].read_text().splitlines()]
    head = read_rules_manifest(folder)["description"]  # lm-eval puts it before each prompt
    replies = model.answers(TASK, [head + r["input"] + END for r in rows])
    preds = tmp_path / "preds.txt"
    preds.write_text("".join(f"{r} {q}\n" for r, q in replies))
    tasks = read_tasks(task_set["tasks"])
    want = score_predictions(tasks, read_predictions(preds, tasks))["model"]
    assert want["accuracy"]["exact"] < 100 and want["contradictions"] > 0  # not the gold
    for metric in ("exact", "reply", "qualifier"):
        assert _close(got[f"{metric},none"], want["accuracy"][metric] / 100), metric
    assert _close(got["consistency,none"], want["consistency"] / 100)
    assert _close(got["label,none"], want["label_accuracy"] / 100)
    # a generation that is not "<reply> <qualifier>" is wrong, not an error
    assert read_prediction(" 1 M\nmore") == ("1", "M")
    assert read_prediction(" yes") == read_prediction("1 M D") == ("", "")
    # the first task's requests 0 and 2 only: its worlds restricted to bits 0 and 2
    first = tasks[0]
    items = [(TASK, 0, j, *gold) for j, gold in ((0, ("1", "M")), (2, ("0", "D")))]
    worlds = sorted({(w & 1) | ((w >> 2) & 1) << 1 for w in first["worlds"]})
    cut = {"index": 0, "requests": [first["requests"][0], first["requests"][2]], "worlds": worlds}
    direct = score_predictions([cut], [("1", "M"), ("0", "D")])["model"]
    assert _close(aggregate(folder, items, "exact"), direct["accuracy"]["exact"] / 100)
    assert _close(aggregate(folder, items, "consistency"), direct["consistency"] / 100)


def test_a_folder_of_another_bank_or_none_is_one_line(folder, tiny_bank, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    manifest = json.loads((other / MANIFEST).read_text())
    manifest["bank"]["digest"] = "0" * 16
    (other / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BankError, match=r"was exported from bank 'tiny' \(digest 0{16}\)") as e:
        RuleOracleLM(tiny_bank, other)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="not a curi rule task folder .* `curi lm rules out="):
        read_rules_manifest(tmp_path)


def test_curi_lm_rules_config_writes_the_folder(tiny_bank, tiny_bank_dir, tmp_path, capsys):
    with initialize_config_module(config_module="curi.conf", version_base="1.3"):
        cfg = compose(
            config_name="lm_rules",
            overrides=[
                "bank=tiny",
                f"data_dir={tiny_bank_dir.parent}",
                f"out={tmp_path / 'tasks'}",
                "split=counting",
                "n=2",
                "instructions=false",
                "progress=false",
            ],
        )
    lm_rules(cfg)
    report = json.loads(capsys.readouterr().out)
    assert report["documents"] == {"curi_rules_counting": 2 * 12}
    manifest = read_rules_manifest(tmp_path / "tasks", tiny_bank)
    assert manifest["description"] == "" and manifest["theta"] == 0.9
    assert "description:" not in (tmp_path / "tasks" / "curi_rules_counting.yaml").read_text()


def test_a_rule_export_replaces_its_earlier_one_and_keeps_an_lm_export_beside_it(
    tiny_bank, tmp_path
):
    """A second rule export to a folder leaves no task of the first; the files of a `curi lm
    export` in the same folder (they never clash) are kept."""
    from curi.models.lm.export import export_tasks

    out = tmp_path / "T"
    export_tasks(tiny_bank, [make_split(tiny_bank, "boolean")], out, n=1, progress=False)
    lm_files = sorted(p.name for p in out.iterdir())
    for split in ("concept_iid", "counting"):
        split = make_split(tiny_bank, split)
        export_rule_tasks_lm(tiny_bank, [split], out, n=1, progress=False, **OPTIONS)
    rules = [
        "curi_rules.yaml",
        "curi_rules_counting.contexts.jsonl.gz",
        "curi_rules_counting.docs.jsonl.gz",
        "curi_rules_counting.yaml",
        "curi_rules_counting_split.json",
        "curi_rules_tasks.json",
        "curi_rules_utils.py",
    ]
    assert sorted(p.name for p in out.iterdir()) == sorted(lm_files + rules)

"""Scoring rule-query predictions: consistency against a literal brute force on sets of 2 and
3 replies, hand-made cases of Conceptual SCAN's definitions, the oracle at 100 / 100, the no-context
baseline, the predictions readers' errors (each naming its line) and `curi score`."""

import json
import math

import numpy as np
import pytest
from conftest import run_curi
from rules_reference import BruteOracle, brute_consistency

from curi import RuleTaskSampler, make_split
from curi.oracles.consistency import consistency, consistency_counts
from curi.oracles.rule_scores import (
    PredictionsError,
    read_predictions,
    read_tasks,
    score_predictions,
)
from curi.renderers.text_export import export_rule_tasks


@pytest.fixture(scope="module")
def sampler(tiny_bank):
    return RuleTaskSampler(
        tiny_bank, make_split(tiny_bank, "concept_iid"), "test", rule_rate=0.5, theta=0.8, size=300
    )


@pytest.fixture(scope="module")
def task_set(sampler, tmp_path_factory):
    return export_rule_tasks(sampler, tmp_path_factory.mktemp("rules"), n=60, progress=False)


def test_consistency_matches_brute_force(tiny_bank, sampler):
    """Random replies (and the oracle's own, and perturbations of them) on tasks whose H_D has
    several answer patterns: counts from the stored worlds equal the literal definition over
    the hypotheses themselves."""
    brute = BruteOracle(tiny_bank, theta=0.8)
    rng = np.random.default_rng(0)
    checked = with_both = 0
    for i in range(300):
        task = sampler[i].to_dict()
        if len(task["worlds"]) < 2:
            continue
        hyps, _ = brute.hypotheses(task)
        answers = [{h for h in hyps if brute.answer(h, r)} for r in task["requests"]]
        gold = [(r["reply"], r["qualifier"]) for r in task["requests"]]
        for trial in range(4):
            if trial == 0:
                pred = gold
            elif trial == 1:  # flip a few gold replies and qualifiers
                pred = [
                    (
                        ("0" if r == "1" else "1") if rng.random() < 0.3 else r,
                        ("D" if q == "M" else "M") if rng.random() < 0.3 else q,
                    )
                    for r, q in gold
                ]
            else:
                pred = [
                    (str(rng.choice(["1", "0", "?"])), str(rng.choice(["M", "D"]))) for _ in gold
                ]
            replies, quals = [r for r, _ in pred], [q for _, q in pred]
            holds = [
                None if r == "?" else (a if r == "1" else set(hyps) - a)
                for r, a in zip(replies, answers, strict=True)
            ]
            want = brute_consistency(holds, quals, set(hyps))
            assert consistency_counts(task["worlds"], replies, quals) == want, (i, pred)
            if trial == 0:
                assert want[1] == 0  # the oracle never contradicts itself (theta > 2/3)
            with_both += want[0] > 0 and want[1] > 0
        checked += 1
    assert checked >= 20 and with_both > 0


def test_hand_made_cases():
    # three hypotheses (worlds) and three requests: world bits are answers to requests 0, 1, 2
    worlds = [0b011, 0b001, 0b100]
    # "q0 = 1" holds in worlds 0, 1; "q1 = 1" in world 0 only; "q2 = 0" in worlds 0, 1
    # {q1=1} implies q0=1 and q2=0 (defeasibly), {q0=1} implies q2=0: three implied pairs; no
    # triple, as a proper subset of each triple's premises already implies its conclusion
    assert consistency_counts(worlds, ["1", "1", "0"], ["D", "D", "D"]) == (3, 0)
    # q1=1 and q2=1 hold together nowhere: a contradicted pair
    assert consistency_counts(worlds, ["?", "1", "1"], ["D", "D", "D"]) == (0, 1)
    # a monotonic q1=1 implies q0=1 monotonically: marking q0 defeasible is a mismatch
    assert consistency_counts(worlds, ["1", "1", "?"], ["D", "M", "D"]) == (0, 1)
    assert consistency_counts(worlds, ["1", "1", "?"], ["M", "M", "D"]) == (1, 0)
    # a defeasible premise cannot imply a monotonic reply
    assert consistency_counts(worlds, ["1", "1", "?"], ["M", "D", "D"]) == (0, 0)
    # a reply the context alone decides is implied by nothing (the empty set already does)
    assert consistency_counts([0b1, 0b1], ["1", "?"], ["M", "D"]) == (0, 0)
    assert math.isnan(consistency(0, 0)) and consistency(3, 1) == 75.0


def test_oracle_scores_100_and_the_baseline_is_the_class_prior(task_set):
    tasks = read_tasks(task_set["tasks"])
    gold = [(r["reply"], r["qualifier"]) for t in tasks for r in t["requests"]]
    s = score_predictions(tasks, gold)
    for who in ("model", "oracle"):
        assert s[who]["accuracy"]["exact"] == 100.0
        assert s[who]["consistency"] == 100.0 and s[who]["contradictions"] == 0
    assert s["oracle"]["implications"] > 0
    base = s["baseline"]
    kinds = [r["kind"] for t in tasks for r in t["requests"]]
    for kind, cls in base["classes"].items():
        mine = [g for g, k in zip(gold, kinds, strict=True) if k == kind]
        share = 100.0 * mine.count(tuple(cls.split())) / len(mine)
        assert base["by_kind"][kind]["exact"] == pytest.approx(share)
        assert share >= max(100.0 * mine.count(c) / len(mine) for c in set(mine)) - 1e-9
    flipped = [("0" if r == "1" else "1", q) for r, q in gold]
    worse = score_predictions(tasks, flipped)["model"]
    assert worse["accuracy"]["reply"] < 100 and worse["accuracy"]["qualifier"] == 100.0
    with pytest.raises(PredictionsError, match="one per request"):
        score_predictions(tasks, gold[:-1])


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_predictions_files_and_their_errors(task_set, tmp_path):
    tasks = read_tasks(task_set["tasks"])
    rows = [json.loads(s) for s in task_set["text_jsonl"].read_text().splitlines()]
    n = len(rows)
    plain = _write(tmp_path / "p.txt", [r["target"] for r in rows])
    assert read_predictions(plain, tasks) == [tuple(r["target"].split()) for r in rows]
    js = _write(
        tmp_path / "p.jsonl",
        [
            json.dumps({"task": r["task"], "request": r["request"], "prediction": r["target"]})
            for r in rows
        ],
    )
    assert read_predictions(js, tasks) == read_predictions(plain, tasks)
    fields = _write(
        tmp_path / "f.jsonl",
        [json.dumps({"reply": r["reply"], "qualifier": r["qualifier"]}) for r in rows],
    )
    assert read_predictions(fields, tasks) == read_predictions(plain, tasks)
    targets = [r["target"] for r in rows]
    cases = [
        (targets[:-1], f"line {n} is missing"),
        (targets + ["1 M"], f"line {n + 1} is extra"),
        (targets[:4] + ["yes M"] + targets[5:], "line 5: unknown reply 'yes'"),
        (targets[:2] + ["1 X"] + targets[3:], "line 3: unknown qualifier 'X'"),
        (targets[:1] + ["1"] + targets[2:], "line 2: expected '<reply> <qualifier>'"),
    ]
    for lines, msg in cases:
        with pytest.raises(PredictionsError, match=msg):
            read_predictions(_write(tmp_path / "bad.txt", lines), tasks)
    bad_js = [json.dumps({"prediction": t}) for t in targets]
    bad_js[6] = "{not json"
    with pytest.raises(PredictionsError, match="line 7 is not valid JSON"):
        read_predictions(_write(tmp_path / "bad.jsonl", bad_js), tasks)
    bad_js[6] = json.dumps({"task": rows[6]["task"], "request": 99, "prediction": "1 M"})
    with pytest.raises(PredictionsError, match="line 7 is for task .* request 99"):
        read_predictions(_write(tmp_path / "bad.jsonl", bad_js), tasks)
    bad_js[6] = json.dumps({"answer": "1 M"})
    with pytest.raises(PredictionsError, match="line 7: expected a 'prediction'"):
        read_predictions(_write(tmp_path / "bad.jsonl", bad_js), tasks)
    with pytest.raises(PredictionsError, match="line 2 is not a rule-query task"):
        read_tasks(_write(tmp_path / "t.jsonl", [json.dumps(tasks[0]), "{}"]))
    with pytest.raises(PredictionsError, match="predictions file .*missing.txt' does not exist"):
        read_predictions(tmp_path / "missing.txt", tasks)


def test_curi_score(task_set, tmp_path):
    rows = [json.loads(s) for s in task_set["text_jsonl"].read_text().splitlines()]
    preds = _write(tmp_path / "preds.txt", ["0 M"] * len(rows))
    out = tmp_path / "scores.json"
    r = run_curi(
        "score", f"tasks={task_set['tasks']}", f"predictions={preds}", f"out={out}", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert "| oracle | 100.0 | 100.0 | 100.0 | 100.0 |" in r.stdout
    scores = json.loads(out.read_text())
    assert scores["requests"] == len(rows) and scores["model"]["accuracy"]["exact"] < 100
    _write(preds, ["0 M"] * (len(rows) - 1) + ["0 N"])
    bad = run_curi("score", f"tasks={task_set['tasks']}", f"predictions={preds}", cwd=tmp_path)
    assert bad.returncode == 2 and f"line {len(rows)}: unknown qualifier 'N'" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = run_curi("score", f"tasks={task_set['tasks']}", cwd=tmp_path)
    assert missing.returncode == 2 and "predictions= is required" in missing.stderr


def test_special_or_undecodable_files_are_one_clear_error(tmp_path):
    """A FIFO as the tasks or predictions file blocked the read forever; a file that is not
    UTF-8 is named too (the alarm turns a regression into a failure, not a hang)."""
    import os
    import signal

    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    (tmp_path / "latin.jsonl").write_bytes(b"\xff\xfe not utf-8\n")

    def hang(*_):
        pytest.fail("still blocked on a FIFO after 10 s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(10)
    try:
        with pytest.raises(PredictionsError, match="tasks file .* is a FIFO, not a regular file"):
            read_tasks(fifo)
        with pytest.raises(PredictionsError, match="predictions file .* is a FIFO"):
            read_predictions(fifo, [{"index": 0, "requests": [{}]}])
        with pytest.raises(PredictionsError, match="cannot read the tasks file"):
            read_tasks(tmp_path / "latin.jsonl")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

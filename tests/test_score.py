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
        pytest.fail("still blocked on a FIFO after 300 s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(300)
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


# --- bad input: one line or the right result ---------------------------------------------------


def _tasks_and_targets(task_set):
    tasks = read_tasks(task_set["tasks"])
    rows = [json.loads(s) for s in task_set["text_jsonl"].read_text().splitlines()]
    return tasks, [r["target"] for r in rows]


def test_deeply_nested_json_is_one_line_and_wrapped_predictions_are_read(task_set, tmp_path):
    """5,000 nested objects were a RecursionError; 500 wrappings of a prediction were read by
    a recursive function that a deeper stack would have broken."""
    tasks, targets = _tasks_and_targets(task_set)
    deep = '{"prediction":' * 5000 + '"1 M"' + "}" * 5000
    lines = [deep] + [json.dumps({"prediction": t}) for t in targets[1:]]
    with pytest.raises(PredictionsError, match=r"line 1 is not valid JSON \(nested too deep"):
        read_predictions(_write(tmp_path / "deep.jsonl", lines), tasks)
    lines[0] = '{"prediction":' * 500 + json.dumps(targets[0]) + "}" * 500
    read = read_predictions(_write(tmp_path / "wrapped.jsonl", lines), tasks)
    assert read == [tuple(t.split()) for t in targets]
    first = task_set["tasks"].read_text().splitlines()[0]
    with pytest.raises(PredictionsError, match=r"line 2 is not a rule-query task: not valid JSON"):
        read_tasks(_write(tmp_path / "t.jsonl", [first, "[" * 5000 + "]" * 5000]))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.update(worlds="abc"), "worlds must be a list, got 'abc'"),
        (lambda t: t.update(worlds=[1.5]), r"worlds\[0\] must be an integer, got 1.5"),
        (lambda t: t.update(requests={"a": 1}), "requests must be a list"),
        (lambda t: t["requests"][0].pop("kind"), r"requests\[0\].kind is missing"),
        (lambda t: t["requests"][0].update(reply=1), r"requests\[0\].reply must be a string"),
        (lambda t: t["requests"][0].update(reply="yes"), r"requests\[0\] replies 'yes'"),
    ],
    ids=["worlds-a-string", "a-world-a-float", "requests-a-mapping", "no-kind", "reply-1", "yes"],
)
def test_a_task_of_another_shape_is_one_line(task_set, tmp_path, edit, message):
    tasks = [json.loads(s) for s in task_set["tasks"].read_text().splitlines()][:3]
    edit(tasks[1])
    path = _write(tmp_path / "t.jsonl", [json.dumps(t) for t in tasks])
    with pytest.raises(PredictionsError, match=f"line 2 is not a rule-query task: {message}"):
        read_tasks(path)


def test_tasks_without_requests(task_set, tmp_path):
    """Tasks with no request at all were a ZeroDivisionError; one empty task among others is
    scored as before (`curi rules scene_requests=0` can write one)."""
    tasks = [json.loads(s) for s in task_set["tasks"].read_text().splitlines()][:3]
    empty = [{**t, "requests": [], "worlds": [0]} for t in tasks]
    with pytest.raises(PredictionsError, match="holds no request: nothing to score"):
        read_tasks(_write(tmp_path / "none.jsonl", [json.dumps(t) for t in empty]))
    with pytest.raises(PredictionsError, match="hold no request: nothing to score"):
        score_predictions(empty, [])
    mixed = [tasks[0], empty[1], tasks[2]]
    read = read_tasks(_write(tmp_path / "mixed.jsonl", [json.dumps(t) for t in mixed]))
    gold = [(r["reply"], r["qualifier"]) for t in read for r in t["requests"]]
    assert score_predictions(read, gold)["oracle"]["accuracy"]["exact"] == 100.0


def test_line_separators_inside_json_strings_are_no_line_breaks(task_set, tmp_path):
    """U+2028 (and form feeds, U+0085 ...) inside a JSON string are valid JSON; lines end at
    a newline only (they were split there and refused as extra lines)."""
    tasks, targets = _tasks_and_targets(task_set)
    lines = [
        json.dumps({"prediction": t, "note": "a\u2028b\x0cc\x85d"}, ensure_ascii=False)
        for t in targets
    ]
    assert read_predictions(_write(tmp_path / "p.jsonl", lines), tasks) == [
        tuple(t.split()) for t in targets
    ]
    raw = [json.loads(s) for s in task_set["tasks"].read_text().splitlines()]
    raw[0]["concept"] += "\u2029"
    path = _write(tmp_path / "t.jsonl", [json.dumps(t, ensure_ascii=False) for t in raw])
    assert read_tasks(path) == [*raw[:1], *tasks[1:]]


def test_curi_score_out_a_folder_is_one_line_before_scoring(task_set, tmp_path, capsys):
    from curi.cli import main

    _, targets = _tasks_and_targets(task_set)
    preds = _write(tmp_path / "preds.txt", targets)
    (tmp_path / "scores").mkdir()
    args = [f"tasks={task_set['tasks']}", f"predictions={preds}", f"out={tmp_path / 'scores'}"]
    with pytest.raises(SystemExit) as e:
        main(["score", *args])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and err.strip().splitlines() == [
        f"curi score: error: out={tmp_path / 'scores'} is a folder; give a file to write"
    ]
    assert out == ""  # refused before the scores were printed

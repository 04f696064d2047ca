"""Rule-query tasks: every reply and qualifier against a brute-force oracle on the tiny bank,
the worlds behind the consistency metric, balance, context rules, determinism and bad
options."""

from collections import Counter

import numpy as np
import pytest
from rules_reference import BruteOracle

from curi import ConceptError, ConfigError, RuleTaskSampler, make_split
from curi.tasks import CLASSES, class_mix
from curi.tasks.draw import pick_balanced
from curi.tasks.replies import reply_of

# (name, sampler options, tasks): at least 1,000 episodes in all
SETTINGS = [
    ("strong-hard", {}, 500),
    ("strong-easy-rules", {"negatives": "easy", "rule_rate": 1.0, "context_rules": 2}, 250),
    ("weak-rules", {"hypotheses": "weak", "rule_rate": 0.5, "theta": 0.75}, 250),
    ("pcfg-consistent", {"prior": "pcfg", "likelihood": "consistent", "subset": "train"}, 60),
]


@pytest.fixture(scope="module")
def split(tiny_bank):
    return make_split(tiny_bank, "concept_iid")


def _sampler(bank, split, **kw):
    subset = kw.pop("subset", "test")
    return RuleTaskSampler(bank, split, subset, seed=kw.pop("seed", 1), **kw)


def _brute(bank, split, opts):
    space = split.train if opts.get("hypotheses") == "weak" else None
    return BruteOracle(
        bank, space, theta=opts.get("theta", 0.9), negatives=opts.get("negatives", "hard")
    )


@pytest.mark.parametrize("name,opts,n", SETTINGS, ids=[s[0] for s in SETTINGS])
def test_replies_match_brute_force(tiny_bank, split, name, opts, n):
    """Every reply, qualifier, p, hidden label, H_D size and world, request by request."""
    sampler = _sampler(tiny_bank, split, **opts)
    brute = _brute(tiny_bank, split, opts)
    if name == "pcfg-consistent":  # the brute force weighs log-linear + size principle only
        brute = None
    seen = Counter()
    for i in range(n):
        task = sampler[i].to_dict()
        assert task["concept"] == tiny_bank.concepts[task["concept_index"]]
        assert len(task["support"]) == 25 and len(task["requests"]) == 12
        if brute is None:
            continue
        hyps, w = brute.hypotheses(task)
        assert task["num_hypotheses"] == len(hyps)
        worlds = set()
        for h in hyps:
            worlds.add(sum(brute.answer(h, r) << j for j, r in enumerate(task["requests"])))
        assert sorted(worlds) == task["worlds"]
        h_star = task["concept_index"]
        for r in task["requests"]:
            reply, qual, p = brute.reply(hyps, w, r)
            assert (r["reply"], r["qualifier"]) == (reply, qual), (i, r, p)
            assert r["p"] == pytest.approx(p, abs=2e-6)
            assert r["label"] == int(brute.answer(h_star, r))
            seen[f"{reply} {qual}"] += 1
        for c in task["context_rules"]:  # asserted rules are true of the hidden concept
            assert c["kind"] == "implies" and brute.answer(h_star, c)
    if brute is not None:
        assert set(seen) >= {"1 M", "0 M", "1 D", "0 D"}, seen


def test_user_rules_parse_execute_and_match_brute_force(tiny_bank, split):
    rules = [
        "x color? red = lambda S. exists=",  # a bank concept, most likely
        "x shape? cube = x size? large = and lambda S. exists=",
        "x color? gray = not lambda S. for-all=",
        "S material? metal any lambda S.",
    ]
    sampler = _sampler(tiny_bank, split, rules=rules, rule_rate=0.5, candidates=4)
    brute = _brute(tiny_bank, split, {})
    asked = set()
    for i in range(40):
        task = sampler[i].to_dict()
        hyps, w = brute.hypotheses(task)
        for r in task["requests"]:
            assert (r["reply"], r["qualifier"]) == brute.reply(hyps, w, r)[:2]
            asked.add(r.get("rule"))
    assert len(asked - {None}) >= 3
    with pytest.raises(ConceptError, match=r"rule 2 \('x color\? = lambda S\.'\)"):
        _sampler(
            tiny_bank, split, rules=["x color? red = lambda S. exists=", "x color? = lambda S."]
        )
    with pytest.raises(ConfigError, match="at least one rule"):
        _sampler(tiny_bank, split, rules=[])


def test_classes_are_spread_and_the_mix_is_reported(tiny_bank, split):
    tasks = [
        t.to_dict() for t in (_sampler(tiny_bank, split, rule_rate=0.5)[i] for i in range(200))
    ]
    mix = class_mix(tasks)
    assert mix["tasks"] == 200 and mix["requests"] == 2400
    assert mix["request"]["rule"]["share"] == mix["request"]["scene"]["share"] == 0.5
    assert all(mix["kind"][k]["count"] == 400 for k in ("implies", "equals", "excludes"))
    assert sum(v["count"] for v in mix["class"].values()) == 2400
    assert 0.2 < mix["context_rules_per_task"] < 0.8
    for c in ("1 M", "0 M", "1 D", "0 D", "? D"):
        assert mix["class"][c]["count"] > 0, mix["class"]
    # within a task, the replies of one kind come from different classes whenever they can
    rng = np.random.default_rng(0)
    for _ in range(200):
        classes = [CLASSES[j] for j in rng.integers(0, 5, size=8)]
        picked = pick_balanced(rng, classes, 3)
        assert len(set(picked)) == 3
        assert len({classes[j] for j in picked}) == min(3, len(set(classes)))
    assert pick_balanced(rng, ["1 M"] * 4, 2) != [] and pick_balanced(rng, [], 2) == []


def test_context_rules_restrict_the_hypotheses(tiny_bank, split):
    plain = _sampler(tiny_bank, split)
    ruled = _sampler(tiny_bank, split, rule_rate=1.0)
    narrowed = uncertain = 0
    for i in range(60):
        a, b = plain[i], ruled[i]
        assert a.concept == b.concept and np.array_equal(a.support_ids, b.support_ids)
        assert b.num_hypotheses <= a.num_hypotheses
        narrowed += b.num_hypotheses < a.num_hypotheses
        uncertain += len(a.worlds) > 1
        assert all(r[1] != tiny_bank.concepts[b.concept] for r in b.context_rules)
    # (a rule implied by the hidden concept cannot remove its sub-concepts from H_D)
    assert narrowed >= 5 and narrowed >= uncertain // 3


def test_tasks_are_a_pure_function_of_arguments_and_index(tiny_bank, split):
    s1 = _sampler(tiny_bank, split, rule_rate=0.5)
    s2 = _sampler(tiny_bank, split, rule_rate=0.5)
    forward = [s1[i].to_dict() for i in range(30)]
    backward = [s2[i].to_dict() for i in reversed(range(30))][::-1]
    assert forward == backward
    other = _sampler(tiny_bank, split, rule_rate=0.5, seed=2)
    assert [other[i].to_dict() for i in range(30)] != forward
    # the task's episode is the episode sampler's
    ep = s1.episodes[7]
    t = s1[7]
    assert t.concept == ep.concept and np.array_equal(t.support_ids, ep.support_ids)
    assert {r.id for r in t.requests if r.kind == "scene"} <= set(ep.query_ids.tolist())
    assert len(s1) == 20_000 and "RuleTaskSampler" in repr(s1)


def test_reply_rules():
    w = np.array([0.5, 0.45, 0.05])
    assert reply_of(np.array([True, True, True]), w, 0.9) == ("1", "M", 1.0)
    assert reply_of(np.array([False, False, False]), w, 0.9)[:2] == ("0", "M")
    assert reply_of(np.array([True, True, False]), w, 0.9)[:2] == ("1", "D")
    assert reply_of(np.array([False, False, True]), w, 0.9)[:2] == ("0", "D")
    assert reply_of(np.array([True, False, False]), w, 0.9)[:2] == ("?", "D")
    assert reply_of(np.zeros(0, bool), np.zeros(0), 0.9) == ("?", "D", 0.0)


def test_bad_options(tiny_bank, split):
    for kw, msg in (
        ({"hypotheses": "medium"}, "hypotheses"),
        ({"theta": 0.5}, "theta"),
        ({"theta": 1.5}, "theta"),
        ({"rule_rate": -0.1}, "rule_rate"),
        ({"kinds": ["implies", "entails"]}, "kinds"),
        ({"kinds": ["implies", "implies"]}, "repeat"),
        ({"scene_requests": -1}, "scene_requests"),
        ({"negatives": "medium"}, "negatives"),
        ({"prior": "flat"}, "prior"),
    ):
        with pytest.raises(ConfigError, match=msg):
            _sampler(tiny_bank, split, **kw)
    with pytest.raises(IndexError):
        _sampler(tiny_bank, split, size=3)[3]
    only = _sampler(tiny_bank, split, kinds=["equals"], scene_requests=0, rules_per_kind=3)
    t = only[0].to_dict()
    assert {r["kind"] for r in t["requests"]} == {"equals"} and len(t["requests"]) <= 3

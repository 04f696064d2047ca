"""The grammar sampler against the paper's production table (Appendix B.1-B.2), checked by an
independent re-derivation of every draw's log-probability and by an independent sampler's
statistics."""

import math
import random
from collections import Counter

import numpy as np
import pytest

from curi import parse, sample_concepts
from curi.concepts import PROPERTY_FUNCS, Node
from curi.grammar import CONSTANTS

N = 20_000

# Value type -> probability of a constant token / of "x F" (paper Appendix B.2).
_VALUE_NT = {
    "color": (1 / 16, 1 / 2),
    "shape": (1 / 6, 1 / 2),
    "material": (1 / 4, 1 / 2),
    "size": (1 / 4, 1 / 2),
    "location": (1 / 16, 1 / 2),
}
_BOOL_P = {"and": 3 / 28, "or": 0.5 / 28, "not": 1 / 28}
_EQ_P = {
    "color": 3 / 28,
    "shape": 3 / 28,
    "material": 3 / 28,
    "size": 0.5 / 28,
    "location": 0.5 / 28,
    "number": 0.5 / 28,
}
_GT_P = {"size": 1 / 28, "location": 1 / 28, "number": 1 / 28}


def _value_type(n: Node, sibling: Node | None = None) -> str:
    if n.op in PROPERTY_FUNCS:
        return PROPERTY_FUNCS[n.op]
    if n.op == "count=":
        return "number"
    if n.op.isdigit():
        return (
            _value_type(sibling) if sibling is not None and not sibling.op.isdigit() else "number"
        )
    from curi.concepts import CONSTANT_TYPES

    return CONSTANT_TYPES[n.op]


def _value_logp(n: Node, vtype: str) -> float:
    """log-prob of the subtree of a C / SH / M / SI / L / NUM non-terminal."""
    if vtype == "number":
        if n.op == "count=":
            return (
                math.log(1 / 10)
                + _setf_logp(n.args[0])
                + _value_logp(n.args[1], _value_type(n.args[0]))
            )
        return math.log(1 / 6)
    const_p, obj_p = _VALUE_NT[vtype]
    if n.op in PROPERTY_FUNCS:  # OBJECT F
        return math.log(obj_p) + (math.log(0.5) if vtype == "location" else 0.0)
    return math.log(const_p)


def _setf_logp(n: Node) -> float:  # SETF -> SET F ; SET -> S | S-x ; FL -> X | Y
    return math.log(0.5) + (math.log(0.5) if PROPERTY_FUNCS[n.op] == "location" else 0.0)


def _bool_logp(n: Node) -> float:
    if n.op in _BOOL_P:
        return math.log(_BOOL_P[n.op]) + sum(_bool_logp(a) for a in n.args)
    if n.op in ("=", ">"):
        a, b = n.args
        t = _value_type(a, b) if not a.op.isdigit() else _value_type(b, a)
        p = (_EQ_P if n.op == "=" else _GT_P)[t]
        return math.log(p) + _value_logp(a, t) + _value_logp(b, t)
    # all / any
    return math.log(1 / 28) + _setf_logp(n.args[0]) + _value_logp(n.args[1], _value_type(n.args[0]))


def _depth(n: Node, bool_depth: int) -> int:
    """Depth (START = 0) of the deepest non-terminal in the derivation of a BOOL subtree."""
    if n.op in _BOOL_P:
        return max(_depth(a, bool_depth + 1) for a in n.args)
    # operands sit one below the BOOL; "x F" adds OBJECT/F, a set op adds SETF -> SET/F
    deepest = bool_depth
    for a in n.args:
        if a.op in PROPERTY_FUNCS:
            deepest = max(deepest, bool_depth + 2)
        elif a.op == "count=":
            inner = [bool_depth + 3] + [
                bool_depth + 3 for b in a.args[1:] if b.op in PROPERTY_FUNCS
            ]
            deepest = max(deepest, *inner)
        else:
            deepest = max(deepest, bool_depth + 1)
    return deepest


@pytest.fixture(scope="module")
def draws():
    return sample_concepts(N, seed=11)


def test_same_seed_same_draws_and_prefix_property():
    a = sample_concepts(500, seed=1, chunk=200)
    assert a == sample_concepts(500, seed=1, chunk=200)
    assert a[:200] == sample_concepts(200, seed=1, chunk=200)
    assert a != sample_concepts(500, seed=2, chunk=200)


def test_logprob_equals_independent_rederivation(draws):
    for text, logp in draws[:5000]:
        c = parse(text)
        expected = math.log(0.5) + _bool_logp(c.body)
        assert logp == pytest.approx(expected, abs=1e-9), text


def test_depth_limit_and_constant_only_rejection(draws):
    for text, _ in draws:
        c = parse(text)
        assert _depth(c.body, 1) <= 5, text
        for n in c.body.walk():
            if n.op in ("=", ">"):
                assert not all(a.op in CONSTANTS for a in n.args), text


# An independent sampler written from the paper's table (different structure: explicit types,
# iterative retry), used to compare statistics with the library's sampler.
def _indep_sample(rng: random.Random):
    colors = ["gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow"]
    consts = {
        "C": colors,
        "SH": ["cube", "sphere", "cylinder"],
        "M": ["rubber", "metal"],
        "SI": ["large", "small"],
        "L": [str(i) for i in range(1, 9)],
    }
    fn = {
        "C": ["color?"],
        "SH": ["shape?"],
        "M": ["material?"],
        "SI": ["size?"],
        "L": ["locationX?", "locationY?"],
    }

    def pick(options):
        u, acc = rng.random() * sum(w for w, _ in options), 0.0
        for w, o in options:
            acc += w
            if u <= acc:
                return o
        return options[-1][1]

    def value(nt, d):
        if d >= 6:
            return None
        if rng.random() < 0.5:
            return [rng.choice(consts[nt])]
        return None if d + 1 >= 6 else ["x", rng.choice(fn[nt])]

    def setf(nt, d):
        if d + 1 >= 6:
            return None
        return [rng.choice(["S", "S-x"]), rng.choice(fn[nt])]

    def num(d):
        if d >= 6:
            return None
        if rng.random() < 0.5:
            nt = rng.choice(list(consts))
            s = child(lambda: setf(nt, d + 1))
            v = s and child(lambda: value(nt, d + 1))
            return None if not s or not v else s + v + ["count="]
        return [rng.choice(["1", "2", "3"])]

    def child(f):
        for _ in range(12):
            r = f()
            if r is not None:
                return r
        return None

    def both(f, op):
        a = child(f)
        if a is None:
            return None
        b = child(f)
        if b is None:
            return None
        if len(a) == 1 and len(b) == 1 and a[0] in CONSTANTS and b[0] in CONSTANTS:
            return None
        return a + b + [op]

    def boolean(d):
        if d >= 6:
            return None
        kind = pick(
            [(3, "and"), (0.5, "or"), (1, "not")]
            + [
                (w, ("=", nt))
                for w, nt in [(3, "C"), (3, "SH"), (3, "M"), (0.5, "SI"), (0.5, "L"), (0.5, "NUM")]
            ]
            + [(1, (">", nt)) for nt in ("SI", "L", "NUM")]
            + [(1, (q, nt)) for q in ("all", "any") for nt in consts]
        )
        if kind in ("and", "or"):
            return both(lambda: boolean(d + 1), kind)
        if kind == "not":
            a = child(lambda: boolean(d + 1))
            return None if a is None else a + ["not"]
        op, nt = kind
        if op in ("=", ">"):
            return both(lambda: num(d + 1) if nt == "NUM" else value(nt, d + 1), op)
        s = child(lambda: setf(nt, d + 1))
        v = s and child(lambda: value(nt, d + 1))
        return None if not s or not v else s + v + [op]

    body = child(lambda: boolean(1))
    if body is None:
        return None
    return body + ["lambda", "S.", rng.choice(["exists=", "for-all="])]


def test_depth_five_is_the_papers_depth_counted_from_one():
    """max_depth=5 (the `paper_legacy` bank, docs/fidelity.md section 4): "no node deeper than 6"
    with the root at depth 1 and the leaves counted. The deepest non-terminal then sits at depth
    4 (START = 0), so a count (NUM -> SETF -> SET) fits only in a top-level comparison and a
    body joins at most two atoms; with the default max_depth=6 (docs/concepts.md, "Grammar")
    both occur."""
    shallow = [parse(t) for t, _ in sample_concepts(4000, seed=3, max_depth=5)]
    deep = [parse(t) for t, _ in sample_concepts(4000, seed=3)]

    def nested_count(c):
        return c.body.op in _BOOL_P and any(n.op == "count=" for n in c.body.walk())

    assert max(_depth(c.body, 1) for c in shallow) == 4
    assert max(_depth(c.body, 1) for c in deep) == 5
    assert not any(nested_count(c) for c in shallow) and any(nested_count(c) for c in deep)
    assert max(len(c) for c in shallow) <= 14 < max(len(c) for c in deep)


def test_statistics_match_independent_sampler(draws):
    rng = random.Random(7)
    ref = [d for d in (_indep_sample(rng) for _ in range(N)) if d is not None]
    ours = [t.split() for t, _ in draws]
    # length histogram: total variation distance within sampling noise
    la, lb = Counter(map(len, ours)), Counter(map(len, ref))
    tv = 0.5 * sum(abs(la[k] / len(ours) - lb[k] / len(ref)) for k in set(la) | set(lb))
    assert tv < 0.03, tv
    # token frequencies per draw
    ta, tb = Counter(t for d in ours for t in d), Counter(t for d in ref for t in d)
    for tok in set(ta) | set(tb):
        fa, fb = ta[tok] / len(ours), tb[tok] / len(ref)
        assert abs(fa - fb) < 0.05 + 0.1 * max(fa, fb), (tok, fa, fb)
    # mean length agrees within 3 standard errors
    a, b = np.array(list(map(len, ours))), np.array(list(map(len, ref)))
    se = np.sqrt(a.var() / len(a) + b.var() / len(b))
    assert abs(a.mean() - b.mean()) < 3 * se + 0.05

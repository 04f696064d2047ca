"""Drawing rule requests and context rules (docs/rules.md, "Rule requests", "Rules in the
context" and "Drawing requests and balance"): candidate rules come from pools that make every
class likely (rules the hidden concept may imply or exclude, rules true on every support
positive, any rule), are classified cheaply by the oracle on a sketch of the scene pool, and are
then picked so that the classes of a task are spread evenly (Conceptual SCAN's per-class
streams, its Appendix F)."""

from __future__ import annotations

import numpy as np

from curi.bits import pack_rows, unpack_rows
from curi.tasks.replies import CLASSES, Hypotheses, RuleRows, relation

__all__ = ["Pools", "classify", "draw_candidates", "draw_context_rule", "pick_balanced"]


POOL_SKETCH_WORDS = 32  # the hidden concept's scenes among the first 2,048 narrow its pools
CLASSIFY_WORDS = 32  # candidates are classified on the first 2,048 scenes (refuting most)
CLASSIFY_HYPOTHESES = 16  # ... by the heaviest hypotheses of H_D


class Pools:
    """Candidate rules (bank concepts, as packed sets) for one episode.

    Pools:
        ``on_positives``: concepts true on every support positive (``implies r`` is not
        refuted by the support); ``touching``: true on some support positive (``excludes r``
        is refuted); ``maybe_implied``: a superset of the concepts the hidden concept implies,
        among ``on_positives`` (from its scenes in a sketch of the pool); ``maybe_disjoint``: a
        superset of the concepts disjoint from the hidden concept, true on no support positive.
    """

    def __init__(self, bank, concept: int, positives: np.ndarray):
        self.num_concepts = n = len(bank)
        pos = np.sort(np.asarray(positives))
        rows = np.asarray(bank.truth_by_scene[pos])  # (P, ceil(H / 64))
        and_words = np.bitwise_and.reduce(rows, 0)
        or_words = np.bitwise_or.reduce(rows, 0)
        s = min(POOL_SKETCH_WORDS, bank.truth_words.shape[1])
        sk = np.flatnonzero(unpack_rows(np.asarray(bank.truth_words[concept, :s]), 64 * s))
        sk_rows = np.asarray(bank.truth_by_scene[sk])  # (n, ceil(H / 64))
        sk_and = np.bitwise_and.reduce(sk_rows, 0) if len(sk) else ~np.zeros_like(or_words)
        sk_or = np.bitwise_or.reduce(sk_rows, 0) if len(sk) else np.zeros_like(or_words)
        pad = pack_rows(np.ones(n, bool))  # clears the bits past the last concept
        self._words = {
            "on_positives": and_words,
            "touching": or_words,
            "maybe_implied": and_words & sk_and,
            "maybe_disjoint": ~or_words & ~sk_or & pad,
        }
        self._members: dict[str, np.ndarray] = {}

    def members(self, name: str) -> np.ndarray:
        """The concepts of pool `name` (unpacked once)."""
        if name not in self._members:
            bits = unpack_rows(self._words[name], self.num_concepts)
            self._members[name] = np.flatnonzero(bits)
        return self._members[name]

    def sample(self, rng: np.random.Generator, name: str, k: int) -> np.ndarray:
        """Up to `k` concepts of pool `name`, drawn at random with replacement."""
        pool = self.members(name)
        if k <= 0 or len(pool) == 0:
            return np.zeros(0, np.int64)
        return pool[rng.integers(0, len(pool), size=min(k, len(pool)))]


# per kind: the pool that makes a request informative (None: H_D itself), and the pool of
# rules the support decides
_SOURCES = {
    "implies": ("maybe_implied", "on_positives"),
    "excludes": ("maybe_disjoint", "touching"),
    "equals": (None, "on_positives"),
}


def draw_candidates(rng, pools: Pools, kinds, reps: np.ndarray, k: int) -> list[np.ndarray]:
    """Candidate rules (bank indices, distinct within a kind) for each kind of `kinds`, about
    `k` each: half from the pool that makes the request informative, a quarter from rules the
    support decides, a quarter from the whole bank; one random draw for all."""
    half, quarter = -(-k // 2), max(1, k // 4)
    sources = []
    for kind in kinds:
        first, second = _SOURCES[kind]
        sources += [reps if first is None else pools.members(first), pools.members(second), None]
    sizes = [half, quarter, quarter] * len(kinds)
    u = rng.random(sum(sizes))
    out, at = [], 0
    for j, (src, size) in enumerate(zip(sources, sizes, strict=True)):
        n = pools.num_concepts if src is None else len(src)
        pick = (u[at : at + size] * n).astype(np.int64)
        at += size
        part = pick if src is None else src[pick] if n else pick[:0]
        if j % 3 == 0:
            out.append([part])
        else:
            out[-1].append(part)
    return [np.array(list(dict.fromkeys(np.concatenate(p).tolist())), np.int64) for p in out]


def classify(hyps: Hypotheses, rules: RuleRows, kind, theta: float) -> list[str]:
    """The class (``"1 M"``, ...) of each rule's request, roughly, for drawing: answered on a
    sketch of the scene pool (exact whenever the sketch refutes the relation, which is most
    pairs) by the `CLASSIFY_HYPOTHESES` heaviest hypotheses."""
    if len(hyps) > CLASSIFY_HYPOTHESES:
        top = np.argsort(-hyps.weights, kind="stable")[:CLASSIFY_HYPOTHESES]
        hyps = Hypotheses(hyps.truth, hyps.reps[top], hyps.weights[top])
    ans = hyps.answers(rules, kind, exact=False, sketch=CLASSIFY_WORDS)  # (G, K)
    return [f"{r} {q}" for r, q, _ in hyps.replies(ans, theta)]


def pick_balanced(rng: np.random.Generator, classes: list[str], k: int) -> list[int]:
    """Up to `k` positions of `classes`, spread over the classes present: classes are visited
    in a random order, one position drawn at random from each in turn, until `k` are taken."""
    if k <= 0 or not classes:
        return []
    keys = rng.random(len(classes) + len(CLASSES)).tolist()
    rank = {c: keys[len(classes) + j] for j, c in enumerate(CLASSES)}
    by_class: dict[str, list[int]] = {}
    for i in sorted(range(len(classes)), key=keys.__getitem__):
        by_class.setdefault(classes[i], []).append(i)
    order = sorted(by_class, key=rank.__getitem__)
    picked: list[int] = []
    while len(picked) < k:
        took = [by_class[c].pop() for c in order if by_class[c]][: k - len(picked)]
        if not took:
            break
        picked += took
    return picked


def draw_context_rule(
    rng, bank, concept: int, hyps: Hypotheses, cands: RuleRows, tries: int = 8
) -> int | None:
    """Position in `cands` of a rule to assert, ``implies r`` true for the hidden concept: one
    that removes some hypothesis of H_D if any does, else any true one, else None. The hidden
    concept's own synonyms are never asserted (that would give the answer away)."""
    order = rng.permutation(len(cands))[:tries]
    if not len(order):
        return None
    h = np.array([concept])
    truth = bank.truth_words
    if cands.matrix is truth:  # bank rules: synonyms share a group
        same = bank.groups[cands.index[order]] == bank.groups[concept]
    else:
        same = relation(truth, h, cands.take(order), "equals")[0]
    order = order[~same]
    if not len(order):
        return None
    sub = cands.take(order)
    true = relation(truth, h, sub, "implies")[0]
    if not true.any():
        return None
    keeps = hyps.answers(sub.take(np.flatnonzero(true)), "implies")
    informative = ~keeps.all(0)
    pos = np.flatnonzero(true)
    return int(order[pos[np.argmax(informative)]] if informative.any() else order[pos[0]])

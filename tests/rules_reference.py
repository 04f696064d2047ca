"""Brute-force references for rule-query tasks: the oracle's replies from every hypothesis of
the space, one by one, on unpacked truth rows (no bit tricks, no sketch, no synonym groups),
and cSCAN's consistency metric read literally off its definition (Appendix D, eqs. 22-26)."""

from __future__ import annotations

import math
from itertools import chain, combinations

import numpy as np

from curi import evaluate
from curi.bits import unpack_rows


class BruteOracle:
    """The oracle of docs/rules.md, "Replies", hypothesis by hypothesis.

    Args:
        bank: a (small) bank; its truth matrix is unpacked to booleans.
        space: the hypothesis indices (None: every concept).
        theta: the induction threshold.
        negatives: ``hard`` or ``easy`` (the size principle's form).
    """

    def __init__(self, bank, space=None, *, theta=0.9, negatives="hard"):
        self.bank = bank
        self.T = unpack_rows(np.asarray(bank.truth_words), bank.num_scenes)  # (H, N)
        self.space = np.arange(len(bank)) if space is None else np.asarray(space)
        self.theta, self.negatives = theta, negatives
        self.count = self.T.sum(1).astype(np.float64)
        self.where = {s: i for i, s in enumerate(bank.concepts)}
        self._rows: dict[str, np.ndarray] = {}

    def rule_row(self, rule: str) -> np.ndarray:
        """The rule's truth on every scene (a bank row, or evaluated on every scene record)."""
        if rule in self.where:
            return self.T[self.where[rule]]
        if rule not in self._rows:
            records = self.bank.scene_records(np.arange(self.bank.num_scenes))
            self._rows[rule] = evaluate(rule, records, location_bins="spec")
        return self._rows[rule]

    def hypotheses(self, task: dict) -> tuple[list[int], list[float]]:
        """H_D (every hypothesis of the space agreeing with the context) and p(h | context)."""
        ids = np.array([e["id"] for e in task["support"]])
        lab = np.array([e["label"] for e in task["support"]], bool)
        keep = []
        for h in self.space.tolist():
            row = self.T[h]
            if not all(row[i] == y for i, y in zip(ids, lab, strict=True)):
                continue
            if all(
                self.answer(h, {"kind": r["kind"], "rule": r["rule"]})
                for r in task["context_rules"]
            ):
                keep.append(h)
        n_pos, n_neg = int(lab.sum()), int((~lab).sum())
        logw = []
        for h in keep:
            lw = -0.2 * float(len(self.bank.concept(h))) - n_pos * math.log(self.count[h])
            if self.negatives == "hard":
                lw -= n_neg * math.log(self.bank.num_scenes - self.count[h])
            logw.append(lw)
        if not keep:
            return [], []
        m = max(logw)
        w = [math.exp(x - m) for x in logw]
        z = sum(w)
        return keep, [x / z for x in w]

    def answer(self, h: int, request: dict) -> bool:
        row = self.T[h]
        if request["kind"] == "scene":
            return bool(row[request["id"]])
        r = self.rule_row(request["rule"])
        if request["kind"] == "implies":
            return bool(np.all(~row | r))
        if request["kind"] == "excludes":
            return bool(not np.any(row & r))
        return bool(np.array_equal(row, r))

    def reply(self, hyps, weights, request) -> tuple[str, str, float]:
        answers = [self.answer(h, request) for h in hyps]
        if not hyps:
            return "?", "D", 0.0
        if all(answers):
            return "1", "M", 1.0
        if not any(answers):
            return "0", "M", 0.0
        p = sum(w for w, a in zip(weights, answers, strict=True) if a)
        if p >= self.theta:
            return "1", "D", p
        if p <= 1 - self.theta:
            return "0", "D", p
        return "?", "D", p


def brute_consistency(
    holds: list[set | None], qualifiers: list[str], universe: set, sizes=(2, 3)
) -> tuple[int, int]:
    """(|impl|, |cont|) literally: each reply is the set of hypotheses where it holds (None for
    ``?``, left out); every subset of every E is tried for minimality."""

    def inter(E, only_m=False):
        out = set(universe)
        for e in E:
            if not only_m or qualifiers[e] == "M":
                out &= holds[e]
        return out

    def subsets(E):  # proper subsets, the empty one included
        return chain.from_iterable(combinations(E, k) for k in range(len(E)))

    def entails(E, f, only_m):
        return inter(E, only_m) <= holds[f]

    def min_impl(E, f):
        m = qualifiers[f] == "M"
        if not inter(E) or not entails(E, f, m):
            return False
        if any(entails(S, f, m) for S in subsets(E)):
            return False
        return not (qualifiers[f] == "D" and entails(E, f, True))

    def min_cont(E, f):
        if not inter(E):
            return False
        neg = not (inter(E) & holds[f]) and not any(not (inter(S) & holds[f]) for S in subsets(E))
        mismatch = (
            qualifiers[f] == "D"
            and entails(E, f, True)
            and not any(entails(S, f, True) for S in subsets(E))
        )
        return neg or mismatch

    live = [j for j, s in enumerate(holds) if s is not None]
    impl = cont = 0
    for size in sizes:
        for F in combinations(live, size):
            impl += any(min_impl(tuple(x for x in F if x != f), f) for f in F)
            cont += any(min_cont(tuple(x for x in F if x != f), f) for f in F)
    return impl, cont

"""The oracle's reply to a request and its qualifier (docs/rules.md, "Rule requests" and
"Replies", after Conceptual SCAN, section 2): every hypothesis of H_D answers the request
(a query scene, or a rule request `implies` / `equals` / `excludes` r compared extensionally
on the bank's scene pool); a unanimous answer is deduced (`M`), otherwise the posterior mass of
the answer 1 decides `1 D`, `0 D` or `? D`. Rule relations are bit operations on the bank's
concept-major rows: a sketch (the first scenes) refutes most pairs, and only the survivors are
checked on the whole row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from curi.concepts import parse
from curi.errors import ConceptError
from curi.validate import choice

__all__ = [
    "CLASSES",
    "Hypotheses",
    "KINDS",
    "QUALIFIERS",
    "REPLIES",
    "RULE_KINDS",
    "RuleRows",
    "compress_groups",
    "relation",
    "replies_of",
    "reply_of",
    "union_tail",
]

REPLIES = ("1", "0", "?")
QUALIFIERS = ("M", "D")
RULE_KINDS = ("implies", "equals", "excludes")
KINDS = ("scene", *RULE_KINDS)
CLASSES = ("1 M", "0 M", "1 D", "0 D", "? D")
SKETCH_WORDS = 128  # 8,192 scenes: refutes a relation broken on >= 100 scenes 98% of the time


def reply_of(answers: np.ndarray, weights: np.ndarray, theta: float) -> tuple[str, str, float]:
    """(reply, qualifier, p) of one request from the answers of H_D (docs/rules.md, "Replies").

    Args:
        answers: (G,) bool, the answer of each hypothesis (or synonym group) of H_D.
        weights: (G,) their posterior weights (summing to 1).
        theta: the induction threshold.

    Returns:
        ``("1" | "0", "M", p)`` when H_D is unanimous, else ``"1"`` / ``"0"`` / ``"?"`` with
        ``"D"`` as p = the posterior mass answering 1 is >= theta, <= 1 - theta or between.
        An empty H_D (a weak oracle with no consistent hypothesis) replies ``("?", "D", 0.0)``.
    """
    if len(answers) == 0:
        return "?", "D", 0.0
    n_yes = int(np.count_nonzero(answers))
    if n_yes == len(answers):
        return "1", "M", 1.0
    if n_yes == 0:
        return "0", "M", 0.0
    p = float(weights[answers].sum())
    if p >= theta:
        return "1", "D", p
    if p <= 1.0 - theta:
        return "0", "D", p
    return "?", "D", p


def replies_of(answers: np.ndarray, weights: np.ndarray, theta: float) -> list[tuple]:
    """`reply_of` for every column of a (G, K) answer matrix at once."""
    g, k = answers.shape
    if g == 0:
        return [("?", "D", 0.0)] * k
    n_yes = np.count_nonzero(answers, axis=0)
    p = (answers * weights[:, None]).sum(0)
    out = []
    for n, q in zip(n_yes.tolist(), p.tolist(), strict=True):
        if n == g:
            out.append(("1", "M", 1.0))
        elif n == 0:
            out.append(("0", "M", 0.0))
        else:
            out.append(("1" if q >= theta else "0" if q <= 1.0 - theta else "?", "D", q))
    return out


def compress_groups(groups: np.ndarray, idx: np.ndarray, w: np.ndarray):
    """Synonym groups have identical rows, hence identical answers to every request: weigh
    one representative per group (the first) with the group's summed weight.

    Returns:
        (representatives (G,), group weights (G,)), in order of first appearance.
    """
    if len(idx) <= 16:  # the common case: a dictionary beats sorting
        where: dict[int, int] = {}
        reps: list[int] = []
        gw: list[float] = []
        for k, (g, x) in enumerate(zip(groups[idx].tolist(), w.tolist(), strict=True)):
            j = where.get(g)
            if j is None:
                where[g] = len(reps)
                reps.append(k)
                gw.append(x)
            else:
                gw[j] += x
        return idx[reps], np.array(gw)
    g = groups[idx]
    _, first, inverse = np.unique(g, return_index=True, return_inverse=True)
    gw = np.bincount(inverse.reshape(-1), weights=w)
    order = np.argsort(first, kind="stable")
    return idx[first[order]], gw[order]


@dataclass(frozen=True)
class RuleRows:
    """Rules as rows of a concept-major bit matrix: ``matrix[index[k]]`` is rule k's truth row
    on the scene pool (bank concepts: ``bank.truth_words`` and their indices, no copy; other
    programs: their executed rows and ``arange(k)``)."""

    matrix: np.ndarray
    index: np.ndarray

    def __len__(self) -> int:
        return len(self.index)

    def take(self, which) -> RuleRows:
        return RuleRows(self.matrix, np.asarray(self.index)[which])

    @classmethod
    def of_bank(cls, bank, index) -> RuleRows:
        return cls(bank.truth_words, np.asarray(index, np.int64).reshape(-1))

    @classmethod
    def of_programs(cls, bank, programs: list[str], executor) -> tuple[RuleRows, list[str]]:
        """Rows of rule programs: bank concepts by index, others executed on the scene pool by
        ``executor(concepts) -> (k, W) rows``.

        Returns:
            (rows, canonical strings).

        Raises:
            ConceptError: a program that does not parse (naming its position in the list).
        """
        canon = []
        for i, text in enumerate(programs):
            try:
                canon.append(parse(text).collapsed().postfix())
            except ConceptError as e:
                raise ConceptError(f"rule {i + 1} ({text!r}): {e}") from None
        where = {s: i for i, s in enumerate(bank.concepts)}
        known = [where.get(s, -1) for s in canon]
        if all(k >= 0 for k in known):
            return cls.of_bank(bank, known), canon
        rows = np.empty((len(canon), bank.truth_words.shape[1]), np.uint64)
        todo = [i for i, k in enumerate(known) if k < 0]
        for i, k in enumerate(known):
            if k >= 0:
                rows[i] = bank.truth_words[k]
        if todo:
            rows[todo] = executor([parse(canon[i]) for i in todo])
        return cls(rows, np.arange(len(canon))), canon


def relation(
    truth: np.ndarray,
    hyps: np.ndarray,
    rules: RuleRows,
    kind,
    *,
    exact: bool = True,
    union: Callable[[], np.ndarray] | None = None,
    sketch: int = SKETCH_WORDS,
) -> np.ndarray:
    """Whether each hypothesis stands in relation `kind` to each rule, on the scene pool.

    ``implies``: h holds on no scene r rejects; ``excludes``: h and r hold together on no
    scene; ``equals``: the same row. The first `SKETCH_WORDS` words are compared for every
    pair (refuting most); survivors are checked on the rest of the row, all of a rule's
    hypotheses at once through their union when every one survived (h => r for every h iff
    their union implies r; likewise for excludes).

    Args:
        truth: (H, W) concept-major words (``bank.truth_words``).
        hyps: (G,) hypothesis indices into `truth`.
        rules: the rules' rows.
        kind: ``implies``, ``equals`` or ``excludes``, or one of them per rule.
        exact: check the survivors on the whole row; False leaves the sketch's answer (which
            is never wrong when it says False), for cheap drawing.
        union: returns the OR of the hypotheses' rows past the sketch (`union_tail`), when
            it is cached by the caller.
        sketch: words of the sketch (without `exact`, fewer make a cheaper, rougher answer).

    Returns:
        (G, K) bool.
    """
    kinds = [kind] * len(rules) if isinstance(kind, str) else list(kind)
    words = truth.shape[1]
    s = min(sketch if not exact else SKETCH_WORDS, words)
    hs = truth[hyps, :s][:, None, :]  # (G, 1, s)
    rs = rules.matrix[rules.index, :s][None]  # (1, K, s)
    out = np.empty((len(hyps), len(rules)), bool)
    for k, a, b in _runs(kinds):  # one batch per run of rules of the same kind
        out[:, a:b] = _relate(hs, rs[:, a:b], k)  # (G, b - a)
    if not exact or s == words or not out.any():
        return out
    for b in np.flatnonzero(out.any(0)):
        r, k = rules.matrix[rules.index[b], s:], kinds[b]
        col = out[:, b]
        if len(hyps) > 1 and k != "equals" and col.all():
            u = union() if union is not None else union_tail(truth, hyps)
            union = lambda u=u: u  # noqa: E731
            if _relate(u, r, k):
                continue  # every hypothesis holds it
        live = np.flatnonzero(col)
        col[live] = _relate(truth[hyps[live], s:], r, k)  # (n, W - s) against (W - s,)
    return out


def _runs(kinds: list[str]) -> list[tuple[str, int, int]]:
    """(kind, start, stop) of each run of equal kinds."""
    runs: list[tuple[str, int, int]] = []
    for j, k in enumerate(kinds):
        if runs and runs[-1][0] == k:
            runs[-1] = (k, runs[-1][1], j + 1)
        else:
            runs.append((k, j, j + 1))
    return runs


def union_tail(truth: np.ndarray, hyps: np.ndarray) -> np.ndarray:
    """OR of the hypotheses' rows past the sketch words."""
    s = min(SKETCH_WORDS, truth.shape[1])
    return np.bitwise_or.reduce(truth[hyps, s:], 0)


class Hypotheses:
    """H_D of one task: one representative per synonym group and the group's posterior
    weight, answering requests (the union of their rows is computed once, when needed)."""

    def __init__(self, truth: np.ndarray, reps: np.ndarray, weights: np.ndarray):
        self.truth, self.reps, self.weights = truth, reps, weights
        self._union: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.reps)

    def answers(
        self, rules: RuleRows, kind, *, exact: bool = True, sketch: int = SKETCH_WORDS
    ) -> np.ndarray:
        """(G, K) answers of the hypotheses to the requests `kind` r (one kind, or one per
        rule) for the rules (see `relation`)."""
        return relation(
            self.truth, self.reps, rules, kind, exact=exact, union=self.union, sketch=sketch
        )

    def union(self) -> np.ndarray:
        """OR of the representatives' rows past the sketch words (computed once)."""
        if self._union is None:
            self._union = union_tail(self.truth, self.reps)
        return self._union

    def restrict(self, keep: np.ndarray) -> Hypotheses:
        """The hypotheses where `keep` (renormalised)."""
        w = self.weights[keep]
        return Hypotheses(self.truth, self.reps[keep], w / w.sum() if len(w) else w)

    def replies(self, answers: np.ndarray, theta: float) -> list[tuple[str, str, float]]:
        """`reply_of` of each column of (G, K) answers."""
        return replies_of(answers, self.weights, theta)


def _relate(h: np.ndarray, r: np.ndarray, kind: str):
    """The relation on the last axis of broadcastable word arrays."""
    if kind == "implies":
        return ~(h & ~r).any(-1)
    if kind == "excludes":
        return ~(h & r).any(-1)
    if kind == "equals":
        return (h == r).all(-1)
    choice(kind, "kind", RULE_KINDS)
    raise AssertionError(f"rule kind {kind!r} is declared but not handled")

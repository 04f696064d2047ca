"""cSCAN's consistency metric ("Conceptual SCAN: Learning With and About Rules", section 4 and
Appendix D; docs/rules.md, "Metrics") for the replies of one rule-query task.

A reply ``(q, r)`` with r in {1, 0} holds in the hypotheses of H_D (the hypotheses of the
oracle's space that agree with the context) that answer r to request q; a set E of replies
implies f when every hypothesis where all of E hold has f hold, and contradicts f when none
has both. Only monotonic (`M`) members can imply a monotonic reply; a defeasible reply that
its set implies monotonically is a qualifier mismatch (a contradiction, eq. 23). Replies
``?`` carry no constraint and are left out, as cSCAN's implementation does (Appendix G).
Sets are counted as cSCAN counts them, among sets of size 2 and 3:
``C = 100 |impl| / (|impl| + |cont|)``, NaN with neither."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations

__all__ = ["consistency", "consistency_counts", "reply_sets"]


def reply_sets(worlds: Sequence[int], replies: Sequence[str]) -> list[int | None]:
    """For each reply, the set of worlds where it holds, as a bit mask over `worlds` (None for
    ``?``).

    Args:
        worlds: a task's answer patterns (bit j: the answer to request j; ``RuleTask.worlds``).
        replies: the reply to each request (``"1"``, ``"0"``, ``"?"``).
    """
    out: list[int | None] = []
    for j, r in enumerate(replies):
        if r == "?":
            out.append(None)
            continue
        want = 1 if r == "1" else 0
        out.append(sum(1 << w for w, a in enumerate(worlds) if (a >> j) & 1 == want))
    return out


def _inter(full: int, sets, e, monotonic=None) -> int:
    """Worlds where every reply of `e` holds (with `monotonic`: only its monotonic replies)."""
    out = full
    for i in e:
        if monotonic is None or monotonic[i]:
            out &= sets[i]
    return out


def _proper(e: tuple) -> list[tuple]:
    """Proper subsets of a set of 1 or 2 replies (the empty set included)."""
    return [()] if len(e) == 1 else [(), (e[0],), (e[1],)]


def _minimal_implication(full, sets, monotonic, e: tuple, f: int) -> bool:
    """E ↪ f (eq. 22) for E = `e` (1 or 2 replies): E is not contradictory, implies f (its
    monotonic replies alone when f is monotonic), no proper subset does, and f is not a
    defeasible reply that E implies monotonically."""
    if _inter(full, sets, e) == 0:
        return False

    def implies(sub) -> bool:
        return _inter(full, sets, sub, monotonic if monotonic[f] else None) & ~sets[f] == 0

    if not implies(e) or any(implies(sub) for sub in _proper(e)):
        return False
    return monotonic[f] or _inter(full, sets, e, monotonic) & ~sets[f] != 0


def _minimal_contradiction(full, sets, monotonic, e: tuple, f: int) -> bool:
    """E ⊭ f (eq. 23) for E = `e`: E is not contradictory and implies not f while no proper
    subset does; or f is defeasible and E minimally implies it monotonically."""
    if _inter(full, sets, e) == 0:
        return False

    def negates(sub) -> bool:
        return _inter(full, sets, sub) & sets[f] == 0

    if negates(e) and not any(negates(sub) for sub in _proper(e)):
        return True
    if monotonic[f]:
        return False

    def implies_m(sub) -> bool:
        return _inter(full, sets, sub, monotonic) & ~sets[f] == 0

    return implies_m(e) and not any(implies_m(sub) for sub in _proper(e))


def consistency_counts(
    worlds: Sequence[int], replies: Sequence[str], qualifiers: Sequence[str], *, sizes=(2, 3)
) -> tuple[int, int]:
    """(|impl|, |cont|) of one task's replies: the sets of `sizes` replies that contain a
    minimal implication, and those that contain a minimal contradiction (eqs. 24-25).

    Args:
        worlds: the task's answer patterns (``RuleTask.worlds``).
        replies, qualifiers: one per request, in request order.
        sizes: the set sizes counted (2 and 3, as cSCAN's counts).
    """
    sets = reply_sets(worlds, replies)
    live = [j for j, s in enumerate(sets) if s is not None]
    full = (1 << len(worlds)) - 1
    monotonic = [q == "M" for q in qualifiers]
    n_impl = n_cont = 0
    for size in sizes:
        for F in combinations(live, size):
            impl = cont = False
            for f in F:
                e = tuple(x for x in F if x != f)
                impl = impl or _minimal_implication(full, sets, monotonic, e, f)
                cont = cont or _minimal_contradiction(full, sets, monotonic, e, f)
                if impl and cont:
                    break
            n_impl += impl
            n_cont += cont
    return n_impl, n_cont


def consistency(n_impl: int, n_cont: int) -> float:
    """``100 |impl| / (|impl| + |cont|)``, NaN when both are 0 (eq. 26)."""
    total = n_impl + n_cont
    return 100.0 * n_impl / total if total else math.nan

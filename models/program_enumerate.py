"""The grammar-only proposer of the propose-and-verify learner's references (docs/learners.md):
the concept grammar's program sketches (constants as typed holes) in order of decreasing
probability under the grammar that samples the bank's concepts (CURI paper, Appendix B.1),
without looking at the support set. It is the strongest support-free proposer: what a learned,
support-conditioned proposer must beat at the same K."""

from __future__ import annotations

import heapq
import math
from functools import lru_cache

from curi.concepts import QUANTIFIERS, parse
from curi.grammar import MAX_DEPTH, RULES
from curi.models.program_grammar import END, HOLE_VALUES, completes, concept_text
from curi.rejection import static_rejection

__all__ = ["GrammarProposer", "grammar_sketches"]

# Constants become typed holes: each constant production of a non-terminal folds into one hole
# production carrying their summed probability.
_HOLE = {"C": "<color>", "SH": "<shape>", "M": "<material>", "SI": "<size>", "L": "<int>"}
_HOLE["NUM"] = "<int>"


def _sketch_rules() -> dict[str, list[tuple[float, tuple[str, ...]]]]:
    out = {}
    for nt, prods in RULES.items():
        kept, hole = [], 0.0
        for p, rhs in prods:
            if nt in _HOLE and len(rhs) == 1 and rhs[0] not in RULES:
                hole += p
            else:
                kept.append((math.log(p), rhs))
        if hole:
            kept.append((math.log(hole), (_HOLE[nt],)))
        out[nt] = kept
    return out


_RULES = _sketch_rules()


def _kept(seq: tuple[str, ...]) -> bool:
    """Whether the bank's static rules keep the sketch's programs. They look at its shape
    only (a property compared with itself, ``for-all=`` with ``S-x``, ...), never at its
    constants, so one filling answers for all: a rejected sketch would only spend K on
    programs that can never survive."""
    filled = [HOLE_VALUES[t][0] if t in HOLE_VALUES else t for t in seq]
    return static_rejection(parse(concept_text(filled))) is None


@lru_cache(maxsize=8)
def grammar_sketches(n: int) -> tuple[tuple[tuple[str, ...], float], ...]:
    """The `n` most probable distinct sketches (token sequences with typed holes, ended by a
    quantifier or `END`, as the decoder writes them) that the bank's static rules keep, and
    their log-probabilities, best first.

    Best-first search over leftmost derivations: a derivation's probability only falls as it
    grows, so complete derivations leave the queue in order of probability.
    """
    queue: list[tuple[float, int, tuple[str, ...], tuple[tuple[str, int], ...]]] = [
        (0.0, 0, (), (("START", 0),))
    ]
    seen: dict[tuple[str, ...], float] = {}
    counter = 1
    while queue and len(seen) < n:
        neg, _, out, pending = heapq.heappop(queue)
        out, pending = list(out), list(pending)
        while pending and pending[0][0] not in _RULES:  # emit leading terminals
            out.append(pending.pop(0)[0])
        if not pending:
            seq = _as_sequence(out)
            if seq is not None and seq not in seen and completes(seq) and _kept(seq):
                seen[seq] = -neg
            continue
        (sym, depth), rest = pending[0], tuple(pending[1:])
        if depth >= MAX_DEPTH:
            continue  # the sampler's depth limit: this derivation fails
        for logp, rhs in _RULES[sym]:
            kids = tuple((s, depth + 1) for s in rhs)
            heapq.heappush(queue, (neg - logp, counter, tuple(out), kids + rest))
            counter += 1
    return tuple(seen.items())


def _as_sequence(tokens: list[str]) -> tuple[str, ...] | None:
    """A grammar draw ``body lambda S. quantifier`` as the decoder's sequence ``body end``."""
    if tokens[-3:-1] != ["lambda", "S."] or tokens[-1] not in QUANTIFIERS:
        return None
    body = tokens[:-3]
    uses_x = any(t in ("x", "S-x") for t in body)
    return tuple(body) + ((tokens[-1],) if uses_x else (END,))


class GrammarProposer:
    """Support-free sketches: the grammar's most probable ones, the same for every episode
    (the ``grammar_only`` reference). `ProposeVerify` takes it in place of the decoder."""

    holes = True

    def sketches(self, budget: int) -> list[tuple[list[str], float]]:
        """The `budget` most probable sketches and their log-probabilities, best first."""
        return [(list(s), lp) for s, lp in grammar_sketches(int(budget))]

    def config(self) -> dict:
        return {"grammar_only": True}

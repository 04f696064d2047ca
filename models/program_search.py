"""Search and exact verification of concept programs for one support set: typed holes filled by
enumeration over the scene vocabulary, programs executed on the 25 support scenes by curi's
bit-sliced executor, one-token repairs of near-misses, the universe filter of the bank's rules
(CURI paper, section 3) and a posterior over the survivors weighted as the strong oracle's."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from curi.bits import popcount, unpack_rows
from curi.concepts import CONSTANT_TYPES, QUANTIFIERS, Concept, parse
from curi.errors import ConceptError
from curi.executor import BitScenes, execute
from curi.models.program_grammar import HOLE_VALUES, concept_text
from curi.rejection import static_rejection

__all__ = [
    "MIN_POSITIVES",
    "MAX_SHARE",
    "Hypotheses",
    "fill_holes",
    "repairs",
    "support_errors",
    "universe_filter",
    "weigh",
]

MIN_POSITIVES = 11  # a bank concept holds on more than 10 scenes (paper, Appendix B.2)
MAX_SHARE = 0.1  # and on fewer than 10 % of them
_SWAPS = {
    "and": ("or",),
    "or": ("and",),
    "=": (">",),
    ">": ("=",),
    "all": ("any",),
    "any": ("all",),
    "S": ("S-x",),
    "S-x": ("S",),
    "locationX?": ("locationY?",),
    "locationY?": ("locationX?",),
    "exists=": ("for-all=",),
    "for-all=": ("exists=",),
}
_BY_TYPE: dict[str, tuple[str, ...]] = {}
for _tok, _t in CONSTANT_TYPES.items():
    _BY_TYPE[_t] = _BY_TYPE.get(_t, ()) + (_tok,)


def _value_order(values: tuple[str, ...], scores: dict[str, float]) -> list[str]:
    """`values` by decreasing score (ties: vocabulary order)."""
    return sorted(values, key=lambda v: -scores.get(v, 0.0))


def fill_holes(tokens: list[str], scores: dict[str, float], limit: int) -> list[str]:
    """At most `limit` concept strings from a token sequence with typed holes: each hole takes
    every value of its type, by decreasing `scores` (e.g. how much more often the value occurs
    in the positive support scenes than in the negative ones), combinations in order of their
    summed ranks."""
    slots = [i for i, t in enumerate(tokens) if t in HOLE_VALUES]
    if not slots:
        return [concept_text(tokens)]
    options = [_value_order(HOLE_VALUES[tokens[i]], scores) for i in slots]
    combos = sorted(itertools.product(*(range(len(o)) for o in options)), key=lambda r: (sum(r), r))
    out = []
    for ranks in combos[:limit]:
        filled = list(tokens)
        for i, opts, r in zip(slots, options, ranks, strict=True):
            filled[i] = opts[r]
        out.append(concept_text(filled))
    return out


def repairs(text: str) -> list[str]:
    """Every program one token away from `text` that parses: a constant replaced by another of
    its type, or an operator, set, property or quantifier by its sibling."""
    toks = text.split()
    out = []
    for i, t in enumerate(toks):
        alts = _SWAPS.get(t, ()) or tuple(
            v for v in _BY_TYPE.get(CONSTANT_TYPES.get(t, ""), ()) if v != t
        )
        for a in alts:
            cand = toks[:i] + [a] + toks[i + 1 :]
            try:
                out.append(parse(" ".join(cand)).postfix())
            except ConceptError:
                continue
    return out


def support_errors(concepts: list[Concept], support: BitScenes, labels: np.ndarray) -> np.ndarray:
    """(K,) number of the support scenes each program labels wrong (executed exactly)."""
    if not concepts:
        return np.zeros(0, np.int64)
    truth = unpack_rows(execute(concepts, support), support.num_scenes)  # (K, S)
    return (truth != np.asarray(labels, bool)[None, :]).sum(1)


def universe_filter(concepts: list[Concept], universe: BitScenes) -> tuple[list[int], np.ndarray]:
    """Programs a bank would keep (static rules, on more than 10 and fewer than 10 % of the
    universe's scenes): their positions in `concepts` and their (k, W) truth words."""
    keep = [i for i, c in enumerate(concepts) if static_rejection(c) is None]
    if not keep:
        return [], np.zeros((0, universe.num_words), np.uint64)
    words = execute([concepts[i] for i in keep], universe)  # (k, W)
    counts = popcount(words)  # (k,)
    ok = (counts >= MIN_POSITIVES) & (counts < MAX_SHARE * universe.num_scenes)
    return [keep[i] for i in np.flatnonzero(ok)], words[ok]


@dataclass
class Hypotheses:
    """Distinct extensions of surviving programs and their posterior weights.

    Attributes:
        programs: one program per extension (the most probable under the prior).
        weights: (G,) normalised posterior weights.
        sizes: (G,) scenes of the universe each extension holds on.
        words: (G, W) truth words on the universe.
    """

    programs: list[Concept]
    weights: np.ndarray
    sizes: np.ndarray
    words: np.ndarray

    def __len__(self) -> int:
        return len(self.programs)

    def predictive(self, targets: BitScenes) -> np.ndarray:
        """p(y = 1 | u, D) for each target scene: the weights of the extensions holding on u."""
        if not self.programs:
            return np.zeros(targets.num_scenes)
        truth = unpack_rows(execute(self.programs, targets), targets.num_scenes)  # (G, T)
        return self.weights @ truth.astype(np.float64)


def weigh(
    concepts: list[Concept], words: np.ndarray, num_scenes: int, labels: np.ndarray, negatives: str
) -> Hypotheses:
    """The strong oracle's posterior over consistent programs (paper, section 3): prior
    exp(-0.2 len h) in canonical tokens, summed over the programs of one extension, times
    |h|^-n+ (easy negatives) or |h|^-n+ (N - |h|)^-n- (hard), |h| and N counted on the
    universe."""
    if not concepts:
        return Hypotheses([], np.zeros(0), np.zeros(0, np.int64), words[:0])
    groups: dict[bytes, list[int]] = {}
    for i in range(len(concepts)):
        groups.setdefault(words[i].tobytes(), []).append(i)
    lab = np.asarray(labels, bool)
    n_pos, n_neg = int(lab.sum()), int((~lab).sum())
    reps, logw, sizes = [], [], []
    for members in groups.values():
        lens = np.array([len(concepts[i]) for i in members])
        rep = members[int(np.argmin(lens))]
        size = int(popcount(words[rep]))
        lw = np.logaddexp.reduce(-0.2 * lens) - n_pos * np.log(size)
        if negatives == "hard":
            lw -= n_neg * np.log(num_scenes - size)
        reps.append(rep)
        logw.append(lw)
        sizes.append(size)
    lw = np.array(logw)
    w = np.exp(lw - lw.max())
    return Hypotheses([concepts[i] for i in reps], w / w.sum(), np.array(sizes), words[reps])


def quantifier_of(text: str) -> str | None:
    """The quantifier a program string ends with, if any."""
    last = text.rsplit(" ", 1)[-1]
    return last if last in QUANTIFIERS else None

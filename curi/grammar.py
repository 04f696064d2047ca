"""The probabilistic context-free grammar of CURI concepts and its top-down sampler (paper Appendix
B.1-B.2): exact production probabilities, depth limit, constant-only rejection, 12 attempts per
child, and the PCFG log-probability of every successful draw."""

from __future__ import annotations

import math
import random

from curi.rng import derive_rng
from curi.scenes import COLORS, MATERIALS, SHAPES, SIZES

__all__ = [
    "RULES",
    "CONSTANTS",
    "CHUNK",
    "sample_chunk",
    "sample_concepts",
    "MAX_DEPTH",
    "ATTEMPTS",
]

MAX_DEPTH = 6  # a non-terminal expanded at this depth fails
ATTEMPTS = 12  # tries per child before its parent fails
CHUNK = 100_000  # draws of one random stream (a bank's concepts depend on it)
CONSTANTS = frozenset(COLORS + SHAPES + MATERIALS + SIZES + tuple(str(i) for i in range(1, 9)))


def _uniform(options, total: float) -> list[tuple[float, tuple[str, ...]]]:
    return [(total / len(options), (o,)) for o in options]


_PROPS = (("C", "FC"), ("SH", "FSH"), ("M", "FM"), ("SI", "FSI"), ("L", "FL"))
# Non-terminal -> [(probability, right-hand side in postfix order)]. Symbols that are keys of
# this table are non-terminals; everything else is emitted as a token.
RULES: dict[str, list[tuple[float, tuple[str, ...]]]] = {
    "START": [
        (0.5, ("BOOL", "lambda", "S.", "exists=")),
        (0.5, ("BOOL", "lambda", "S.", "for-all=")),
    ],
    "BOOL": [
        (3 / 28, ("BOOL", "BOOL", "and")),
        (0.5 / 28, ("BOOL", "BOOL", "or")),
        (1 / 28, ("BOOL", "not")),
        (3 / 28, ("C", "C", "=")),
        (3 / 28, ("SH", "SH", "=")),
        (3 / 28, ("M", "M", "=")),
        (0.5 / 28, ("SI", "SI", "=")),
        (0.5 / 28, ("L", "L", "=")),
        (0.5 / 28, ("NUM", "NUM", "=")),
        (1 / 28, ("SI", "SI", ">")),
        (1 / 28, ("L", "L", ">")),
        (1 / 28, ("NUM", "NUM", ">")),
        *[(1 / 28, ("SET" + v, v, "all")) for v, _ in _PROPS],
        *[(1 / 28, ("SET" + v, v, "any")) for v, _ in _PROPS],
    ],
    "NUM": [(1 / 10, ("SET" + v, v, "count=")) for v, _ in _PROPS] + _uniform(("1", "2", "3"), 0.5),
    **{"SET" + v: [(1.0, ("SET", f))] for v, f in _PROPS},
    "C": _uniform(COLORS, 0.5) + [(0.5, ("OBJECT", "FC"))],
    "SH": _uniform(SHAPES, 0.5) + [(0.5, ("OBJECT", "FSH"))],
    "M": _uniform(MATERIALS, 0.5) + [(0.5, ("OBJECT", "FM"))],
    "SI": _uniform(("large", "small"), 0.5) + [(0.5, ("OBJECT", "FSI"))],
    "L": _uniform(tuple(str(i) for i in range(1, 9)), 0.5) + [(0.5, ("OBJECT", "FL"))],
    "FC": [(1.0, ("color?",))],
    "FSH": [(1.0, ("shape?",))],
    "FM": [(1.0, ("material?",))],
    "FSI": [(1.0, ("size?",))],
    "FL": [(0.5, ("locationX?",)), (0.5, ("locationY?",))],
    "OBJECT": [(1.0, ("x",))],
    "SET": [(0.5, ("S",)), (0.5, ("S-x",))],
}


def _compile(rules):
    """Per non-terminal: cumulative probabilities, right-hand sides and their log-probabilities."""
    out = {}
    for nt, prods in rules.items():
        total = sum(p for p, _ in prods)
        if abs(total - 1.0) > 1e-9:
            raise AssertionError(f"probabilities of {nt} sum to {total}")
        cum, acc = [], 0.0
        for p, _ in prods:
            acc += p
            cum.append(acc)
        cum[-1] = 1.0
        out[nt] = (cum, [rhs for _, rhs in prods], [math.log(p) for p, _ in prods])
    return out


_TABLE = _compile(RULES)


class _Sampler:
    """Recursive top-down expansion with per-child retries; one instance per random stream."""

    def __init__(self, rng: random.Random, max_depth: int, attempts: int):
        self.random = rng.random
        self.max_depth = max_depth
        self.attempts = attempts

    def expand(self, nt: str, depth: int):
        """Expand `nt` at `depth`; return (tokens, logprob) or None when the expansion fails."""
        if depth >= self.max_depth:
            return None
        cum, rhss, logps = _TABLE[nt]
        u = self.random()
        k = 0
        while cum[k] < u:
            k += 1
        rhs = rhss[k]
        tokens: list[str] = []
        logp = logps[k]
        n_children = 0
        all_constant = True
        for sym in rhs:
            if sym not in _TABLE:
                tokens.append(sym)
                continue
            n_children += 1
            for _ in range(self.attempts):
                got = self.expand(sym, depth + 1)
                if got is not None:
                    break
            else:
                return None
            sub, sub_logp = got
            if not (len(sub) == 1 and sub[0] in CONSTANTS):
                all_constant = False
            tokens.extend(sub)
            logp += sub_logp
        # Constant-only rejection: an operator node whose operands are all grammar constants.
        if n_children >= 2 and all_constant:
            return None
        return tokens, logp


def sample_chunk(
    c: int, m: int, seed: int, *, max_depth: int = MAX_DEPTH, attempts: int = ATTEMPTS
) -> list[tuple[str, float]]:
    """The successful draws among the first `m` draws of chunk `c`'s own stream
    (`sample_concepts` is chunk after chunk of these, so chunks can be drawn apart)."""
    stream_seed = int(derive_rng(seed, "grammar", c).integers(2**63))
    sampler = _Sampler(random.Random(stream_seed), max_depth, attempts)
    out = []
    for _ in range(m):
        got = sampler.expand("START", 0)
        if got is not None:
            out.append((" ".join(got[0]), got[1]))
    return out


def sample_concepts(
    n: int,
    seed: int,
    *,
    max_depth: int = MAX_DEPTH,
    attempts: int = ATTEMPTS,
    chunk: int = CHUNK,
    progress: bool = False,
) -> list[tuple[str, float]]:
    """Draw `n` concepts from the grammar; return the successful draws before any filtering.

    Each chunk of `chunk` draws has its own random stream, so the first k draws are the same
    whatever `n` is. A draw whose top-level expansion fails yields nothing but still counts.

    Args:
        n: number of draws (the paper used 2,000,000).
        seed: the seed.
        max_depth: depth at which a non-terminal may no longer be expanded.
        attempts: attempts per failed child before the parent fails.
        chunk: draws per random stream.
        progress: show a progress bar.

    Returns:
        (canonical postfix string, PCFG log-probability) for each successful draw, in draw order.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    out: list[tuple[str, float]] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc="sampling", unit="draw", unit_scale=True)
    for c in range(-(-n // chunk)):
        m = min(chunk, n - c * chunk)
        out += sample_chunk(c, m, seed, max_depth=max_depth, attempts=attempts)
        if bar is not None:
            bar.update(m)
    if bar is not None:
        bar.close()
    return out

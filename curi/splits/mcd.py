"""The ``mcd`` rule: maximum-compound-divergence splits made to order (Keysers et al. 2020,
section 4; the greedy with removals and the three-way variant of Conceptual SCAN, seed 002
appendix F).

Units are synonym groups (a group never straddles two sides: the weak oracle would otherwise
see an extensional twin). Starting from empty sides, each step adds to the side furthest behind
its target size the best of a random sample of `candidates` pool units, and every third step
removes the member whose removal helps most and returns it to the pool. The objective is D_C
(or ``-|D_C - target_dc|``) minus penalties for D_A above `max_da` and for test atoms seen in
fewer than `min_atom_count` training concepts. Each candidate is scored incrementally from its
own count vectors: the unnormalised Chernoff sums change only on the candidate's keys that the
other side holds. The outcome varies with the random samples, so `restarts` runs the greedy
several times (the first stage, three-way) and keeps the run with the highest objective.

With a validation share the split is three-way: first (train + val) against test, then the
train + val units are split into train and val with test fixed, maximising D_C(train, val) +
D_C(train, test). A final repair returns test (and val) units whose atoms train lacks to the
pool and refills with units whose atoms train has, so the atom constraint holds exactly."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from curi.compounds import COMPOUND_KINDS
from curi.divergence import ATOM_ALPHA, COMPOUND_ALPHA, WEIGHTINGS, bank_index
from curi.errors import SplitError
from curi.rng import derive_rng
from curi.splits.base import Split, check_split
from curi.splits.rules import register_split_rule
from curi.splits.spec import SplitSpec

__all__ = ["McdOptions", "mcd_units"]

log = logging.getLogger(__name__)
DA_PENALTY = 20.0  # objective cost per unit of D_A above max_da
MISS_PENALTY = 0.02  # objective cost per test atom below min_atom_count in train
POLISH_CYCLES = 500  # at most this many remove-and-add cycles to bring D_A under max_da


@dataclass(frozen=True)
class McdOptions:
    """Options of ``mcd``.

    Attributes:
        train: share of the bank's synonym groups in train (seeds: 0.4 of the pool).
        test: share of the groups in test.
        validation: share of the groups in a separate val set made by the three-way variant;
            0: val = test (the paper's policy). The rest of the groups is dropped.
        target_dc: the compound divergence to aim for; None: as high as possible.
        max_da: the largest atom divergence allowed.
        min_atom_count: every atom of a test (and val) concept occurs in at least this many
            training concepts.
        candidates: pool units scored at each step (seeds: 200).
        compounds: ``dbca`` (seed 000's weighted subgraphs) or ``depth2`` (former compounds).
        weighting: concept weights of the distributions: ``length`` (episode prior) or
            ``uniform``.
        tolerance: with `target_dc`, the largest accepted ``|D_C - target_dc|``.
        refine: swap cycles of local search after the growth, per group of the grown sides
            (0: the seed's greedy alone). A swap is kept only when it raises the objective.
        removals: share of the growth steps that remove a member (seed 002: every third
            step, 1/3); below 1/2, as each removal undoes an addition.
        restarts: independent runs of the greedy (of its first stage, three-way), each with
            its own random samples; the one with the highest objective is kept. Time grows
            in proportion.
        progress: show a progress bar.
    """

    train: float = 0.4
    test: float = 0.1
    validation: float = 0.1
    target_dc: float | None = None
    max_da: float = 0.02
    min_atom_count: int = 1
    candidates: int = 200
    compounds: str = "dbca"
    weighting: str = "length"
    tolerance: float = 0.05
    refine: float = 1.0
    removals: float = 1 / 3
    restarts: int = 1
    progress: bool = True

    def __post_init__(self) -> None:
        shares = [float(self.train), float(self.test), float(self.validation)]
        if min(shares) < 0 or shares[0] <= 0 or shares[1] <= 0 or sum(shares) > 1 + 1e-9:
            raise SplitError(
                f"rule mcd: train, test and validation must be shares of the synonym groups "
                f"(train, test > 0, validation >= 0) summing to at most 1; got {shares}"
            )
        if self.target_dc is not None and not 0 <= float(self.target_dc) <= 1:
            raise SplitError(
                f"rule mcd: target_dc must lie in [0, 1] or be null, got {self.target_dc}"
            )
        if not 0 <= float(self.max_da) <= 1:
            raise SplitError(f"rule mcd: max_da must lie in [0, 1], got {self.max_da}")
        if float(self.refine) < 0:
            raise SplitError(f"rule mcd: refine must be >= 0, got {self.refine}")
        if not 0 <= float(self.removals) < 0.5:
            raise SplitError(f"rule mcd: removals must lie in [0, 0.5), got {self.removals}")
        if int(self.min_atom_count) < 0 or int(self.candidates) < 1 or int(self.restarts) < 1:
            raise SplitError("rule mcd: min_atom_count must be >= 0, candidates and restarts >= 1")
        if self.compounds not in COMPOUND_KINDS or self.weighting not in WEIGHTINGS:
            raise SplitError(
                f"rule mcd: compounds must be one of {COMPOUND_KINDS} and weighting one of "
                f"{WEIGHTINGS}; got {self.compounds!r}, {self.weighting!r}"
            )
        coerced = {
            "train": shares[0],
            "test": shares[1],
            "validation": shares[2],
            "max_da": float(self.max_da),
            "tolerance": float(self.tolerance),
            "refine": float(self.refine),
            "removals": float(self.removals),
            "min_atom_count": int(self.min_atom_count),
            "candidates": int(self.candidates),
            "restarts": int(self.restarts),
        }
        for key, value in coerced.items():
            object.__setattr__(self, key, value)
        if self.target_dc is not None:
            object.__setattr__(self, "target_dc", float(self.target_dc))


class _Units:
    """Per-unit (synonym group) count vectors: weighted compounds (sparse rows), weighted
    atoms and the number of concepts holding each atom (dense: a bank has a few dozen atoms)."""

    def __init__(self, bank, compounds: str, weighting: str) -> None:
        index = bank_index(bank, compound_kind=compounds)
        groups = np.asarray(bank.groups)
        self.ids, self.of_concept = np.unique(groups, return_inverse=True)
        w = index.concept_weights(weighting)
        n_units = len(self.ids)

        def matrix(kind: str, weighted: bool, binary: bool = False) -> sparse.csr_matrix:
            rows, keys, vals, n_keys = index.entries(kind)
            vals = np.ones_like(vals) if binary else vals
            vals = vals * w[rows] if weighted else vals
            m = sparse.coo_matrix((vals, (self.of_concept[rows], keys)), shape=(n_units, n_keys))
            return m.tocsr()

        self.comp = matrix("compounds", True)
        self.atom = matrix("atoms", True).toarray()  # (U, A)
        self.presence = matrix("atoms", False, binary=True).toarray()  # (U, A)
        self.index = index

    def __len__(self) -> int:
        return len(self.ids)


class _Members:
    """A set of unit ids with O(1) add, discard and uniform sampling (ids packed in an
    array, each id's position kept)."""

    def __init__(self, n: int, items=()) -> None:
        self.arr = np.zeros(n, dtype=np.int64)
        self.pos = np.full(n, -1, dtype=np.int64)
        self.size = 0
        for x in items:
            self.add(int(x))

    def add(self, x: int) -> None:
        self.arr[self.size], self.pos[x] = x, self.size
        self.size += 1

    def discard(self, x: int) -> None:
        i = self.pos[x]
        if i < 0:
            return
        last = self.arr[self.size - 1]
        self.arr[i], self.pos[last] = last, i
        self.pos[x] = -1
        self.size -= 1

    def view(self) -> np.ndarray:
        return self.arr[: self.size]

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        return iter(self.view().tolist())

    def __contains__(self, x: int) -> bool:
        return self.pos[x] >= 0


class _Side:
    """Summed count vectors of one side and its members; `cpow` caches ``c ** alpha`` (train,
    alpha 0.1) or ``c ** (1 - alpha)`` (a held-out side), the factors of the Chernoff sum."""

    def __init__(self, units: _Units, power: float) -> None:
        self.c = np.zeros(units.comp.shape[1])
        self.cpow = np.zeros(units.comp.shape[1])
        self.power = power
        self.a = np.zeros(units.atom.shape[1])
        self.p = np.zeros(units.atom.shape[1])
        self.members = _Members(len(units))

    def move(self, units: _Units, u: int, sign: int) -> None:
        m = units.comp
        lo, hi = m.indptr[u], m.indptr[u + 1]
        keys = m.indices[lo:hi]
        self.c[keys] = np.maximum(self.c[keys] + sign * m.data[lo:hi], 0.0)  # 0: rounding
        self.cpow[keys] = self.c[keys] ** self.power
        self.a = np.maximum(self.a + sign * units.atom[u], 0.0)
        self.p += sign * units.presence[u]
        (self.members.add if sign > 0 else self.members.discard)(u)


def _rows(m: sparse.csr_matrix, cands: np.ndarray):
    """(candidate of each entry, key, value) of the rows `cands` of `m`."""
    starts = m.indptr[cands]
    lens = m.indptr[cands + 1] - starts
    r = np.repeat(np.arange(len(cands)), lens)
    offs = np.arange(lens.sum()) + np.repeat(starts - (np.cumsum(lens) - lens), lens)
    return r, m.indices[offs], m.data[offs]


def _chernoff(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    both = (p > 0) & (q > 0)
    return float(np.sum(p[both] ** alpha * q[both] ** (1 - alpha)))


class _Greedy:
    """The greedy of seed 002 appendix F on sides[0] (train) against sides[1:] (test or val
    and test); `grow` maps a side to its target size, the other sides stay fixed."""

    def __init__(self, units: _Units, opts: McdOptions, rng: np.random.Generator,
                 sides: list[_Side], pool: np.ndarray) -> None:  # fmt: skip
        self.u, self.o, self.rng, self.sides = units, opts, rng, sides
        self.pool = _Members(len(units), pool)
        self.target = opts.target_dc

    # --- divergence parts of pair (0, j), from unnormalised sums
    def _pair(self, j: int) -> tuple[float, float, float]:
        s0, sj = self.sides[0], self.sides[j]
        kc = float(np.sum(s0.cpow * sj.cpow))  # no BLAS: its threads spin on a busy host
        ka = _chernoff(s0.a, sj.a, ATOM_ALPHA)
        miss = float(np.sum((sj.p > 0) & (s0.p < self.o.min_atom_count)))
        return kc, ka, miss

    def _value(self, kc, ka, miss, c0, cj, a0, aj) -> np.ndarray:
        a = COMPOUND_ALPHA
        with np.errstate(divide="ignore", invalid="ignore"):
            dc = np.where((c0 > 0) & (cj > 0), 1 - kc / (c0**a * cj ** (1 - a)), 1.0)
            da = np.where((a0 > 0) & (aj > 0), 1 - ka / np.sqrt(a0 * aj), 1.0)
        dc, da = np.clip(dc, 0, 1), np.clip(da, 0, 1)
        gain = dc if self.target is None else -np.abs(dc - self.target)
        return gain - DA_PENALTY * np.maximum(da - self.o.max_da, 0) - MISS_PENALTY * miss

    def objective(self) -> float:
        total = 0.0
        s0 = self.sides[0]
        for j in range(1, len(self.sides)):
            kc, ka, miss = self._pair(j)
            sj = self.sides[j]
            total += float(
                self._value(kc, ka, miss, s0.c.sum(), sj.c.sum(), s0.a.sum(), sj.a.sum())
            )
        return total

    def scores(self, side: int, cands: np.ndarray, sign: int) -> tuple[np.ndarray, np.ndarray]:
        """Objective after moving each candidate into (sign +1) or out of (-1) `side`, and
        each candidate's change in missing test atoms. Only the candidate's compounds that the
        other side of a pair holds change that pair's Chernoff sum."""
        u, m, n = self.u, self.o.min_atom_count, len(cands)
        rc, keys, xc = _rows(u.comp, cands)
        mass_c = np.bincount(rc, xc, n) * sign
        atom = u.atom[cands] * sign  # (n, A)
        pres = u.presence[cands] * sign  # (n, A)
        mass_a = atom.sum(axis=1)
        total, dmiss_all = np.zeros(n), np.zeros(n)
        s0 = self.sides[0]
        for j in range(1, len(self.sides)):
            sj = self.sides[j]
            kc, ka, miss = self._pair(j)
            c0, cj, a0, aj = s0.c.sum(), sj.c.sum(), s0.a.sum(), sj.a.sum()
            if side not in (0, j):  # a pair the move leaves alone
                total += float(self._value(kc, ka, miss, c0, cj, a0, aj))
                continue
            mover, other = (s0, sj) if side == 0 else (sj, s0)
            live = other.c[keys] > 0
            r, k, x = rc[live], keys[live], xc[live]
            new = np.maximum(mover.c[k] + sign * x, 0) ** mover.power
            kc_new = kc + np.bincount(r, (new - mover.cpow[k]) * other.cpow[k], minlength=n)
            ka_new = np.sum(np.sqrt(np.maximum(mover.a + atom, 0)) * np.sqrt(other.a), axis=1)
            if side == 0:
                miss_new = np.sum((sj.p > 0) & (s0.p + pres < m), axis=1)
                c0, a0 = c0 + mass_c, a0 + mass_a
            else:
                miss_new = np.sum((sj.p + pres > 0.5) & (s0.p < m), axis=1)
                cj, aj = cj + mass_c, aj + mass_a
            total += self._value(kc_new, ka_new, miss_new, c0, cj, a0, aj)
            dmiss_all += miss_new - miss
        return total, dmiss_all

    def sample(self, items: _Members, k: int | None = None) -> np.ndarray:
        k = min(k or self.o.candidates, len(items))
        return items.view()[self.rng.choice(len(items), size=k, replace=False)]

    def put(self, side: int, x: int) -> None:
        """Move unit `x` from the pool into `side`."""
        self.pool.discard(x)
        self.sides[side].move(self.u, x, +1)

    def back(self, side: int, x: int) -> None:
        """Return unit `x` of `side` to the pool."""
        self.sides[side].move(self.u, x, -1)
        self.pool.add(x)

    def add(self, side: int, *, no_missing: bool = False) -> int | None:
        """Move the best of a sample of pool units into `side`; the unit, or None."""
        if not len(self.pool):
            return None
        cands = self.sample(self.pool)
        score, dmiss = self.scores(side, cands, +1)
        if no_missing:
            score = np.where(dmiss > 0, -np.inf, score)
        best = int(np.argmax(score))
        if not np.isfinite(score[best]):
            return None
        x = int(cands[best])
        self.put(side, x)
        return x

    def worst(self, side: int) -> tuple[float, int]:
        """(objective after, unit) of the removal from `side` that helps most, of a sample."""
        cands = self.sample(self.sides[side].members)
        score, _ = self.scores(side, cands, -1)
        i = int(np.argmax(score))
        return float(score[i]), int(cands[i])

    def remove(self, grow: dict[int, int]) -> None:
        """Return to the pool the member of a growing side whose removal helps most."""
        found = [(*self.worst(s), s) for s in grow if len(self.sides[s].members) >= 2]
        if found:
            _, x, side = max(found, key=lambda f: f[0])
            self.back(side, x)

    def run(self, grow: dict[int, int], bar, *, removals: bool = True) -> None:
        """Grow the sides in `grow` to their target sizes, removing every third step."""
        total = sum(grow.values())
        r = self.o.removals if removals else 0.0
        max_steps = round(total / (1 - 2 * r)) * 2 + 100
        for step in range(max_steps):
            sizes = {s: len(self.sides[s].members) for s in grow}
            if all(sizes[s] >= grow[s] for s in grow):
                return
            if int((step + 1) * r) > int(step * r) and sum(sizes.values()) > 4:
                self.remove(grow)
            else:
                side = min(
                    (s for s in grow if sizes[s] < grow[s]), key=lambda s: sizes[s] / grow[s]
                )
                if self.add(side) is None:
                    return
            if bar is not None and step % 50 == 0:
                bar.n = sum(len(self.sides[s].members) for s in grow)
                bar.refresh()

    def atom_divergences(self) -> list[float]:
        """D_A of each pair (train, side j)."""
        s0 = self.sides[0]
        out = []
        for j in range(1, len(self.sides)):
            sj = self.sides[j]
            den = np.sqrt(s0.a.sum() * sj.a.sum())
            out.append(1.0 - _chernoff(s0.a, sj.a, ATOM_ALPHA) / den if den > 0 else 1.0)
        return out

    def polish(self, grow: dict[int, int], cycles: int) -> int:
        """While some D_A is above `max_da`: remove the member whose removal helps most and
        add the best candidate to its side, at most `cycles` times; the cycles used."""
        for cycle in range(cycles):
            if max(self.atom_divergences()) <= self.o.max_da:
                return cycle
            sizes = {s: len(self.sides[s].members) for s in grow}
            self.remove(grow)
            for s in grow:
                while len(self.sides[s].members) < sizes[s] and self.add(s, no_missing=True):
                    pass
        return cycles

    def refine(self, grow: dict[int, int], cycles: int, bar) -> int:
        """Local search after the growth: remove the member of a side whose removal helps
        most, add the best candidate to that side, and keep the swap only when the objective
        rises without D_A rising above `max_da`; the swaps kept."""
        kept = 0
        order = [s for s in grow for _ in range(max(1, round(grow[s] / min(grow.values()))))]
        checked = [s for s in grow if s != 0]
        for cycle in range(cycles):
            side = order[cycle % len(order)]
            if len(self.sides[side].members) < 2 or not len(self.pool):
                continue
            before = self.objective()
            da_limit = max(self.o.max_da, max(self.atom_divergences()))
            _, out = self.worst(side)
            self.back(side, out)
            added = self.add(side, no_missing=side in checked)
            if added is None:
                self.put(side, out)
                continue
            if self.objective() > before + 1e-12 and max(self.atom_divergences()) <= da_limit:
                kept += 1
            else:  # undo the swap
                self.back(side, added)
                self.put(side, out)
            if bar is not None and cycle % 200 == 0:
                bar.set_postfix_str(f"refine {cycle}/{cycles}")
        return kept

    def repair(self, checked: list[int], bar) -> int:
        """Return units of the `checked` sides with atoms below `min_atom_count` in train to
        the pool and refill those sides with units that keep the constraint; the number of
        units that could not be replaced."""
        m = self.o.min_atom_count
        if m <= 0:
            return 0
        short = 0
        s0 = self.sides[0]
        for side in checked:
            members = np.sort(self.sides[side].members.view())
            bad = members[np.any((self.u.presence[members] > 0) & (s0.p < m), axis=1)]
            for x in bad.tolist():
                self.back(side, x)
            for _ in range(len(bad)):
                for _try in range(20):
                    if self.add(side, no_missing=True) is not None:
                        break
                else:
                    short += 1
            if bar is not None:
                bar.refresh()
        return short


def _bar(show: bool, total: int, desc: str):
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="group", leave=False)


def _cycles(opts: McdOptions, n: int) -> int:
    return round(opts.refine * n)


def _best_of(opts: McdOptions, seed: int, attempt) -> tuple[_Greedy, dict]:
    """Run `attempt(rng)` `opts.restarts` times, each with its own generator derived from
    (seed, "split-mcd", restart), and keep the greedy whose final objective is highest: the
    greedy's outcome varies by several hundredths of D_C with its random samples."""
    best: tuple[float, _Greedy, dict] | None = None
    for r in range(opts.restarts):
        rng = derive_rng(seed, "split-mcd", *([r] if r else []))  # restart 0: the single run
        g, info = attempt(rng)
        value = g.objective()
        log.info("mcd restart %d: objective %.4f", r, value)
        if best is None or value > best[0]:
            best = (value, g, {**info, "restart": r})
    return best[1], best[2]


def mcd_units(bank, opts: McdOptions, seed: int) -> tuple[list[set[int]], _Units, dict]:
    """Run the greedy; (train, val, test) unit sets (val empty without a validation share),
    the units and what was measured along the way."""
    units = _Units(bank, opts.compounds, opts.weighting)
    n = len(units)
    n_train = max(1, round(opts.train * n))
    n_test = max(1, round(opts.test * n))
    n_val = round(opts.validation * n)
    pool = np.arange(n)
    if n_val == 0:
        grow = {0: n_train, 1: n_test}

        def two_way(rng: np.random.Generator) -> tuple[_Greedy, dict]:
            sides = [_Side(units, COMPOUND_ALPHA), _Side(units, 1 - COMPOUND_ALPHA)]
            g = _Greedy(units, opts, rng, sides, pool)
            bar = _bar(opts.progress, n_train + n_test, "mcd")
            g.run(grow, bar)
            info = {"swaps_kept": g.refine(grow, _cycles(opts, n_train + n_test), bar)}
            info["units_short"] = g.repair([1], bar)
            info["polish_cycles"] = g.polish(grow, POLISH_CYCLES)
            if bar is not None:
                bar.close()
            return g, info

        g, info = _best_of(opts, seed, two_way)
        train, test = g.sides
        return [set(train.members), set(), set(test.members)], units, info
    # three-way: (train + val) against test, then train against val with test fixed
    grow = {0: n_train + n_val, 1: n_test}

    def first_stage(rng: np.random.Generator) -> tuple[_Greedy, dict]:
        g = _Greedy(units, opts, rng, [_Side(units, COMPOUND_ALPHA),
                                       _Side(units, 1 - COMPOUND_ALPHA)], pool)  # fmt: skip
        bar = _bar(opts.progress, n_train + n_val + n_test, "mcd 1/2")
        g.run(grow, bar)
        g.refine(grow, _cycles(opts, n_train + n_val + n_test), bar)
        if bar is not None:
            bar.close()
        return g, {}

    g, info = _best_of(opts, seed, first_stage)
    trval, test = g.sides
    train, val = _Side(units, COMPOUND_ALPHA), _Side(units, 1 - COMPOUND_ALPHA)
    g2 = _Greedy(units, opts, g.rng, [train, val, test], np.sort(trval.members.view()))
    bar = _bar(opts.progress, n_train + n_val, "mcd 2/2")
    g2.run({0: n_train, 1: n_val}, bar)
    info["swaps_kept"] = g2.refine({0: n_train, 1: n_val}, _cycles(opts, n_train + n_val), bar)
    # test units train lacks atoms for can only be replaced from the whole pool
    used = np.concatenate([s.members.view() for s in (train, val, test)])
    g2.pool = _Members(n, np.setdiff1d(np.arange(n), used))
    info["units_short"] = g2.repair([1, 2], bar)
    info["polish_cycles"] = g2.polish({0: n_train, 1: n_val, 2: n_test}, POLISH_CYCLES)
    if bar is not None:
        bar.close()
    return [set(s.members) for s in (train, val, test)], units, info


@register_split_rule("mcd", options=McdOptions)
def mcd(spec: SplitSpec, bank) -> Split:
    """A maximum-compound-divergence split of `bank` (see the module docstring); `info` holds
    the measured divergences, the random baseline and the sizes.

    Raises:
        SplitError: the request cannot be met (D_A above `max_da`, D_C off `target_dc`, atoms
            missing from train), saying what was reached and what to change.
    """
    opts: McdOptions = spec.options
    t0 = time.perf_counter()
    (tr_u, va_u, te_u), units, run_info = mcd_units(bank, opts, spec.seed)
    of = units.of_concept

    def concepts(us: set[int]) -> np.ndarray:
        return np.flatnonzero(np.isin(of, np.fromiter(us, np.int64, len(us))))

    train, test = concepts(tr_u), concepts(te_u)
    val = concepts(va_u) if va_u else test
    used = np.zeros(len(bank), dtype=bool)
    used[np.concatenate([train, val, test])] = True
    split = Split(spec.name, train, val, test, np.flatnonzero(~used))
    check_split(split if va_u else Split(spec.name, train, test[:0], test, split.dropped),
                bank, grouped=True)  # fmt: skip
    index = units.index
    d = index.divergences(train, test, weighting=opts.weighting)
    base = index.random_baseline(train, test, seed=spec.seed, pool=np.arange(len(bank)),
                                 weighting=opts.weighting)  # fmt: skip
    counts = np.asarray(units.presence[np.fromiter(tr_u, np.int64)].sum(axis=0)).ravel()
    test_atoms = np.asarray(units.presence[np.fromiter(te_u, np.int64)].sum(axis=0)).ravel() > 0
    if va_u:
        test_atoms |= (
            np.asarray(units.presence[np.fromiter(va_u, np.int64)].sum(axis=0)).ravel() > 0
        )
    absent = int(np.sum(test_atoms & (counts < max(opts.min_atom_count, 1))))
    info = {
        "compounds": opts.compounds,
        "weighting": opts.weighting,
        "candidates": opts.candidates,
        "restarts": opts.restarts,
        "d_atom": round(d.atom, 4),
        "d_compound": round(d.compound, 4),
        "d_atom_random": round(base.atom, 4),
        "d_compound_random": round(base.compound, 4),
        "test_atoms_absent_from_train": absent,
        "groups": {"train": len(tr_u), "val": len(va_u), "test": len(te_u), "all": len(units)},
        "concepts": {"train": len(train), "val": len(val), "test": len(test)},
        "seconds": round(time.perf_counter() - t0, 1),
        **run_info,
    }
    if va_u:
        dv = index.divergences(train, val, weighting=opts.weighting)
        info.update(d_atom_val=round(dv.atom, 4), d_compound_val=round(dv.compound, 4))
    problems = []
    if d.atom > opts.max_da + 1e-9:
        problems.append(f"D_A {d.atom:.4f} is above max_da {opts.max_da} (raise max_da, or "
                        "lower the train / test shares)")  # fmt: skip
    if opts.target_dc is not None and abs(d.compound - opts.target_dc) > opts.tolerance:
        problems.append(f"D_C {d.compound:.4f} is off target_dc {opts.target_dc} by more than "
                        f"tolerance {opts.tolerance} (target_dc: null gives the highest D_C "
                        "this generator reaches)")  # fmt: skip
    if absent:
        problems.append(f"{absent} test atoms occur in fewer than {opts.min_atom_count} train "
                        "concepts (lower min_atom_count or the test share)")  # fmt: skip
    if problems:
        raise SplitError(f"split {spec.name!r} (rule mcd) cannot meet the request: reached "
                         f"D_C {d.compound:.4f}, D_A {d.atom:.4f} with {len(tr_u)} / {len(te_u)} "
                         f"train / test groups; " + "; ".join(problems))  # fmt: skip
    return Split(split.name, split.train, split.val, split.test, split.dropped, info)

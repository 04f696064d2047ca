"""The ``mcd`` rule: maximum-compound-divergence splits made to order (Keysers et al. 2020,
section 4; the greedy with removals and the three-way variant of Conceptual SCAN, seed 002
appendix F).

Units are synonym groups (a group never straddles two sides: the weak oracle would otherwise
see an extensional twin). Starting from empty sides, each step adds to the side furthest behind
its target size the best of a random sample of `candidates` pool units, and every third step
removes the member whose removal helps most and returns it to the pool. The objective is D_C
(or ``-|D_C - target_dc|``) minus penalties for D_A above `max_da` and for test atoms seen in
fewer than `min_atom_count` training concepts. Each candidate is scored incrementally from its
own count vectors: the unnormalised Chernoff sums change only on the candidate's keys.

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
        if int(self.min_atom_count) < 0 or int(self.candidates) < 1:
            raise SplitError("rule mcd: min_atom_count must be >= 0 and candidates >= 1")
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
        }
        for key, value in coerced.items():
            object.__setattr__(self, key, value)
        if self.target_dc is not None:
            object.__setattr__(self, "target_dc", float(self.target_dc))


class _Units:
    """Per-unit (synonym group) count vectors: weighted compounds, weighted atoms, and the
    number of concepts holding each atom."""

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
        self.atom = matrix("atoms", True)
        self.presence = matrix("atoms", False, binary=True)
        self.index = index

    def __len__(self) -> int:
        return len(self.ids)


class _Side:
    """Summed count vectors of one side and its members."""

    def __init__(self, units: _Units) -> None:
        self.c = np.zeros(units.comp.shape[1])
        self.a = np.zeros(units.atom.shape[1])
        self.p = np.zeros(units.atom.shape[1])
        self.members: set[int] = set()

    def move(self, units: _Units, u: int, sign: int) -> None:
        for vec, m in ((self.c, units.comp), (self.a, units.atom), (self.p, units.presence)):
            lo, hi = m.indptr[u], m.indptr[u + 1]
            vec[m.indices[lo:hi]] += sign * m.data[lo:hi]
            if sign < 0:
                np.maximum(vec, 0.0, out=vec)  # rounding
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
        self.pool = list(pool.tolist())
        self.pos = {x: i for i, x in enumerate(self.pool)}
        self.target = opts.target_dc

    # --- divergence parts of pair (0, j), from unnormalised sums
    def _pair(self, j: int) -> tuple[float, float, float]:
        s0, sj = self.sides[0], self.sides[j]
        kc = _chernoff(s0.c, sj.c, COMPOUND_ALPHA)
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
        each candidate's change in missing test atoms."""
        u, m = self.u, self.o.min_atom_count
        rc, kc_keys, xc = _rows(u.comp, cands)
        ra, ka_keys, xa = _rows(u.atom, cands)
        rp, kp_keys, xp = _rows(u.presence, cands)
        n = len(cands)
        mass_c = np.bincount(rc, xc, n) * sign
        mass_a = np.bincount(ra, xa, n) * sign
        total = np.zeros(n)
        dmiss_all = np.zeros(n)
        s0 = self.sides[0]
        for j in range(1, len(self.sides)):
            if side not in (0, j):
                continue
            sj = self.sides[j]
            kc, ka, miss = self._pair(j)
            c0, cj, a0, aj = s0.c.sum(), sj.c.sum(), s0.a.sum(), sj.a.sum()
            if side == 0:
                old, oth = s0.c[kc_keys], sj.c[kc_keys]
                new = np.maximum(old + sign * xc, 0)
                dkc = np.bincount(rc, (new**COMPOUND_ALPHA - old**COMPOUND_ALPHA)
                                  * oth ** (1 - COMPOUND_ALPHA), minlength=n)  # fmt: skip
                old, oth = s0.a[ka_keys], sj.a[ka_keys]
                new = np.maximum(old + sign * xa, 0)
                dka = np.bincount(ra, (np.sqrt(new) - np.sqrt(old)) * np.sqrt(oth), minlength=n)
                p0, pj = s0.p[kp_keys], sj.p[kp_keys]
                p0_new = p0 + sign * xp
                flip = (pj > 0) & ((p0 < m) != (p0_new < m))
                dmiss = np.bincount(rp, np.where(flip, np.where(p0_new < m, 1.0, -1.0), 0), n)
                c0, a0 = c0 + mass_c, a0 + mass_a
            else:
                old, oth = sj.c[kc_keys], s0.c[kc_keys]
                new = np.maximum(old + sign * xc, 0)
                dkc = np.bincount(rc, oth**COMPOUND_ALPHA * (new ** (1 - COMPOUND_ALPHA)
                                  - old ** (1 - COMPOUND_ALPHA)), minlength=n)  # fmt: skip
                old, oth = sj.a[ka_keys], s0.a[ka_keys]
                new = np.maximum(old + sign * xa, 0)
                dka = np.bincount(ra, (np.sqrt(new) - np.sqrt(old)) * np.sqrt(oth), minlength=n)
                p0, pj = s0.p[kp_keys], sj.p[kp_keys]
                pj_new = pj + sign * xp
                flip = (p0 < m) & ((pj > 0.5) != (pj_new > 0.5))
                dmiss = np.bincount(rp, np.where(flip, np.where(pj_new > 0.5, 1.0, -1.0), 0), n)
                cj, aj = cj + mass_c, aj + mass_a
            total += self._value(kc + dkc, ka + dka, miss + dmiss, c0, cj, a0, aj)
            dmiss_all += dmiss
        for j in range(1, len(self.sides)):  # pairs the move leaves alone
            if side not in (0, j):
                sj = self.sides[j]
                kc, ka, miss = self._pair(j)
                total += float(self._value(kc, ka, miss, s0.c.sum(), sj.c.sum(),
                                           s0.a.sum(), sj.a.sum()))  # fmt: skip
        return total, dmiss_all

    def _take(self, x: int) -> None:
        i = self.pos.pop(x)
        last = self.pool.pop()
        if last != x:
            self.pool[i] = last
            self.pos[last] = i

    def _give(self, x: int) -> None:
        self.pos[x] = len(self.pool)
        self.pool.append(x)

    def sample(self, items: list[int]) -> np.ndarray:
        k = min(self.o.candidates, len(items))
        idx = self.rng.choice(len(items), size=k, replace=False)
        return np.asarray(items)[idx]

    def add(self, side: int, *, no_missing: bool = False) -> bool:
        if not self.pool:
            return False
        cands = self.sample(self.pool)
        score, dmiss = self.scores(side, cands, +1)
        if no_missing:
            score = np.where(dmiss > 0, -np.inf, score)
        best = int(np.argmax(score))
        if not np.isfinite(score[best]):
            return False
        x = int(cands[best])
        self._take(x)
        self.sides[side].move(self.u, x, +1)
        return True

    def remove(self, grow: dict[int, int]) -> None:
        best_val, best = -np.inf, None
        for side in grow:
            members = sorted(self.sides[side].members)
            if len(members) < 2:
                continue
            cands = self.sample(members)
            score, _ = self.scores(side, cands, -1)
            i = int(np.argmax(score))
            if score[i] > best_val:
                best_val, best = score[i], (side, int(cands[i]))
        if best is not None:
            side, x = best
            self.sides[side].move(self.u, x, -1)
            self._give(x)

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
                if not self.add(side):
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
            before = self.objective()
            da_limit = max(self.o.max_da, max(self.atom_divergences()))
            members = sorted(self.sides[side].members)
            if len(members) < 2 or not self.pool:
                continue
            cands = self.sample(members)
            score, _ = self.scores(side, cands, -1)
            out = int(cands[int(np.argmax(score))])
            self.sides[side].move(self.u, out, -1)
            self._give(out)
            if not self.add(side, no_missing=side in checked):
                self._take(out)
                self.sides[side].move(self.u, out, +1)
                continue
            added = next(iter(self.sides[side].members - set(members)), None)
            if self.objective() > before + 1e-12 and max(self.atom_divergences()) <= da_limit:
                kept += 1
            elif added is not None:  # undo the swap
                self.sides[side].move(self.u, added, -1)
                self._give(added)
                self._take(out)
                self.sides[side].move(self.u, out, +1)
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
        p = self.u.presence
        for side in checked:
            sj = self.sides[side]
            bad = [x for x in sorted(sj.members)
                   if np.any(s0.p[p.indices[p.indptr[x]:p.indptr[x + 1]]] < m)]  # fmt: skip
            for x in bad:
                sj.move(self.u, x, -1)
                self._give(x)
            for _ in range(len(bad)):
                for _try in range(20):
                    if self.add(side, no_missing=True):
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


def mcd_units(bank, opts: McdOptions, seed: int) -> tuple[list[set[int]], _Units, dict]:
    """Run the greedy; (train, val, test) unit sets (val empty without a validation share),
    the units and what was measured along the way."""
    units = _Units(bank, opts.compounds, opts.weighting)
    n = len(units)
    n_train = max(1, round(opts.train * n))
    n_test = max(1, round(opts.test * n))
    n_val = round(opts.validation * n)
    rng = derive_rng(seed, "split-mcd")
    pool = np.arange(n)
    info: dict = {}
    if n_val == 0:
        train, test = _Side(units), _Side(units)
        g = _Greedy(units, opts, rng, [train, test], pool)
        bar = _bar(opts.progress, n_train + n_test, "mcd")
        g.run({0: n_train, 1: n_test}, bar)
        info["swaps_kept"] = g.refine({0: n_train, 1: n_test}, _cycles(opts, n_train + n_test), bar)
        info["units_short"] = g.repair([1], bar)
        info["polish_cycles"] = g.polish({0: n_train, 1: n_test}, POLISH_CYCLES)
        if bar is not None:
            bar.close()
        return [train.members, set(), test.members], units, info
    # three-way: (train + val) against test, then train against val with test fixed
    trval, test = _Side(units), _Side(units)
    g = _Greedy(units, opts, rng, [trval, test], pool)
    bar = _bar(opts.progress, n_train + n_val + n_test, "mcd 1/2")
    g.run({0: n_train + n_val, 1: n_test}, bar)
    g.refine({0: n_train + n_val, 1: n_test}, _cycles(opts, n_train + n_val + n_test), bar)
    if bar is not None:
        bar.close()
    train, val = _Side(units), _Side(units)
    g2 = _Greedy(units, opts, rng, [train, val, test], np.asarray(sorted(trval.members)))
    bar = _bar(opts.progress, n_train + n_val, "mcd 2/2")
    g2.run({0: n_train, 1: n_val}, bar)
    info["swaps_kept"] = g2.refine({0: n_train, 1: n_val}, _cycles(opts, n_train + n_val), bar)
    # test units train lacks atoms for can only be replaced from the whole pool
    g2.pool = [x for x in range(n) if x not in train.members | val.members | test.members]
    g2.pos = {x: i for i, x in enumerate(g2.pool)}
    info["units_short"] = g2.repair([1, 2], bar)
    info["polish_cycles"] = g2.polish({0: n_train, 1: n_val, 2: n_test}, POLISH_CYCLES)
    if bar is not None:
        bar.close()
    return [train.members, val.members, test.members], units, info


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

"""The greedy search of the ``mcd`` rule (Keysers et al. 2020, section 4; the greedy with
removals and the three-way variant of Conceptual SCAN, Appendix F), and its options.

Units are synonym groups (a group never straddles two sides: the weak oracle would otherwise
see an extensional twin). Starting from empty sides, each step adds to the side furthest behind
its target size the best of a random sample of `candidates` pool units, and every third step
removes the member whose removal helps most and returns it to the pool. The objective is D_C
(or ``-|D_C - target_dc|``) minus penalties for D_A above `max_da` and for test atoms seen in
fewer than `min_atom_count` training concepts. Each candidate is scored incrementally from its
own count vectors: the unnormalised Chernoff sums change only on the candidate's keys.

With a validation share the split is three-way: first (train + val) against test, then, with
test fixed, val is moved out of train + val: at each step the best of a sample of train's
members goes to val (every third step the val member whose return helps most goes back),
maximising D_C(train, test) + `val_weight` * D_C(train, val). Leaving train, the units that
hold test compounds raise D_C(train, test), so the second stage ends above the first. A final
repair returns test (and val) units whose atoms train lacks to the pool and refills with units
whose atoms train has, so the atom constraint holds exactly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from curi import validate
from curi.compounds import COMPOUND_KINDS
from curi.divergence import ATOM_ALPHA, COMPOUND_ALPHA, WEIGHTINGS, bank_index
from curi.errors import ConfigError, SplitError, SplitOptionError

__all__ = ["Greedy", "McdOptions", "Members", "Side", "Units"]

if TYPE_CHECKING:  # scipy is imported where a split is generated: a command's check needs none
    from scipy import sparse


DA_PENALTY = 20.0  # objective cost per unit of D_A above max_da
MISS_PENALTY = 0.02  # objective cost per test atom below min_atom_count in train
SHARES = ("train", "test", "validation")  # the options that are shares of the groups


@dataclass(frozen=True)
class McdOptions:
    """Options of ``mcd``.

    Attributes:
        train: share of the bank's synonym groups in train (Keysers et al.: 0.4 of the pool).
        test: share of the groups in test.
        validation: share of the groups in a separate val set made by the three-way variant;
            0: val = test (the paper's policy). The rest of the groups is dropped.
        target_dc: the compound divergence to aim for; None: as high as possible.
        max_da: the largest atom divergence allowed.
        min_atom_count: every atom of a test (and val) concept occurs in at least this many
            training concepts.
        candidates: pool units scored at each step (Conceptual SCAN: 200).
        compounds: ``dbca`` (Keysers et al.'s weighted subgraphs) or ``depth2`` (former
            compounds).
        weighting: concept weights of the distributions: ``length`` (episode prior) or
            ``uniform``.
        tolerance: with `target_dc`, the largest accepted ``|D_C - target_dc|``.
        refine: swap cycles of local search after the growth (of the kept restart), per
            group of the grown sides (0: the papers' greedy alone). A swap is kept only when
            it raises the objective; it adds about +0.003 of D_C, so restarts get the time.
        removals: share of the growth steps that remove a member (Conceptual SCAN: every third
            step, 1/3); below 1/2, as each removal undoes an addition.
        restarts: independent runs of the greedy's growth (of its first stage, three-way),
            each with its own random samples drawn from (seed, restart); the one with the
            highest objective is refined and kept. CPU time grows in proportion; `workers`
            run them side by side.
        val_weight: three-way, second stage: the weight of D_C(train, val) next to
            D_C(train, test) in the objective (D_A and missing atoms of both pairs are
            penalised in full). Small: D_C(train, val) of a small val swings by far more per
            move than D_C(train, test), and would otherwise decide every move.
        workers: processes that run the restarts (0: one per CPU core, at most `restarts`);
            the split is the same for any number.
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
    refine: float = 0.25
    removals: float = 1 / 3
    restarts: int = 4
    val_weight: float = 0.01
    workers: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        try:  # NaN would pass the comparisons below
            shares = [validate.number(getattr(self, k), k, low=0, high=1) for k in SHARES]
        except ConfigError as e:
            raise SplitError(f"rule mcd: {e}") from None
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
        if int(self.workers) < 0 or float(self.val_weight) < 0:
            raise SplitError(
                f"rule mcd: workers (0: one per core) and val_weight must be >= 0, got "
                f"{self.workers}, {self.val_weight}"
            )
        validate.choice(self.compounds, "mcd.compounds", COMPOUND_KINDS, error=SplitOptionError)
        validate.choice(self.weighting, "mcd.weighting", WEIGHTINGS, error=SplitOptionError)
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
            "val_weight": float(self.val_weight),
            "workers": int(self.workers),
        }
        for key, value in coerced.items():
            object.__setattr__(self, key, value)
        if self.target_dc is not None:
            object.__setattr__(self, "target_dc", float(self.target_dc))


class Units:
    """Per-unit (synonym group) count vectors: weighted compounds (sparse rows), weighted
    atoms and the number of concepts holding each atom (dense: a bank has a few dozen atoms)."""

    def __init__(self, bank, compounds: str, weighting: str) -> None:
        from scipy import sparse

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


class Members:
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


class Side:
    """Summed count vectors of one side and its members; `cpow` caches ``c ** alpha`` (train,
    alpha 0.1) or ``c ** (1 - alpha)`` (a held-out side), the factors of the Chernoff sum."""

    def __init__(self, units: Units, power: float) -> None:
        self.c = np.zeros(units.comp.shape[1])
        self.cpow = np.zeros(units.comp.shape[1])
        self.power = power
        self.a = np.zeros(units.atom.shape[1])
        self.p = np.zeros(units.atom.shape[1])
        self.members = Members(len(units))

    def move(self, units: Units, u: int, sign: int) -> None:
        m = units.comp
        lo, hi = m.indptr[u], m.indptr[u + 1]
        keys = m.indices[lo:hi]
        self.c[keys] = np.maximum(self.c[keys] + sign * m.data[lo:hi], 0.0)  # 0: rounding
        self.cpow[keys] = self.c[keys] ** self.power
        self.a = np.maximum(self.a + sign * units.atom[u], 0.0)
        self.p += sign * units.presence[u]
        (self.members.add if sign > 0 else self.members.discard)(u)

    def fill(self, units: Units, members: np.ndarray) -> Side:
        """Set the side to `members` (in this order: sampling draws by position)."""
        members = np.asarray(members, dtype=np.int64)
        self.c = np.asarray(units.comp[members].sum(axis=0), dtype=float).ravel()
        self.cpow = self.c**self.power
        self.a = units.atom[members].sum(axis=0).astype(float)
        self.p = units.presence[members].sum(axis=0).astype(float)
        self.members = Members(len(units), members.tolist())
        return self


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


class Greedy:
    """The greedy of Conceptual SCAN, Appendix F, on sides[0] (train) against sides[1:] (test
    or val and test); `grow` maps a side to its target size, the other sides stay fixed."""

    def __init__(
        self,
        units: Units,
        opts: McdOptions,
        rng: np.random.Generator,
        sides: list[Side],
        pool: np.ndarray,
        weights: list[float] | None = None,
    ) -> None:
        self.u, self.o, self.rng, self.sides = units, opts, rng, sides
        self.pool = Members(len(units), pool)
        self.target = opts.target_dc
        # weight of each pair's D_C term (pair (0, j) at j); penalties count in full
        self.weights = weights or [1.0] * len(sides)

    # --- divergence parts of pair (0, j), from unnormalised sums
    def _pair(self, j: int) -> tuple[float, float, float]:
        s0, sj = self.sides[0], self.sides[j]
        kc = float(np.sum(s0.cpow * sj.cpow))  # no BLAS: its threads spin on a busy host
        ka = _chernoff(s0.a, sj.a, ATOM_ALPHA)
        miss = float(np.sum((sj.p > 0) & (s0.p < self.o.min_atom_count)))
        return kc, ka, miss

    def _value(self, kc, ka, miss, c0, cj, a0, aj, weight: float = 1.0) -> np.ndarray:
        a = COMPOUND_ALPHA
        with np.errstate(divide="ignore", invalid="ignore"):
            dc = np.where((c0 > 0) & (cj > 0), 1 - kc / (c0**a * cj ** (1 - a)), 1.0)
            da = np.where((a0 > 0) & (aj > 0), 1 - ka / np.sqrt(a0 * aj), 1.0)
        dc, da = np.clip(dc, 0, 1), np.clip(da, 0, 1)
        gain = dc if self.target is None else -np.abs(dc - self.target)
        return weight * gain - DA_PENALTY * np.maximum(da - self.o.max_da, 0) - MISS_PENALTY * miss

    def objective(self) -> float:
        total = 0.0
        s0 = self.sides[0]
        for j in range(1, len(self.sides)):
            kc, ka, miss = self._pair(j)
            sj = self.sides[j]
            total += float(
                self._value(
                    kc, ka, miss, s0.c.sum(), sj.c.sum(), s0.a.sum(), sj.a.sum(), self.weights[j]
                )
            )
        return total

    def scores(self, side: int, cands: np.ndarray, sign: int) -> tuple[np.ndarray, np.ndarray]:
        """Objective after moving each candidate into (sign +1) or out of (-1) `side`, and
        each candidate's change in missing test atoms."""
        return self.moves(cands, None if sign > 0 else side, side if sign > 0 else None)

    def moves(self, cands: np.ndarray, src: int | None, dst: int | None):
        """Objective after moving each candidate from side `src` to side `dst` (None: the
        pool), and each candidate's change in missing test atoms. Only the candidate's keys
        change a pair's Chernoff sum, and where one side of the pair stays put, only those
        of its keys that this other side holds."""
        u, m, n = self.u, self.o.min_atom_count, len(cands)
        rc, keys, xc = _rows(u.comp, cands)
        mass_c = np.bincount(rc, xc, n)
        atom, pres = u.atom[cands], u.presence[cands]  # (n, A)
        mass_a = atom.sum(axis=1)
        total, dmiss_all = np.zeros(n), np.zeros(n)
        s0 = self.sides[0]
        for j in range(1, len(self.sides)):
            sj = self.sides[j]
            kc, ka, miss = self._pair(j)
            c0, cj, a0, aj = s0.c.sum(), sj.c.sum(), s0.a.sum(), sj.a.sum()
            d0 = (dst == 0) - (src == 0)  # the candidate's sign on side 0 and on side j
            dj = (dst == j) - (src == j)
            if not d0 and not dj:  # a pair the move leaves alone
                total += float(self._value(kc, ka, miss, c0, cj, a0, aj, self.weights[j]))
                continue
            if d0 and dj:  # both sides change: every key of the candidate
                r, k, x = rc, keys, xc
                new = (
                    np.maximum(s0.c[k] + d0 * x, 0) ** s0.power
                    * np.maximum(sj.c[k] + dj * x, 0) ** sj.power
                )
                delta = new - s0.cpow[k] * sj.cpow[k]
            else:
                mover, other, sign = (s0, sj, d0) if d0 else (sj, s0, dj)
                live = np.flatnonzero(other.c[keys] > 0)
                r, k = rc[live], keys[live]
                new = mover.c[k] + sign * xc[live]
                if sign < 0:
                    np.maximum(new, 0, out=new)
                # float32 powers (2.5x faster than float64 ones) suffice to rank candidates
                new = new.astype(np.float32) ** np.float32(mover.power)
                delta = (new - mover.cpow[k]) * other.cpow[k]
            kc_new = kc + np.bincount(r, delta, minlength=n)
            a0n = np.maximum(s0.a + d0 * atom, 0)
            ajn = np.maximum(sj.a + dj * atom, 0)
            ka_new = np.sum(np.sqrt(a0n) * np.sqrt(ajn), axis=1)
            miss_new = np.sum((sj.p + dj * pres > 0.5) & (s0.p + d0 * pres < m), axis=1)
            total += self._value(
                kc_new,
                ka_new,
                miss_new,
                c0 + d0 * mass_c,
                cj + dj * mass_c,
                a0 + d0 * mass_a,
                aj + dj * mass_a,
                self.weights[j],
            )
            dmiss_all += miss_new - miss
        return total, dmiss_all

    def sample(self, items: Members) -> np.ndarray:
        k = min(self.o.candidates, len(items))
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

    def divide(self, src: int, dst: int, size: int, bar) -> None:
        """Move members of side `src` to side `dst` until it has `size`: at each step the best
        of a sample of `src`'s members; every third step (`removals`) the member of `dst`
        whose return to `src` helps most goes back (the three-way second stage)."""
        r = self.o.removals
        for step in range(round(size / (1 - 2 * r)) * 2 + 100):
            have = len(self.sides[dst].members)
            if have >= size or len(self.sides[src].members) < 2:
                return
            if int((step + 1) * r) > int(step * r) and have >= 2:
                a, b = dst, src
            else:
                a, b = src, dst
            cands = self.sample(self.sides[a].members)
            score, _ = self.moves(cands, a, b)
            x = int(cands[int(np.argmax(score))])
            self.sides[a].move(self.u, x, -1)
            self.sides[b].move(self.u, x, +1)
            if bar is not None and step % 50 == 0:
                bar.n = len(self.sides[dst].members)
                bar.refresh()

    def compound_divergence(self, j: int) -> float:
        """D_C of the pair (train, side j), from the sums."""
        s0, sj = self.sides[0], self.sides[j]
        den = s0.c.sum() ** COMPOUND_ALPHA * sj.c.sum() ** (1 - COMPOUND_ALPHA)
        return 1.0 - self._pair(j)[0] / den if den > 0 else 1.0

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
                while (
                    len(self.sides[s].members) < sizes[s]
                    and self.add(s, no_missing=True) is not None
                ):
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

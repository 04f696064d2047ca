"""The ``mcd`` rule: maximum-compound-divergence splits made to order (Keysers et al. 2020,
section 4; the greedy with removals and the three-way variant of Conceptual SCAN, Appendix F;
docs/divergence.md, "MCD splits"). The greedy search itself is `curi.splits.mcd_greedy`; here
are its restarts, side by side in `workers` processes, each with its own generator derived
from (seed, restart), the run with the highest objective kept (the split is the same for any
number of workers) and polished by a short swap local search (`refine`), then the three-way
stages and the final repair, and the rule."""

from __future__ import annotations

import itertools
import logging
import multiprocessing as mp
import time
from typing import TYPE_CHECKING

import numpy as np

from curi.divergence import COMPOUND_ALPHA
from curi.errors import SplitError
from curi.machine import available_cores
from curi.rng import derive_rng
from curi.signals import worker_pool
from curi.splits.base import Split, check_split
from curi.splits.mcd_greedy import Greedy, McdOptions, Side, Units
from curi.splits.rules import register_split_rule
from curi.splits.spec import SplitSpec

__all__ = ["McdOptions", "mcd_units"]

if TYPE_CHECKING:  # scipy is imported where a split is generated: a command's check needs none
    pass

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5  # how often the parent's bar reads the restarts' progress
POLISH_CYCLES = 500  # at most this many remove-and-add cycles to bring D_A under max_da


def _bar(show: bool, total: int, desc: str):
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="group", leave=False)


def _cycles(opts: McdOptions, n: int) -> int:
    return round(opts.refine * n)


def _grow(
    units: Units, opts: McdOptions, seed: int, grow: dict[int, int], restart: int, bar=None
) -> dict:
    """One restart of the greedy's growth, with its generator derived from (seed, restart):
    its objective, the members of both sides and of the pool (in sampling order) and the
    generator's state, from which `_resume` rebuilds it."""
    rng = derive_rng(seed, "split-mcd", *([restart] if restart else []))  # 0: the single run
    sides = [Side(units, COMPOUND_ALPHA), Side(units, 1 - COMPOUND_ALPHA)]
    g = Greedy(units, opts, rng, sides, np.arange(len(units)))
    g.run(grow, bar)
    return {
        "restart": restart,
        "objective": g.objective(),
        "pool": g.pool.view().copy(),
        "sides": [x.members.view().copy() for x in sides],
        "rng": rng.bit_generator.state,
    }


def _resume(units: Units, opts: McdOptions, run: dict) -> Greedy:
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = run["rng"]
    sides = [
        Side(units, COMPOUND_ALPHA).fill(units, run["sides"][0]),
        Side(units, 1 - COMPOUND_ALPHA).fill(units, run["sides"][1]),
    ]
    return Greedy(units, opts, rng, sides, run["pool"])


_WORK: tuple | None = None  # (units, opts, seed, grow, counts), set in the parent before forking


class _Shared:
    """A worker's stand-in for a progress bar: the units its restart has grown (`n`, as
    `Greedy.run` sets it) go to its slot of an array shared with the parent, whose bar
    shows their sum while the restarts run."""

    def __init__(self, counts, slot: int) -> None:
        self.counts, self.slot = counts, slot

    @property
    def n(self) -> int:
        return self.counts[self.slot]

    @n.setter
    def n(self, value: int) -> None:
        self.counts[self.slot] = value

    def refresh(self) -> None:
        pass


def _grow_in_worker(restart: int) -> dict:
    units, opts, seed, grow, counts = _WORK
    bar = None if counts is None else _Shared(counts, restart)
    run = _grow(units, opts, seed, grow, restart, bar)
    if bar is not None:
        bar.n = sum(grow.values())  # done: full, whatever the last periodic update said
    return run


def _best_growth(
    units: Units, opts: McdOptions, seed: int, grow: dict[int, int], desc: str
) -> tuple[Greedy, dict]:
    """Run the growth `opts.restarts` times, in `opts.workers` processes (0: one per core),
    and rebuild the run with the highest objective (the lowest restart on a tie): the
    greedy's outcome varies by several hundredths of D_C with its random samples. With a
    `target_dc`, the first restart (in restart order) within half the tolerance of it ends
    the search. The result does not depend on the number of workers. The progress bar counts
    the units grown by all restarts (in processes: read from a shared array every
    `POLL_SECONDS`)."""
    global _WORK
    n, total = opts.restarts, sum(grow.values())
    workers = min(opts.workers or available_cores(), n)

    def good_enough(run: dict) -> bool:
        return opts.target_dc is not None and run["objective"] >= -opts.tolerance / 2

    runs = []
    forks = "fork" in mp.get_all_start_methods() and not mp.current_process().daemon
    if workers > 1 and forks:  # a daemon (a pool's worker) may not start processes
        ctx = mp.get_context("fork")
        bar = _bar(opts.progress, n * total, f"{desc} ({n} runs, {workers} processes)")
        counts = None if bar is None else ctx.RawArray("q", n)
        _WORK = (units, opts, seed, grow, counts)
        try:
            with worker_pool(ctx, workers, finish=False) as pool:  # leaving it ends the rest
                results = pool.imap(_grow_in_worker, range(n))  # in restart order
                while len(runs) < n:
                    try:
                        runs.append(results.next(timeout=POLL_SECONDS))
                    except mp.TimeoutError:
                        pass
                    if bar is not None:
                        bar.n = sum(counts)
                        bar.refresh()
                    if runs and good_enough(runs[-1]):
                        break
        finally:
            _WORK = None
            if bar is not None:
                bar.close()
    else:
        for r in range(n):
            bar = _bar(opts.progress, total, desc + (f" run {r + 1}/{n}" if n > 1 else ""))
            runs.append(_grow(units, opts, seed, grow, r, bar))
            if bar is not None:
                bar.close()
            if good_enough(runs[-1]):
                break
    for run in runs:
        log.info("mcd restart %d: objective %.4f", run["restart"], run["objective"])
    best = max(runs, key=lambda run: (run["objective"], -run["restart"]))
    info = {"restart": best["restart"], "objectives": [round(r["objective"], 4) for r in runs]}
    return _resume(units, opts, best), info


def mcd_units(bank, opts: McdOptions, seed: int) -> tuple[list[set[int]], Units, dict]:
    """Run the greedy; (train, val, test) unit sets (val empty without a validation share),
    the units and what was measured along the way."""
    if opts.progress:  # the index has no bar: on a large bank it takes a while
        log.info("mcd: indexing the %s compounds of %d concepts", opts.compounds, len(bank))
    units = Units(bank, opts.compounds, opts.weighting)
    n = len(units)
    n_train = max(1, round(opts.train * n))
    n_test = max(1, round(opts.test * n))
    n_val = round(opts.validation * n)
    # two-way: train against test; three-way, first stage: (train + val) against test
    grow = {0: n_train + n_val, 1: n_test}
    clock = {"start": time.perf_counter()}
    g, info = _best_growth(units, opts, seed, grow, "mcd" if n_val == 0 else "mcd 1/2")
    clock["growth"] = time.perf_counter()
    bar = _bar(opts.progress, sum(grow.values()), "mcd refine")
    info["swaps_kept"] = g.refine(grow, _cycles(opts, sum(grow.values())), bar)
    clock["refine"] = time.perf_counter()
    if n_val == 0:
        info["units_short"] = g.repair([1], bar)
        info["polish_cycles"] = g.polish(grow, POLISH_CYCLES)
        if bar is not None:
            bar.close()
        clock["repair"] = time.perf_counter()
        train, test = g.sides
        return [set(train.members), set(), set(test.members)], units, {**info, **_phases(clock)}
    if bar is not None:
        bar.close()
    # second stage: move val out of train + val with test fixed; leaving train, the units
    # that hold test compounds raise D_C(train, test), and D_C(train, val) counts too
    trval, test = g.sides
    train = Side(units, COMPOUND_ALPHA).fill(units, trval.members.view())
    val = Side(units, 1 - COMPOUND_ALPHA)
    g2 = Greedy(
        units, opts, g.rng, [train, val, test], g.pool.view(), weights=[1.0, opts.val_weight, 1.0]
    )
    bar = _bar(opts.progress, n_val, "mcd 2/2")
    g2.divide(0, 1, n_val, bar)
    info["d_compound_stage1"] = round(g.compound_divergence(1), 4)
    clock["second_stage"] = time.perf_counter()
    # test (and val) units train lacks atoms for are replaced from the pool
    info["units_short"] = g2.repair([1, 2], bar)
    info["polish_cycles"] = g2.polish({0: n_train, 1: n_val, 2: n_test}, POLISH_CYCLES)
    if bar is not None:
        bar.close()
    clock["repair"] = time.perf_counter()
    return [set(x.members) for x in (train, val, test)], units, {**info, **_phases(clock)}


def _phases(clock: dict[str, float]) -> dict:
    """Wall seconds of each phase, from the times at which each ended."""
    steps = itertools.pairwise(clock)
    return {"phase_seconds": {b: round(clock[b] - clock[a], 1) for a, b in steps}}


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
    check_split(
        split if va_u else Split(spec.name, train, test[:0], test, split.dropped),
        bank,
        grouped=True,
    )
    index = units.index
    d = index.divergences(train, test, weighting=opts.weighting)
    base = index.random_baseline(
        train, test, seed=spec.seed, pool=np.arange(len(bank)), weighting=opts.weighting
    )
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
        problems.append(
            f"D_A {d.atom:.4f} is above max_da {opts.max_da} (raise max_da, or "
            "lower the train / test shares)"
        )
    if opts.target_dc is not None and abs(d.compound - opts.target_dc) > opts.tolerance:
        problems.append(
            f"D_C {d.compound:.4f} is off target_dc {opts.target_dc} by more than "
            f"tolerance {opts.tolerance} (target_dc: null gives the highest D_C "
            "this generator reaches)"
        )
    if absent:
        problems.append(
            f"{absent} test atoms occur in fewer than {opts.min_atom_count} train "
            "concepts (lower min_atom_count or the test share)"
        )
    if problems:
        raise SplitError(
            f"split {spec.name!r} (rule mcd) cannot meet the request: reached "
            f"D_C {d.compound:.4f}, D_A {d.atom:.4f} with {len(tr_u)} / {len(te_u)} "
            f"train / test groups; " + "; ".join(problems)
        )
    return Split(split.name, split.train, split.val, split.test, split.dropped, info)

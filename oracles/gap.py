"""The compositionality gap (CURI paper, section 3): strong, weak and random oracles scored on a
split's test episodes (mAP on the shared evaluation set, class-balanced accuracy on the query set)
and the split's DBCA divergences, for every split and type of negatives."""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from curi import validate
from curi.bits import byte_codes, pack_rows, transpose_blocks, unpack_rows
from curi.divergence import bank_index
from curi.episodes import NEGATIVES, EpisodeSampler
from curi.errors import ConfigError
from curi.machine import available_cores
from curi.oracles.metrics import class_balanced_accuracy_batch, pooled_class_balanced_accuracy
from curi.oracles.policies import Oracle
from curi.posterior import LIKELIHOODS, PRIORS, predictive_on
from curi.rng import derive_rng
from curi.splits import PAPER_SPLITS, Split, make_split

MAX_GAP_EPISODES = 10**7  # test episodes per (split, negatives); paper: 20,000

__all__ = ["EvalSet", "compositionality_gap", "ap_from_counts", "ROW_KEYS"]

log = logging.getLogger(__name__)
# where a row's time goes: building episodes, posteriors, query-set predictive, mAP, random oracle
STAGES = ("episodes", "posterior", "query", "map", "random")
ROW_KEYS = (
    "split",
    "negatives",
    "n_train",
    "n_test",
    "map_strong",
    "map_weak",
    "map_random",
    "map_gap",
    "cba_strong",
    "cba_weak",
    "cba_random",
    "cba_gap",
    "d_atom",
    "d_compound",
)


@dataclass(frozen=True)
class EvalSet:
    """The mAP evaluation set, as concept-major packed rows over its scenes.

    Attributes:
        ids: (M,) scene ids (3 positives per concept of the bank).
        rows: (H, ceil(M / 64)) words: bit j of row i set when concept i holds on ids[j].
    """

    ids: np.ndarray
    rows: np.ndarray

    @classmethod
    def from_bank(cls, bank) -> EvalSet:
        ids = np.asarray(bank.eval_ids)
        by_scene = np.asarray(bank.truth_by_scene[ids])  # (M, ceil(H / 64))
        return cls(ids, np.concatenate(list(transpose_blocks(by_scene, len(bank)))))

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def all_scenes(self) -> np.ndarray:
        """(ceil(M / 64),) words with the bits of every evaluation scene set."""
        return pack_rows(np.ones(len(self.ids), bool))


def ap_from_counts(scores: np.ndarray, n_pos: np.ndarray, n_tot: np.ndarray) -> float:
    """Step-wise average precision from per-score counts: ``n_pos[k]`` positives among
    ``n_tot[k]`` scenes scoring ``scores[k]``; equal scores form one threshold.

    Posterior scores lie in [0, 1] and sums of the same weights in another order can differ in
    the last bits, so scores are compared to 12 decimals."""
    rounded = np.round(-np.asarray(scores, np.float64), 12)
    values, inv = np.unique(rounded, return_inverse=True)  # descending scores
    pos = np.bincount(inv, weights=n_pos, minlength=len(values))
    tot = np.bincount(inv, weights=n_tot, minlength=len(values))
    total_pos = pos.sum()
    if total_pos == 0:
        return float("nan")
    tp, seen = np.cumsum(pos), np.cumsum(tot)
    return float(np.sum(pos / total_pos * tp / np.maximum(seen, 1)))


_NIBBLE_BITS = (np.arange(16)[:, None] >> np.arange(4)) & 1  # (16, 4): the bits of each nibble
_CELL_MAX_GROUPS = 8  # with more groups the cells mostly outgrow _MAX_CELLS (measured)
_MAX_CELLS = 16  # beyond this many distinct signatures, scoring every scene is cheaper


def _ap_by_cells(reps: np.ndarray, wg: np.ndarray, everything: np.ndarray, label_words):
    """AP from the cells of the partition of the evaluation set by the groups' rows: split
    every cell by each row in turn (cell & row, cell & ~row), drop empty cells; each final cell
    is one signature. Only packed words are touched: no scene is looked at one by one.
    Returns None when the cells outgrow `_MAX_CELLS`."""
    cells, scores = everything[None, :], np.zeros(1)  # (C, ceil(M / 64)), (C,)
    for row, weight in zip(reps, wg, strict=True):
        cells = np.concatenate([cells & row, cells & ~row])
        scores = np.r_[scores + weight, scores]
        n_tot = np.bitwise_count(cells).sum(1)
        keep = n_tot > 0
        if keep.sum() > _MAX_CELLS:
            return None
        cells, scores, n_tot = cells[keep], scores[keep], n_tot[keep]
    n_pos = np.bitwise_count(cells & label_words).sum(1)
    return ap_from_counts(scores, n_pos, n_tot)


def _oracle_ap(ev: EvalSet, label: np.ndarray, idx, w, groups, label_words=None) -> float:
    """AP of an oracle's scores on the evaluation set (`label`: (M,) bool ground truth).

    A scene's score depends only on which consistent synonym groups hold on it. With few
    groups, the partition of the scenes by them is split on packed rows (`_ap_by_cells`);
    otherwise every scene is scored from byte codes of the groups' rows (one table look-up
    per 8 groups) and AP is read off the sorted scores (`_ap_of_scores`)."""
    m = len(ev)
    if len(idx) == 0:
        return float(label.sum() / m)
    _, first, inv = np.unique(groups[idx], return_index=True, return_inverse=True)
    wg = np.bincount(inv, weights=w)
    reps = ev.rows[idx[first]]  # (G, ceil(M / 64)), one row per synonym group
    if len(wg) <= _CELL_MAX_GROUPS:
        if label_words is None:
            label_words = pack_rows(label)
        ap = _ap_by_cells(reps, wg, ev.all_scenes, label_words)
        if ap is not None:
            return ap
    return _ap_of_scores(_scene_scores(reps, wg, m), label)


def _scene_scores(reps: np.ndarray, wg: np.ndarray, m: int) -> np.ndarray:
    """(M,) scores ``sum_g wg[g] [row g holds]`` of packed rows (G, ceil(M / 64)): each block
    of 8 rows becomes one byte per scene, scored by a 256-entry table of its weights."""
    codes = byte_codes(reps, m)  # (ceil(G / 8), M)
    w = np.zeros((len(codes), 2, 1, 4))
    w.reshape(-1)[: len(wg)] = wg
    nibbles = (w * _NIBBLE_BITS).sum(-1)  # (ceil(G / 8), 2, 16): the low and high 4 rows
    tables = (nibbles[:, 1, :, None] + nibbles[:, 0, None, :]).reshape(len(codes), 256)
    scores, part = np.zeros(m), np.empty(m)
    code = np.empty(m, np.intp)  # take() is ~5x faster on intp indices with mode="clip"
    for table, byte in zip(tables, codes, strict=True):
        code[:] = byte
        scores += table.take(code, out=part, mode="clip")  # codes are < 256: nothing clips
    return scores


def _ap_of_scores(scores: np.ndarray, label: np.ndarray) -> float:
    """Step-wise AP of (M,) scores against (M,) bool labels, compared to 12 decimals (as in
    `ap_from_counts`): only the distinct positive scores are thresholds, and the scenes at or
    above each are counted in one sort of the scores (no argsort)."""
    scores = np.round(scores, 12)
    thresholds, pos_at = np.unique(scores[label], return_counts=True)  # ascending
    if len(thresholds) == 0:
        return float("nan")
    n_ge = len(scores) - np.searchsorted(np.sort(scores), thresholds, side="left")
    tp_ge = np.cumsum(pos_at[::-1])[::-1]
    return float(np.sum(pos_at * tp_ge / n_ge) / pos_at.sum())


def _random_ap(rng: np.random.Generator, n_pos: int, m: int) -> float:
    """AP of uniform random scores: the positives' ranks are a uniform random n_pos-subset."""
    ranks = np.sort(rng.choice(m, size=n_pos, replace=False)) + 1
    return float(np.mean(np.arange(1, n_pos + 1) / ranks))


# --- one (split, negatives) job -------------------------------------------------------------
_SHARED: dict = {}  # set in the parent before forking workers


def _run_job(job: tuple) -> dict:
    split_name, negatives = job
    bank, ev, splits, opts = (_SHARED[k] for k in ("bank", "eval", "splits", "opts"))
    split: Split = splits[split_name]
    return score_split(bank, split, negatives, ev, **opts)


def score_split(
    bank,
    split: Split,
    negatives: str,
    ev: EvalSet,
    *,
    episodes: int,
    prior: str,
    likelihood: str,
    seed: int,
    progress: bool = False,
    per_episode: bool = False,
) -> dict:
    """Strong, weak and random oracle metrics on `episodes` test episodes of one split; with
    `per_episode`, the row also holds ``episode_ap``: ``{"strong", "weak", "random"}`` ->
    (episodes,) arrays of each episode's AP (per-concept results, `curi eval`)."""
    t0 = time.perf_counter()
    sampler = EpisodeSampler(bank, split, "test", negatives, seed=seed, size=episodes)
    kw = {"prior": prior, "likelihood": likelihood, "negatives": negatives}
    strong = Oracle.strong(bank, **kw)
    same = len(split.train) == len(bank)  # instance IID: the weak oracle is the strong one
    weak = strong if same else Oracle.weak(bank, split, **kw)
    groups = np.asarray(bank.groups)
    n_pos_eval = np.bitwise_count(ev.rows).sum(1)
    m = len(ev)
    out = {k: np.zeros(episodes) for k in ("ap_s", "ap_w", "ap_r")}
    n_query = sampler.num_positives + sampler.num_negatives
    q_scores = np.zeros((3, episodes, n_query))  # (strong, weak, random) predictive on queries
    q_labels = np.zeros((episodes, n_query), np.int8)
    from tqdm import tqdm

    stages = dict.fromkeys(STAGES, 0.0)  # seconds spent in each stage of the loop
    clock = time.perf_counter

    def lap(stage: str, since: float) -> float:
        now = clock()
        stages[stage] += now - since
        return now

    bar = tqdm(range(episodes), desc=f"{split.name}/{negatives}", disable=not progress)
    for i in bar:
        t = clock()
        e = sampler[i]
        label_words = ev.rows[e.concept]  # ground truth on the eval set, packed and unpacked
        label = unpack_rows(label_words, m)
        n_pos = int(n_pos_eval[e.concept])
        q_labels[i] = e.query_labels
        t = lap("episodes", t)
        for k, oracle in enumerate((strong, weak)):
            if k == 1 and same:
                out["ap_w"][i], q_scores[1, i] = out["ap_s"][i], q_scores[0, i]
                continue
            idx, w = oracle.posterior(e.support_ids, e.support_labels)
            t = lap("posterior", t)
            q_scores[k, i] = predictive_on(bank, idx, w, e.query_ids)
            t = lap("query", t)
            out[("ap_s", "ap_w")[k]][i] = _oracle_ap(ev, label, idx, w, groups, label_words)
            t = lap("map", t)
        rng = derive_rng(seed, f"random-oracle:{split.name}:{negatives}", i)
        out["ap_r"][i] = _random_ap(rng, n_pos, m)
        order = np.argsort(-e.query_labels, kind="stable")  # positives first: as unshuffled
        q_scores[2, i, order] = rng.random(len(e.query_ids))
        lap("random", t)
    # class-balanced accuracy of the query predictions at 0.5, per episode and pooled
    cba = [class_balanced_accuracy_batch(q, q_labels) for q in q_scores]
    row = {
        "split": split.name,
        "negatives": negatives,
        "n_train": len(split.train),
        "n_test": len(split.test),
        "map_strong": float(out["ap_s"].mean()),
        "map_weak": float(out["ap_w"].mean()),
        "map_random": float(out["ap_r"].mean()),
        "cba_strong": float(cba[0].mean()),
        "cba_weak": float(cba[1].mean()),
        "cba_random": float(cba[2].mean()),
        "cba_pooled_strong": pooled_class_balanced_accuracy(q_scores[0], q_labels),
        "cba_pooled_weak": pooled_class_balanced_accuracy(q_scores[1], q_labels),
        "episodes": episodes,
        "seconds": round(time.perf_counter() - t0, 4),
        "stage_seconds": {k: round(v, 4) for k, v in stages.items()},
    }
    row["map_gap"] = row["map_strong"] - row["map_weak"]
    row["cba_gap"] = row["cba_strong"] - row["cba_weak"]
    if per_episode:
        row["episode_ap"] = {"strong": out["ap_s"], "weak": out["ap_w"], "random": out["ap_r"]}
    return row


def check_gap_options(episodes, workers, seed) -> tuple[int, int, int]:
    """(episodes, workers, seed) as ints once in range: at least one episode (0 made a table
    of NaNs) and at most `MAX_GAP_EPISODES` (the per-episode arrays of 10**12 episodes asked
    for terabytes); cheap, so `curi gap` checks them before opening the bank."""
    return (
        validate.integer(episodes, "episodes.test", low=1, high=MAX_GAP_EPISODES),
        validate.integer(workers, "workers", low=0, high=1024),
        validate.seed(seed),
    )


def compositionality_gap(
    bank,
    splits=PAPER_SPLITS,
    negatives=("hard", "easy"),
    *,
    episodes: int = 20_000,
    prior: str = "log_linear",
    likelihood: str = "size_principle",
    seed: int = 0,
    divergences: bool = True,
    workers: int = 0,
    progress: bool = True,
) -> list[dict]:
    """The gap table: one row per (split, negatives) with the keys of `ROW_KEYS` (and more).

    Args:
        bank: a `ConceptBank`.
        splits: split names, `Split`s, user split configs, or one of them.
        negatives: ``hard``, ``easy`` or both.
        episodes: test episodes per (split, negatives) (paper: 20,000).
        prior, likelihood: the oracles' prior and likelihood (see `Oracle`).
        seed: the seed of episodes and the random oracle.
        divergences: also compute DBCA atom / compound divergences per split.
        workers: processes (0: one per CPU core).
        progress: show progress bars.

    Raises:
        ConfigError: episodes outside [1, `MAX_GAP_EPISODES`], a negative number of workers,
            a seed that is not a non-negative integer, an unknown prior, likelihood or kind of
            negatives, or no split or no negatives at all.
    """
    episodes, workers, seed = check_gap_options(episodes, workers, seed)
    validate.choice(prior, "prior", PRIORS)  # else refused in a worker, after the bank loaded
    validate.choice(likelihood, "likelihood", LIKELIHOODS)
    if isinstance(splits, (str, Split)) or hasattr(splits, "keys"):
        splits = [splits]
    if isinstance(negatives, str):
        negatives = [negatives]
    splits, negatives = list(splits), list(negatives)
    if not splits or not negatives:  # else an empty table, after the evaluation set is built
        raise ConfigError(f"give at least one split and one kind of negatives, got {splits} "
                          f"and {negatives}")  # fmt: skip
    for neg in negatives:
        validate.choice(neg, "negatives", NEGATIVES)
    resolved = {}
    for s in splits:
        sp = s if isinstance(s, Split) else make_split(bank, s)
        resolved[sp.name] = sp
    jobs = [(name, neg) for name in resolved for neg in negatives]
    t = time.perf_counter()
    ev = EvalSet.from_bank(bank)
    log.info("evaluation set: %d scenes (%.1f s)", len(ev), time.perf_counter() - t)
    opts = {"episodes": episodes, "prior": prior, "likelihood": likelihood, "seed": seed}
    _SHARED.update(bank=bank, eval=ev, splits=resolved, opts=opts)
    workers = min(workers or available_cores(), len(jobs))
    try:
        if workers > 1:
            with mp.get_context("fork").Pool(workers) as pool:
                rows = _collect(pool.imap(_run_job, jobs), len(jobs), progress)
        else:
            rows = _collect(map(_run_job, jobs), len(jobs), progress)
    finally:
        _SHARED.clear()
    if divergences:
        _add_divergences(bank, resolved, rows, seed)
    return rows


def _collect(results, total: int, progress: bool) -> list[dict]:
    from tqdm import tqdm

    rows = []
    for row in tqdm(results, total=total, desc="gap", unit="job", disable=not progress):
        log.info(
            "%s/%s: mAP strong %.3f weak %.3f gap %.3f (%.0f s)",
            row["split"], row["negatives"], row["map_strong"], row["map_weak"], row["map_gap"],
            row["seconds"],
        )  # fmt: skip
        rows.append(row)
    return rows


def _add_divergences(bank, splits: dict, rows: list[dict], seed: int) -> None:
    index = bank_index(bank)
    cache = {}
    for name, sp in splits.items():
        if len(sp.test) == 0:
            cache[name] = (None, None)
            continue
        d = index.divergences(sp.train, sp.test)
        if len(sp.train) + len(sp.test) <= len(bank):
            base = index.random_baseline(sp.train, sp.test, seed=seed)
        else:  # overlapping sides (instance IID): a random split of the same sizes is itself
            base = d
        cache[name] = (d, base)
    for row in rows:
        d, base = cache[row["split"]]
        if d is None:
            continue
        row.update(
            d_atom=d.atom, d_compound=d.compound, d_atom_random=base.atom,
            d_compound_random=base.compound,
        )  # fmt: skip

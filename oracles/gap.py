"""The compositionality gap (spec 6): strong, weak and random oracles scored on a split's test
episodes (mAP on the shared evaluation set, class-balanced accuracy on the query set) and the
split's DBCA divergences, for every split and type of negatives."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from dataclasses import dataclass

import numpy as np

from curi.bits import transpose_blocks, unpack_rows
from curi.episodes import EpisodeSampler
from curi.rng import derive_rng
from curi.splits import PAPER_SPLITS, Split, make_split
from oracles.posterior import Oracle, predictive_on

__all__ = ["EvalSet", "compositionality_gap", "ap_from_counts", "ROW_KEYS"]

log = logging.getLogger(__name__)
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


def _signature_codes(bits: np.ndarray) -> list[np.ndarray]:
    """Per chunk of 8 rows of `bits` (G, M), a (M,) uint8 code whose bit j is row 8c + j."""
    codes = []
    for c in range(0, len(bits), 8):
        code = np.zeros(bits.shape[1], np.uint8)
        for j, row in enumerate(bits[c : c + 8]):
            code |= row.view(np.uint8) << np.uint8(j)
        codes.append(code)
    return codes


_BYTE_BITS = (np.arange(256)[:, None] >> np.arange(8)) & 1  # (256, 8): bits of each byte


def _oracle_ap(ev: EvalSet, label: np.ndarray, idx, w, groups) -> float:
    """AP of an oracle's scores on the evaluation set (`label`: (M,) bool ground truth).

    A scene's score depends only on which consistent synonym groups hold on it: its signature,
    built as byte codes (8 groups a byte). With at most 16 groups, one bincount over the codes
    gives the counts per distinct score; with more, the covered scenes are scored by table
    look-ups and grouped by score."""
    m = len(ev)
    if len(idx) == 0:
        return float(label.sum() / m)
    _, first, inv = np.unique(groups[idx], return_index=True, return_inverse=True)
    wg = np.bincount(inv, weights=w)
    n_groups = len(wg)
    codes = _signature_codes(unpack_rows(ev.rows[idx[first]], m))  # one row per group
    if n_groups <= 16:
        code = codes[0] if n_groups <= 8 else codes[0] | (codes[1].astype(np.uint16) << 8)
        n_tot = np.bincount(code, minlength=1 << n_groups)
        n_pos = np.bincount(code[label], minlength=1 << n_groups)
        present = np.flatnonzero(n_tot)
        scores = ((present[:, None] >> np.arange(n_groups)) & 1) @ wg
        return ap_from_counts(scores, n_pos[present], n_tot[present])
    covered = np.flatnonzero(np.bitwise_or.reduce(codes, 0))  # (U,) scenes with a score > 0
    scores = sum(
        (_BYTE_BITS[:, : len(wg[8 * c : 8 * c + 8])] @ wg[8 * c : 8 * c + 8])[code[covered]]
        for c, code in enumerate(codes)
    )
    lab = label[covered].astype(np.float64)
    return ap_from_counts(
        np.r_[scores, 0.0],
        np.r_[lab, label.sum() - lab.sum()],
        np.r_[np.ones(len(covered)), m - len(covered)],
    )


def _cba(scores: np.ndarray, labels: np.ndarray) -> tuple[float, int, int]:
    """(class-balanced accuracy, correct positives, correct negatives) at threshold 0.5."""
    pred = scores > 0.5
    pos = labels.astype(bool)
    tp, tn = int((pred & pos).sum()), int((~pred & ~pos).sum())
    return 0.5 * (tp / pos.sum() + tn / (~pos).sum()), tp, tn


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
) -> dict:
    """Strong, weak and random oracle metrics on `episodes` test episodes of one split."""
    t0 = time.perf_counter()
    sampler = EpisodeSampler(bank, split, "test", negatives, seed=seed, size=episodes)
    kw = {"prior": prior, "likelihood": likelihood, "negatives": negatives}
    strong = Oracle(bank, None, **kw)
    same = len(split.train) == len(bank)  # instance IID: the weak oracle is the strong one
    weak = strong if same else Oracle(bank, split.train, **kw)
    groups = np.asarray(bank.groups)
    n_pos_eval = np.bitwise_count(ev.rows).sum(1)
    m = len(ev)
    out = {k: np.zeros(episodes) for k in ("ap_s", "ap_w", "ap_r", "cba_s", "cba_w", "cba_r")}
    pooled = np.zeros((2, 2), np.int64)  # (strong, weak) x (correct positives, negatives)
    from tqdm import tqdm

    bar = tqdm(range(episodes), desc=f"{split.name}/{negatives}", disable=not progress)
    for i in bar:
        e = sampler[i]
        label = unpack_rows(ev.rows[e.concept], m)  # (M,) ground truth on the eval set
        n_pos = int(n_pos_eval[e.concept])
        for k, oracle in enumerate((strong, weak)):
            if k == 1 and same:
                out["ap_w"][i], out["cba_w"][i] = out["ap_s"][i], out["cba_s"][i]
                pooled[1] = pooled[0]
                continue
            idx, w = oracle.posterior(e.support_ids, e.support_labels)
            q = predictive_on(bank, idx, w, e.query_ids)
            cba, tp, tn = _cba(q, e.query_labels)
            out[("cba_s", "cba_w")[k]][i] = cba
            pooled[k] += (tp, tn)
            out[("ap_s", "ap_w")[k]][i] = _oracle_ap(ev, label, idx, w, groups)
        rng = derive_rng(seed, f"random-oracle:{split.name}:{negatives}", i)
        out["ap_r"][i] = _random_ap(rng, n_pos, m)
        out["cba_r"][i] = _cba(rng.random(len(e.query_ids)), e.query_labels)[0]
    n_q_pos = episodes * int(sampler.num_positives)
    n_q_neg = episodes * int(sampler.num_negatives)
    row = {
        "split": split.name,
        "negatives": negatives,
        "n_train": len(split.train),
        "n_test": len(split.test),
        "map_strong": float(out["ap_s"].mean()),
        "map_weak": float(out["ap_w"].mean()),
        "map_random": float(out["ap_r"].mean()),
        "cba_strong": float(out["cba_s"].mean()),
        "cba_weak": float(out["cba_w"].mean()),
        "cba_random": float(out["cba_r"].mean()),
        "cba_pooled_strong": float(0.5 * (pooled[0, 0] / n_q_pos + pooled[0, 1] / n_q_neg)),
        "cba_pooled_weak": float(0.5 * (pooled[1, 0] / n_q_pos + pooled[1, 1] / n_q_neg)),
        "episodes": episodes,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    row["map_gap"] = row["map_strong"] - row["map_weak"]
    row["cba_gap"] = row["cba_strong"] - row["cba_weak"]
    return row


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
    """
    if isinstance(splits, (str, Split)) or hasattr(splits, "keys"):
        splits = [splits]
    if isinstance(negatives, str):
        negatives = [negatives]
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
    workers = min(workers or os.cpu_count() or 1, len(jobs))
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
    from oracles.divergence import DivergenceIndex

    index = DivergenceIndex(bank.concepts)
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

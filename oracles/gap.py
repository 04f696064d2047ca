"""The compositionality gap (CURI paper, section 3): strong, weak, prior-only and random oracles
scored on a split's test episodes (mAP on the shared evaluation set, class-balanced accuracy on
the query set) and the split's DBCA divergences, for every split and type of negatives. The
evaluation set is `curi.oracles.eval_set`, the AP and accuracy maths `curi.oracles.metrics`; here
is the loop over a split's episodes and the pool that runs the (split, negatives) jobs."""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from dataclasses import dataclass

import numpy as np

from curi import validate
from curi.bank import ConceptBank
from curi.bits import unpack_rows
from curi.divergence import bank_index
from curi.episodes import NEGATIVE_SAMPLERS, NEGATIVES, EpisodeSampler
from curi.errors import ConfigError
from curi.machine import available_cores
from curi.oracles.eval_set import EvalSet
from curi.oracles.metrics import (
    class_balanced_accuracy_batch,
    oracle_average_precision,
    pooled_class_balanced_accuracy,
    random_average_precision,
)
from curi.oracles.policies import Oracle
from curi.posterior import LIKELIHOODS, PRIORS, predictive_on
from curi.rng import derive_rng
from curi.splits import PAPER_SPLITS, Split, make_split

MAX_GAP_EPISODES = 10**7  # test episodes per (split, negatives); paper: 20,000

__all__ = ["ROW_KEYS", "check_gap_options", "compositionality_gap", "score_split"]

log = logging.getLogger(__name__)
# where a row's time goes: building episodes, posteriors, query-set predictive, mAP, random
# oracle, prior-only oracle
STAGES = ("episodes", "posterior", "query", "map", "random", "prior")
ROW_KEYS = (
    "split",
    "negatives",
    "n_train",
    "n_test",
    "map_strong",
    "map_weak",
    "map_random",
    "map_prior",
    "map_gap",
    "cba_strong",
    "cba_weak",
    "cba_random",
    "cba_prior",
    "cba_gap",
    "d_atom",
    "d_compound",
)


# --- one (split, negatives) row -------------------------------------------------------------
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
    negative_sampler: str = "paper",
) -> dict:
    """Strong, weak, random and prior-only oracle metrics on `episodes` test episodes of one
    split; with `per_episode`, the row also holds ``episode_ap``: ``{"strong", "weak",
    "random", "prior"}`` -> (episodes,) arrays of each episode's AP (per-concept results,
    `curi eval`). The prior-only oracle's scores are the same in every episode: its AP is
    computed once per concept, its query scores once per scene."""
    t0 = time.perf_counter()
    sampler = EpisodeSampler(
        bank, split, "test", negatives, seed=seed, size=episodes, negative_sampler=negative_sampler
    )
    kw = {"prior": prior, "likelihood": likelihood, "negatives": negatives}
    strong = Oracle.strong(bank, **kw)
    same = len(split.train) == len(bank)  # instance IID: the weak oracle is the strong one
    weak = strong if same else Oracle.weak(bank, split, **kw)
    prior_only = _prior_only(bank, prior)
    groups = np.asarray(bank.groups)
    n_pos_eval = np.bitwise_count(ev.rows).sum(1)
    m = len(ev)
    out = {k: np.zeros(episodes) for k in ("ap_s", "ap_w", "ap_r", "ap_p")}
    n_query = sampler.num_positives + sampler.num_negatives
    # (strong, weak, random, prior-only) predictive on the queries
    q_scores = np.zeros((4, episodes, n_query))
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
            out[("ap_s", "ap_w")[k]][i] = oracle_average_precision(
                ev, label, idx, w, groups, label_words
            )
            t = lap("map", t)
        rng = derive_rng(seed, f"random-oracle:{split.name}:{negatives}", i)
        out["ap_r"][i] = random_average_precision(rng, n_pos, m)
        order = np.argsort(-e.query_labels, kind="stable")  # positives first: as unshuffled
        q_scores[2, i, order] = rng.random(len(e.query_ids))
        t = lap("random", t)
        out["ap_p"][i] = prior_only.eval_average_precision(ev, e.concept)
        q_scores[3, i] = prior_only.predictive(e.query_ids)
        lap("prior", t)
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
        "map_prior": float(out["ap_p"].mean()),
        "cba_strong": float(cba[0].mean()),
        "cba_weak": float(cba[1].mean()),
        "cba_random": float(cba[2].mean()),
        "cba_prior": float(cba[3].mean()),
        "cba_pooled_strong": pooled_class_balanced_accuracy(q_scores[0], q_labels),
        "cba_pooled_weak": pooled_class_balanced_accuracy(q_scores[1], q_labels),
        "cba_pooled_prior": pooled_class_balanced_accuracy(q_scores[3], q_labels),
        "episodes": episodes,
        "seconds": round(time.perf_counter() - t0, 4),
        "stage_seconds": {k: round(v, 4) for k, v in stages.items()},
    }
    row["map_gap"] = row["map_strong"] - row["map_weak"]
    row["cba_gap"] = row["cba_strong"] - row["cba_weak"]
    if per_episode:
        row["episode_ap"] = {
            "strong": out["ap_s"],
            "weak": out["ap_w"],
            "random": out["ap_r"],
            "prior": out["ap_p"],
        }
    return row


_last_prior_only: list = []  # [(bank, prior, oracle)]: the last prior-only oracle of this process


def _prior_only(bank, prior: str):
    """The prior-only oracle of (bank, prior), kept for the next job of the same bank (in a
    pool worker, the jobs it runs) so its per-scene and per-concept caches carry over: its
    scores do not depend on the split or the negatives."""
    last = _last_prior_only[0] if _last_prior_only else (None, None, None)
    if last[0] is not bank or last[1] != prior:
        _last_prior_only[:] = [(bank, prior, Oracle.prior_only(bank, prior=prior))]
    return _last_prior_only[0][2]


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
    negative_sampler: str = "paper",
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
        negative_sampler: how negatives are drawn (`curi.episodes.NEGATIVE_SAMPLERS`:
            ``paper``, or ``matched`` to the positives' object counts and distinct colours).

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
        raise ConfigError(
            f"give at least one split and one kind of negatives, got {splits} and {negatives}"
        )
    for neg in negatives:
        validate.choice(neg, "negatives", NEGATIVES)
    validate.choice(negative_sampler, "negative_sampler", NEGATIVE_SAMPLERS)
    resolved = {}
    for s in splits:
        sp = s if isinstance(s, Split) else make_split(bank, s)
        resolved[sp.name] = sp
    keys = [(name, neg) for name in resolved for neg in negatives]
    t = time.perf_counter()
    ev = EvalSet.from_bank(bank)
    log.info("evaluation set: %d scenes (%.1f s)", len(ev), time.perf_counter() - t)
    opts = {"episodes": episodes, "prior": prior, "likelihood": likelihood, "seed": seed}
    opts["negative_sampler"] = negative_sampler
    workers = min(workers or available_cores(), len(keys))
    rows = _run_jobs(_GapJobs(bank, ev, resolved, opts), keys, workers, progress)
    if divergences:
        _add_divergences(bank, resolved, rows, seed)
    return rows


# --- the table's jobs and the pool that runs them ------------------------------------------
@dataclass(frozen=True)
class _GapJobs:
    """What every (split, negatives) job of a gap table reads; called with ``(split name,
    negatives)``, it scores that job (`score_split`)."""

    bank: ConceptBank
    ev: EvalSet
    splits: dict[str, Split]
    options: dict  # score_split's keyword arguments: episodes, prior, likelihood, seed

    def __call__(self, job: tuple[str, str]) -> dict:
        split_name, negatives = job
        return score_split(self.bank, self.splits[split_name], negatives, self.ev, **self.options)


_worker_jobs: _GapJobs | None = None  # a pool worker's own jobs, from the pool's initializer


def _init_worker(jobs: _GapJobs) -> None:
    """Pool initializer: keep the jobs the parent hands over (under fork, without a copy)."""
    global _worker_jobs
    _worker_jobs = jobs


def _run_in_worker(job: tuple[str, str]) -> dict:
    return _worker_jobs(job)


def _run_jobs(
    jobs: _GapJobs, keys: list[tuple[str, str]], workers: int, progress: bool
) -> list[dict]:
    """The rows of `keys` in order, scored by `workers` forked processes (the bank, evaluation
    set and splits reach them as the pool's initializer arguments, shared copy-on-write) or,
    with one worker, in this process."""
    if workers <= 1:
        return _collect(map(jobs, keys), len(keys), progress)
    ctx = mp.get_context("fork")
    with ctx.Pool(workers, initializer=_init_worker, initargs=(jobs,)) as pool:
        return _collect(pool.imap(_run_in_worker, keys), len(keys), progress)


def _collect(results, total: int, progress: bool) -> list[dict]:
    from tqdm import tqdm

    rows = []
    for row in tqdm(results, total=total, desc="gap", unit="job", disable=not progress):
        log.info(
            "%s/%s: mAP strong %.3f weak %.3f gap %.3f prior-only %.3f (%.0f s)",
            row["split"],
            row["negatives"],
            row["map_strong"],
            row["map_weak"],
            row["map_gap"],
            row["map_prior"],
            row["seconds"],
        )
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
            d_atom=d.atom,
            d_compound=d.compound,
            d_atom_random=base.atom,
            d_compound_random=base.compound,
        )

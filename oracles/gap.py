"""The compositionality gap (CURI paper, section 3): strong, weak, prior-only and random oracles
scored on a split's test episodes (mAP on the shared evaluation set, class-balanced accuracy on
the query set) and the split's DBCA divergences, for every split and type of negatives. The
evaluation set is `curi.oracles.eval_set`, the AP and accuracy maths `curi.oracles.metrics`, the
oracles `curi.oracles.gap_oracles`; here are the scoring of a chunk of a split's episodes (one
`GapOracle` after another) and the pool that runs the chunks of every (split, negatives) row,
handing each row on as it finishes."""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from curi import validate
from curi.bank import ConceptBank
from curi.divergence import bank_index
from curi.episodes import NEGATIVE_SAMPLERS, NEGATIVES, EpisodeSampler, EpisodeSpec
from curi.errors import ConfigError
from curi.machine import available_cores
from curi.oracles.eval_set import EvalSet
from curi.oracles.gap_oracles import (
    STAGES,
    GapOracle,
    _APCache,
    _Chunk,
    _Clock,
    _PosteriorOracle,
    _prior_only,
    _PriorOnly,
    _RandomOracle,
)
from curi.oracles.metrics import (
    class_balanced_accuracy_batch,
    pooled_class_balanced_accuracy,
)
from curi.oracles.oracle import Oracle
from curi.posterior import LIKELIHOODS
from curi.prior import PRIORS
from curi.progress import progress_bar
from curi.rng import DerivedStream
from curi.signals import worker_pool, worker_signals
from curi.splits import PAPER_SPLITS, Split, make_split

MAX_GAP_EPISODES = 10**7  # test episodes per (split, negatives); paper: 20,000
CHUNK = 1000  # episodes a job scores: the bar moves within a row, and no core idles at the end

__all__ = [
    "CHUNK",
    "ROW_KEYS",
    "GapOracle",
    "check_gap_options",
    "compositionality_gap",
    "score_split",
]

log = logging.getLogger(__name__)
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
_ORACLES = ("strong", "weak", "random", "prior")


@dataclass(frozen=True)
class _Part:
    """What scoring episodes [start, start + E) of one row gives (`_Scorer`)."""

    start: int
    ap: np.ndarray  # (4, E) AP on the evaluation set of the strong, weak, random, prior oracles
    q_scores: np.ndarray  # (4, E, Q) their predictive on the query sets
    q_labels: np.ndarray  # (E, Q) int8
    stages: dict[str, float]  # seconds per stage (`STAGES`)


class _Scorer:
    """Scores chunks of a row's episodes; what chunks share (episode samplers, oracles, the
    prior-only oracle's caches, the AP of a (concept, posterior) seen before) is kept for the
    next chunk of the same process. Every number equals, to the bits, scoring the episodes
    one by one."""

    def __init__(self, bank, ev: EvalSet, *, prior, likelihood, seed, negative_sampler):
        self.bank, self.ev = bank, ev
        self.prior, self.likelihood, self.seed = prior, likelihood, seed
        self.negative_sampler = negative_sampler
        self.n_pos_eval = np.bitwise_count(ev.rows).sum(1)  # (H,) positives on the eval set
        self.prior_only = _PriorOnly(_prior_only(bank, prior), ev)
        self.aps = _APCache(ev, np.asarray(bank.groups))
        self._rows: dict[tuple, tuple] = {}  # (split, negatives) -> sampler, oracles

    def __call__(self, split: Split, negatives: str, start: int, stop: int) -> _Part:
        """Score episodes [start, stop) of the row (split, negatives)."""
        clock = _Clock()
        sampler, oracles = self._row(split, negatives)
        chunk = _Chunk.of(sampler, negatives, start, stop)
        clock.lap("episodes")
        got = {oracle.name: oracle.score(chunk, clock) for oracle in oracles}
        got.setdefault("weak", got["strong"])  # instance IID: the weak oracle is the strong one
        ap = np.stack([got[name][0] for name in _ORACLES])
        q_scores = np.stack([got[name][1] for name in _ORACLES])
        return _Part(start, ap, q_scores, chunk.q_labels, clock.seconds)

    def _row(self, split: Split, negatives: str) -> tuple[EpisodeSampler, list[GapOracle]]:
        """(episode sampler, oracles) of a row, made once per process (their caches kept for
        its next chunk); no weak oracle where it would be the strong one."""
        key = (split.name, negatives)
        if key not in self._rows:
            sampler = EpisodeSampler(
                self.bank,
                split,
                "test",
                negatives,
                seed=self.seed,
                size=MAX_GAP_EPISODES,
                negative_sampler=self.negative_sampler,
            )
            if len(self._rows) >= 2:  # a process scores one row, or two where rows meet
                del self._rows[next(iter(self._rows))]
            self._rows[key] = (sampler, self._oracles(split, negatives))
        return self._rows[key]

    def _oracles(self, split: Split, negatives: str) -> list[GapOracle]:
        """The strong, weak (none for instance IID), random and prior-only oracles of a row."""
        kw = {"prior": self.prior, "likelihood": self.likelihood, "negatives": negatives}
        oracles: list[GapOracle] = [
            _PosteriorOracle("strong", Oracle.strong(self.bank, **kw), self.aps)
        ]
        if len(split.train) != len(self.bank):  # instance IID: weak is strong
            oracles.append(_PosteriorOracle("weak", Oracle.weak(self.bank, split, **kw), self.aps))
        stream = DerivedStream(self.seed, f"random-oracle:{split.name}:{negatives}", "random")
        return [*oracles, _RandomOracle(self.ev, self.n_pos_eval, stream), self.prior_only]


def _row(split: Split, negatives: str, parts: list[_Part], *, per_episode: bool = False) -> dict:
    """The row of (split, negatives) from the parts of all its episodes."""
    parts = sorted(parts, key=lambda p: p.start)
    ap = np.concatenate([p.ap for p in parts], axis=1)  # (4, E)
    q_scores = np.concatenate([p.q_scores for p in parts], axis=1)  # (4, E, Q)
    q_labels = np.concatenate([p.q_labels for p in parts])
    # class-balanced accuracy of the query predictions at 0.5, per episode and pooled
    cba = [class_balanced_accuracy_batch(q, q_labels) for q in q_scores]
    stages = {k: sum(p.stages[k] for p in parts) for k in STAGES}
    row = {"split": split.name, "negatives": negatives}
    row.update(n_train=len(split.train), n_test=len(split.test))
    row.update({f"map_{o}": float(ap[k].mean()) for k, o in enumerate(_ORACLES)})
    row.update({f"cba_{o}": float(cba[k].mean()) for k, o in enumerate(_ORACLES)})
    for k in (0, 1, 3):
        row[f"cba_pooled_{_ORACLES[k]}"] = pooled_class_balanced_accuracy(q_scores[k], q_labels)
    row.update(episodes=ap.shape[1], seconds=round(sum(stages.values()), 4))
    row["stage_seconds"] = {k: round(v, 4) for k, v in stages.items()}
    row["map_gap"] = row["map_strong"] - row["map_weak"]
    row["cba_gap"] = row["cba_strong"] - row["cba_weak"]
    if per_episode:
        row["episode_ap"] = dict(zip(_ORACLES, ap, strict=True))
    return row


def score_split(
    bank,
    spec: EpisodeSpec,
    ev: EvalSet,
    *,
    prior: str,
    likelihood: str,
    progress: bool = False,
    per_episode: bool = False,
) -> dict:
    """Strong, weak, random and prior-only oracle metrics on the test episodes of `spec` (its
    split, negatives, negative sampler, seed and size); with `per_episode`, the row also
    holds ``episode_ap``: ``{"strong", "weak", "random", "prior"}`` -> (episodes,) arrays of
    each episode's AP (per-concept results, `curi eval`). The prior-only oracle's scores are
    the same in every episode: its AP is computed once per concept, its query scores once per
    scene. The random oracle is seeded with the episodes' seed."""
    from tqdm import tqdm

    spec = spec.check(bank)
    split, negatives, episodes = spec.split, spec.negatives, spec.size
    opts = {"prior": prior, "likelihood": likelihood, "seed": spec.seed}
    scorer = _Scorer(bank, ev, **opts, negative_sampler=spec.negative_sampler)
    parts = []
    bar = tqdm(total=episodes, desc=f"{split.name}/{negatives}", disable=not progress)
    with bar:
        for start in range(0, episodes, CHUNK):
            parts.append(scorer(split, negatives, start, min(start + CHUNK, episodes)))
            bar.update(len(parts[-1].q_labels))
    return _row(split, negatives, parts, per_episode=per_episode)


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
    negatives=NEGATIVES,
    *,
    episodes: int = 20_000,
    prior: str = "log_linear",
    likelihood: str = "size_principle",
    seed: int = 0,
    divergences: bool = True,
    workers: int = 0,
    progress: bool = True,
    progress_every: float = 0.0,
    negative_sampler: str = "paper",
    done: Iterable[dict] = (),
    on_rows: Callable[[list[dict]], None] | None = None,
) -> list[dict]:
    """The gap table: one row per (split, negatives) with the keys of `ROW_KEYS` (and more).

    Each row is scored in chunks of `CHUNK` episodes by `workers` processes; a row is handed
    to `on_rows` as soon as its last chunk is in (its divergences join it when they are), so
    a caller can save the rows finished so far and an interrupted table can be finished
    later from them (`done`).

    Args:
        bank: a `ConceptBank`.
        splits: split names, `Split`s, user split configs, or one of them.
        negatives: ``hard``, ``easy`` or both.
        episodes: test episodes per (split, negatives) (paper: 20,000).
        prior, likelihood: the oracles' prior and likelihood (see `Oracle`).
        seed: the seed of episodes and the random oracle.
        divergences: also compute DBCA atom / compound divergences per split.
        workers: processes (0: one per CPU core).
        progress: show a progress bar (episodes of all rows).
        progress_every: without `progress`, log the progress (episodes done of all rows, rows
            done, the time left) every that many seconds (0: never); see `curi.progress`.
        negative_sampler: how negatives are drawn (`curi.episodes.NEGATIVE_SAMPLERS`:
            ``paper``, or ``matched`` to the positives' object counts and distinct colours).
        done: rows already scored with these settings (an earlier, interrupted call's): kept
            as they are, not scored again.
        on_rows: called with the rows finished so far, in table order, each time one
            finishes or gets its divergences.

    Raises:
        ConfigError: episodes outside [1, `MAX_GAP_EPISODES`], a negative number of workers,
            a seed that is not a non-negative integer, an unknown prior, likelihood or kind of
            negatives, or no split or no negatives at all.
    """
    episodes, workers, seed = check_gap_options(episodes, workers, seed)
    progress_every = validate.number(progress_every, "progress_every", low=0)
    validate.choice(prior, "prior", PRIORS)  # else refused in a worker, after the bank loaded
    validate.choice(likelihood, "likelihood", LIKELIHOODS)
    splits, negatives = _as_lists(splits, negatives)
    validate.choice(negative_sampler, "negative_sampler", NEGATIVE_SAMPLERS)
    resolved = {}
    for s in splits:
        sp = s if isinstance(s, Split) else make_split(bank, s)
        resolved[sp.name] = sp
    table = _Table([(name, neg) for name in resolved for neg in negatives], done, on_rows)
    if not table.missing and not (divergences and table.lacks_divergences(resolved)):
        return table.rows()
    t = time.perf_counter()
    ev = EvalSet.from_bank(bank)
    log.info("evaluation set: %d scenes (%.1f s)", len(ev), time.perf_counter() - t)
    opts = {"prior": prior, "likelihood": likelihood, "seed": seed}
    scorer = _Scorer(bank, ev, **opts, negative_sampler=negative_sampler)
    tasks = [_DIVERGENCES] if divergences else []
    tasks += [
        (*k, a, min(a + CHUNK, episodes)) for k in table.missing for a in range(0, episodes, CHUNK)
    ]
    workers = min(workers or available_cores(), len(tasks))
    bar = {"show": progress, "progress_every": progress_every}
    _run_jobs(_GapJobs(bank, scorer, resolved), tasks, workers, table, bar)
    return table.rows()


def _as_lists(splits, negatives) -> tuple[list, list[str]]:
    """The splits and kinds of negatives of a table's rows as lists, from one or many of
    each (`compositionality_gap`); none of either, or unknown negatives, is an error (else
    an empty table, after the evaluation set is built)."""
    if isinstance(splits, (str, Split)) or hasattr(splits, "keys"):
        splits = [splits]
    if isinstance(negatives, str):
        negatives = [negatives]
    splits, negatives = list(splits), list(negatives)
    if not splits or not negatives:
        raise ConfigError(
            f"give at least one split and one kind of negatives, got {splits} and {negatives}"
        )
    for neg in negatives:
        validate.choice(neg, "negatives", NEGATIVES)
    return splits, negatives


# --- the table's jobs and the pool that runs them ------------------------------------------
_DIVERGENCES = ("divergences",)  # the task that computes every split's divergences


@dataclass(frozen=True)
class _GapJobs:
    """What every job of a gap table reads; called with ``(split name, negatives, start,
    stop)``, it scores those episodes of that row (`_Scorer`), with `_DIVERGENCES` it
    returns every split's divergences."""

    bank: ConceptBank
    scorer: _Scorer
    splits: dict[str, Split]

    def __call__(self, task: tuple) -> tuple[tuple, object]:
        if task == _DIVERGENCES:
            return task, _divergences(self.bank, self.splits, self.scorer.seed)
        name, negatives, start, stop = task
        return task, self.scorer(self.splits[name], negatives, start, stop)


class _Table:
    """The rows of a gap table as they come in: finished rows (`done` first), the chunks of
    the rows being scored, and the divergences once known; `on_rows` hears of every change."""

    def __init__(self, keys: list[tuple[str, str]], done: Iterable[dict], on_rows):
        self.keys, self.on_rows = keys, on_rows
        self.finished = {(r["split"], r["negatives"]): r for r in done}
        self.finished = {k: self.finished[k] for k in keys if k in self.finished}
        self.missing = [k for k in keys if k not in self.finished]
        self.parts: dict[tuple[str, str], list[_Part]] = {k: [] for k in self.missing}
        self.divergences: dict | None = None

    def rows(self) -> list[dict]:
        return [self.finished[k] for k in self.keys if k in self.finished]

    def lacks_divergences(self, splits: dict[str, Split]) -> bool:
        """Whether a finished row of a split with test concepts has no divergences."""
        return any(len(splits[r["split"]].test) and "d_atom" not in r for r in self.rows())

    def add(self, task: tuple, result, splits: dict[str, Split], episodes: int) -> None:
        if task == _DIVERGENCES:
            self.divergences = result
            for row in self.rows():
                row.update(result.get(row["split"], {}))
            if not self.finished:
                return
        else:
            key = task[:2]
            self.parts[key].append(result)
            if sum(len(p.q_labels) for p in self.parts[key]) < episodes:
                return
            row = self.finished[key] = _row(splits[key[0]], key[1], self.parts.pop(key))
            row.update((self.divergences or {}).get(key[0], {}))
            _log_row(row)
        if self.on_rows is not None:
            self.on_rows(self.rows())


def _log_row(row: dict) -> None:
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


_worker_jobs: _GapJobs | None = None  # a pool worker's own jobs, from the pool's initializer


def _init_worker(jobs: _GapJobs) -> None:
    """Pool initializer: keep the jobs the parent hands over (under fork, without a copy).
    Ctrl-C reaches the whole process group: the parent alone answers it (and ends the
    workers); SIGTERM ends a worker as it would end any process."""
    global _worker_jobs
    _worker_jobs = jobs
    worker_signals()


def _run_in_worker(task: tuple):
    return _worker_jobs(task)


def _run_jobs(jobs: _GapJobs, tasks: list, workers: int, table: _Table, progress: dict) -> None:
    """Run `tasks` by `workers` forked processes (the bank, evaluation set and splits reach
    them as the pool's initializer arguments, shared copy-on-write) or, with one worker, in
    this process, handing each result to `table` as it comes; `progress`: the options of
    `curi.progress.progress_bar` (a bar, or lines in the log)."""
    episodes = max((t[3] for t in tasks if t != _DIVERGENCES), default=0)
    total = episodes * len(table.missing)
    # smoothing=0: the ETA from the mean rate since the start, which settles; chunks arrive in
    # bursts (one per worker) and the first of each worker is slower (its caches fill)
    bar = progress_bar(total, "gap", unit="episode", smoothing=0, logger=log, **progress)
    with bar:

        def collect(results) -> None:
            for task, result in results:
                table.add(task, result, jobs.splits, episodes)
                if task != _DIVERGENCES:  # the rows done, shown with the next redraw
                    rows = f"{len(table.finished)}/{len(table.keys)} rows"
                    bar.set_postfix_str(rows, refresh=False)
                    bar.update(task[3] - task[2])

        if workers <= 1:
            collect(map(jobs, tasks))
            return
        _load_kernels(jobs, tasks)
        ctx = mp.get_context("fork")
        with worker_pool(ctx, workers, initializer=_init_worker, initargs=(jobs,)) as pool:
            collect(pool.imap_unordered(_run_in_worker, tasks))


def _load_kernels(jobs: _GapJobs, tasks: list) -> None:
    """Compile the numba loops (or load them from their cache) here, before the pool forks:
    scoring the first few episodes of a row of each kind of negatives calls every loop, and
    the workers inherit them instead of each compiling (and racing to write the cache)."""
    seen = set()
    for task in tasks:
        if task != _DIVERGENCES and task[1] not in seen:
            seen.add(task[1])
            jobs((task[0], task[1], task[2], min(task[2] + 8, task[3])))


def _divergences(bank, splits: dict[str, Split], seed: int) -> dict[str, dict[str, float]]:
    """Split name -> its D_A, D_C and those of a random split of the same sizes (none for a
    split without test concepts)."""
    index = bank_index(bank)
    out = {}
    for name, sp in splits.items():
        if len(sp.test) == 0:
            continue
        d = index.divergences(sp.train, sp.test)
        if len(sp.train) + len(sp.test) <= len(bank):
            base = index.random_baseline(sp.train, sp.test, seed=seed)
        else:  # overlapping sides (instance IID): a random split of the same sizes is itself
            base = d
        out[name] = {
            "d_atom": d.atom,
            "d_compound": d.compound,
            "d_atom_random": base.atom,
            "d_compound_random": base.compound,
        }
    return out

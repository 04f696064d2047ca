"""The paper's baseline table reproduced (paper section 5, Appendix G.7): every configuration
(modality x pooling x alpha) trained on each of its splits, the checkpoint with the best val mAP
evaluated on test episodes beside the oracles on the same episodes, and one table of test mAP
written next to the paper's numbers; a configuration of another learner
(``schema-propose_verify``, docs/learners.md) is trained and tested on the same splits and test
episodes. Each run is a job (`curi.jobs`: in this process, local processes, SLURM or Ray) with
its own folder; finished runs are skipped and interrupted ones resume, so the same command
continues a sweep, and the table is collected from the folders (`collect_baselines`, also after
the jobs of a SLURM submission end). The sweep's plan (`parse_baselines`, `plan_runs`) lives in
`curi.models.sweep_plan`; the command line is `curi.models.cli`."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from curi import validate
from curi.atomic import remove, write_text
from curi.errors import ConfigError
from curi.jobs import Job, Launcher, run_jobs
from curi.models.baseline_table import baseline_table
from curi.models.config import RunConfig, with_new_defaults
from curi.models.sweep_plan import Baseline, BaselineRun, parse_baselines, plan_runs
from curi.paths import read_text
from curi.schema import check_shape

__all__ = [
    "Baseline",
    "BaselineRun",
    "check_sweep_folder",
    "collect_baselines",
    "oracle_job",
    "parse_baselines",
    "plan_runs",
    "run_baselines",
    "run_job",
]

log = logging.getLogger(__name__)


def _identity(
    run: RunConfig, evaluation: Mapping, threads: int, *, learner: Mapping | None = None
) -> dict:
    """What makes a run folder's results: the run's config less where it ran, the test
    evaluation's settings and the job's torch threads; for a `learner` other than the
    protonet, its options and the run's bank, split, negatives and seed instead of the
    run's config (it has no pooling nor train settings of its own)."""
    ev = {k: evaluation[k] for k in ("episodes", "seed", "negatives")}
    if learner is not None and learner["name"] != "protonet":
        keys = ("bank", "split", "negatives", "seed")
        d = {k: v for k, v in run.to_dict().items() if k in keys}
        return {"learner": dict(learner), "run": d, "eval": ev, "threads": threads}
    d = run.to_dict()
    for k in ("device", "data_dir"):
        d.pop(k)
    for k in ("num_workers", "log_every", "eval_chunk", "eval_batch_size", "cuda_graph"):
        d["train"].pop(k)
    return {"run": d, "eval": ev, "threads": threads}


def _read_json(path: Path):
    """The JSON in the sweep's file `path`; None when it is missing or not JSON.

    Raises:
        ConfigError: `path` is not a regular file (a FIFO would block the read forever) or
            cannot be read.
    """
    text = read_text(path, "sweep file", missing_ok=True)
    try:
        return json.loads(text or "")
    except (ValueError, RecursionError):
        return None


# The shapes of the files a sweep reads back (`curi.schema`): a number may be NaN or null (a
# run without validation has no best val mAP).
_NUMBER = (float, None)
_SWEEP = {
    "settings": dict,
    "runs": [{"name": str, "dir": str}],
    "oracles": [{"split": str, "negatives": str, "file": str}],
}
_RESULT = {
    **dict.fromkeys(("config", "split", "modality", "pooling", "negatives"), str),
    **dict.fromkeys(("seed", "checkpoint_step", "steps"), int),
    **dict.fromkeys(("alpha", "train_seconds"), float),
    **dict.fromkeys(("test_map", "test_cba", "best_val_map"), _NUMBER),
    "learner?": str,  # absent: a protonet (as every run before other learners)
}
_ORACLES = {
    "eval": dict,
    "row": {f"map_{o}?": _NUMBER for o in ("strong", "weak", "random", "prior")},
}
_FAILURE = {"error": str, "detail?": str}
_TIMING = {"train_seconds": float, "train_cpu_seconds": float}
_RESWEEP = "run the sweep's command again to write it anew"


def _read_file(path: Path, spec: object, what: str, fix: str):
    """The JSON of a file of the sweep once it has the shape `spec` (None: the file is missing
    or not JSON, as before it was written).

    Raises:
        ConfigError: a file of another shape (edited or damaged), naming it and the field.
    """
    value = _read_json(path)
    return None if value is None else check_shape(value, spec, f"{what} {str(path)!r}", fix=fix)


def _read_result(run_dir: Path):
    return _read_file(run_dir / "result.json", _RESULT, "result file", "remove it to run it again")


def _read_oracles(path: Path):
    return _read_file(path, _ORACLES, "oracle file", "remove it to score the oracles again")


def _claim(r: BaselineRun, ident: dict, force: bool, root: Path) -> dict | None:
    """The finished result of a run folder made with the same settings (None: run it); a
    folder made with other settings is an error, or emptied with `force` (`root`: the sweep's
    folder, the only place it deletes in).

    Raises:
        ConfigError: a folder made with other settings, without `force`.
        RemovalError: with `force`, a run folder that is a symlink or leads out of `root`.
    """
    saved = _read_json(r.dir / "run.json")
    if isinstance(saved, dict) and isinstance(saved.get("run"), dict):  # by an older curi
        old = {"threads": ident["threads"], **saved}  # an older curi recorded no threads
        saved = {**old, "run": with_new_defaults(saved["run"], ident["run"])}
    if saved is not None and saved != ident:
        if not force:
            raise ConfigError(
                f"{r.dir} holds a run made with other settings; use another output_dir, or "
                "force=true to run it again"
            )
        log.warning("%s: settings changed; starting it again (force)", r.dir)
        remove(r.dir, root=root)
        saved = None
    result = _read_result(r.dir)
    if saved is not None and result is not None:
        return result
    r.dir.mkdir(parents=True, exist_ok=True)
    write_text(r.dir / "run.json", json.dumps(ident, indent=2) + "\n")
    return None


_BANKS: dict[str, object] = {}


def _bank_at(path: str):
    """The bank at `path`, opened once per process (a job process may run several jobs)."""
    from curi.bank import load_bank

    if path not in _BANKS:
        _BANKS[path] = load_bank(path)
    return _BANKS[path]


def _oracle_file(out_dir: Path, split: str, negatives: str) -> Path:
    return out_dir / "oracles" / (f"{split}.json" if negatives == "hard" else f"{split}-easy.json")


def oracle_job(bank, split: str, evaluation: Mapping, path: str) -> dict:
    """A job: the oracles on a split's test episodes (those every run of the split is tested
    on), written to `path` with the evaluation settings (`bank`: a bank or its path)."""
    from curi.episodes import EpisodeSpec
    from curi.oracles.eval_set import EvalSet
    from curi.oracles.gap import score_split

    bank = _bank_at(bank) if isinstance(bank, str) else bank
    e = evaluation
    spec = EpisodeSpec(split, "test", e["negatives"], seed=e["seed"], size=e["episodes"])
    row = score_split(
        bank, spec, EvalSet.from_bank(bank), prior=e["prior"], likelihood=e["likelihood"]
    )
    write_text(Path(path), json.dumps({"eval": dict(evaluation), "row": row}, indent=2) + "\n")
    return row


def run_job(
    r: BaselineRun,
    bank,
    evaluation: Mapping,
    *,
    num_workers: int = 0,
    batch_size: int | None = None,
    progress: bool = False,
) -> dict:
    """A job: train one run (resuming from its last checkpoint if one is there), test its best
    checkpoint by val mAP, and write ``result.json`` (the mark of a finished run) in its
    folder; an error is written to ``failed.json`` there before it propagates. `bank`: the
    loaded bank, or its path (opened in the job's process)."""
    bank = _bank_at(bank) if isinstance(bank, str) else bank
    remove(r.dir / "failed.json", root=r.dir, link=True)
    try:
        if r.baseline.protonet:
            result = _train_and_test(
                r,
                bank,
                evaluation,
                num_workers=num_workers,
                batch_size=batch_size,
                progress=progress,
            )
        else:
            result = _train_and_test_learner(r, bank, evaluation, progress=progress)
    except BaseException as e:
        _write_failure(r.dir, f"{type(e).__name__}: {e}")
        raise
    write_text(r.dir / "result.json", json.dumps(result, indent=2) + "\n")
    return result


def _write_failure(run_dir: Path, error: str, detail: str | None = None) -> None:
    body = {"error": error.strip().splitlines()[-1] if error.strip() else error}
    if detail:
        body["detail"] = detail
    write_text(run_dir / "failed.json", json.dumps(body, indent=2) + "\n")


def _train_timed(r: BaselineRun, bank, progress: bool) -> tuple[dict, dict]:
    """Train a run (resuming from its last checkpoint if one is there): the summary of
    `curi.models.train.train` and the training time summed over the calls that trained this
    run, also written to ``timing.json``."""
    from curi.models.train import train

    resumed = (r.dir / "train" / "checkpoints" / "last.pt").is_file()
    t0, c0 = time.perf_counter(), time.process_time()
    summary = train(
        r.run,
        run_dir=r.dir / "train",
        bank=bank,
        resume=r.dir / "train" if resumed else None,
        progress=progress,
    )
    t1, c1 = time.perf_counter(), time.process_time()
    # training time summed over the calls that finished training this run (it may resume)
    spent = (
        _read_file(r.dir / "timing.json", _TIMING, "timing file", "remove it") if resumed else None
    )
    spent = spent or {"train_seconds": 0.0, "train_cpu_seconds": 0.0}
    spent = {
        "train_seconds": spent["train_seconds"] + t1 - t0,
        "train_cpu_seconds": spent["train_cpu_seconds"] + c1 - c0,
    }
    write_text(r.dir / "timing.json", json.dumps(spent) + "\n")
    return summary, spent


def _train_and_test(
    r: BaselineRun,
    bank,
    evaluation: Mapping,
    *,
    num_workers: int,
    batch_size: int | None,
    progress: bool,
) -> dict:
    """Train a run (resuming from its last checkpoint if one is there), then test its best
    checkpoint by val mAP; writes ``eval/metrics.json`` and ``eval/concepts.parquet``."""

    from curi.models.evaluate import evaluate_checkpoint, write_concepts, write_metrics

    summary, spent = _train_timed(r, bank, progress)
    t1 = time.perf_counter()
    metrics = evaluate_checkpoint(
        r.dir / "train",
        bank=bank,
        episodes=evaluation["episodes"],
        seed=evaluation["seed"],
        negatives=evaluation["negatives"],
        device=r.run.device,
        batch_size=batch_size,
        num_workers=num_workers,
        oracles=False,
        progress=progress,
    )
    write_metrics(metrics, r.dir / "eval" / "metrics.json")
    write_concepts(metrics["per_concept"], r.dir / "eval" / "concepts.parquet")
    described = {
        "modality": r.run.modality["name"],
        "pooling": r.run.pooling["name"],
        "alpha": r.baseline.alpha,
        "negatives": evaluation["negatives"],
    }
    trained = {
        "best_val_map": summary["best_map"],
        "checkpoint_step": metrics["step"],
        "steps": summary["steps"],
    }
    return _result(r, described, metrics["model"], trained, spent, t1, summary["device"])


def _result(
    r: BaselineRun,
    described: Mapping,
    m: Mapping,
    trained: Mapping,
    spent: Mapping,
    t1: float,
    device: str,
) -> dict:
    """A run's row of results.json: what it is (`described`), its test metrics `m`, how it
    was trained (`trained`), its times (`spent`; testing since `t1`) and where it ran."""
    import torch

    return {
        "config": r.baseline.name,
        "split": r.split,
        "seed": r.seed,
        **described,
        "test_map": m["map"],
        "test_cba": m["cba"],
        "test_episodes": m["episodes"],
        **trained,
        "train_seconds": round(spent["train_seconds"], 1),
        "train_cpu_seconds": round(spent["train_cpu_seconds"], 1),
        "eval_seconds": round(time.perf_counter() - t1, 1),
        "device": device,
        "threads": torch.get_num_threads(),  # as the job ran: run.json's, set by the launcher
        "dir": str(r.dir),
    }


def _train_and_test_learner(r: BaselineRun, bank, evaluation: Mapping, *, progress: bool) -> dict:
    """A run of another learner than the protonet (``propose_verify``): trained by
    `curi.models.propose_verify_train.train_run` in ``<run dir>/train`` on the split's
    training concepts (a trained run is tested without training again; an interrupted one
    trains again, as it keeps no partial checkpoint), then tested by `evaluate_run` on the
    sweep's test episodes; writes ``eval/metrics.json``."""

    from curi.episodes import EpisodeSpec
    from curi.models.propose_verify_train import evaluate_run, train_run

    out = r.dir / "train"
    ckpt = out / "checkpoints" / "best.pt"
    spent = _read_file(r.dir / "timing.json", _TIMING, "timing file", "remove it")
    summary = _read_json(out / "summary.json")
    if spent is None or not isinstance(summary, dict) or not ckpt.is_file():
        opts = {k: v for k, v in r.baseline.learner.items() if k != "name"}
        t0, c0 = time.perf_counter(), time.process_time()
        summary = train_run(
            bank, r.run.split, opts, negatives=r.run.negatives, seed=r.seed, out_dir=out
        )
        spent = {
            "train_seconds": time.perf_counter() - t0,
            "train_cpu_seconds": time.process_time() - c0,
        }
        write_text(r.dir / "timing.json", json.dumps(spent) + "\n")
    t1 = time.perf_counter()
    ev = evaluation
    spec = EpisodeSpec(r.split, "test", ev["negatives"], seed=ev["seed"], size=ev["episodes"])
    metrics = evaluate_run(ckpt, bank, spec, oracles=False, progress=progress)
    write_text(r.dir / "eval" / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    history = summary.get("history") or [{"step": 0, "held_loss": 0.0}]
    fallback = summary.get("fallback") or {}
    described = {
        "learner": r.baseline.learner["name"],
        "modality": "schema",
        "pooling": fallback.get("pooling", "none"),  # of its fallback protonet
        "alpha": 0.0,
        "negatives": ev["negatives"],
    }
    trained = {
        "best_val_map": None,  # chosen on held-out training concepts, never on val
        "checkpoint_step": int(min(history, key=lambda h: h["held_loss"])["step"]),
        "steps": int(r.baseline.learner["steps"]),
        "fallback_rate": metrics["fallback_rate"],
        "fallback_model_rate": metrics["fallback_model_rate"],
        "map_answered": metrics["map_answered"],
    }
    return _result(r, described, metrics, trained, spent, t1, "cpu")


def run_baselines(
    runs: Sequence[BaselineRun],
    *,
    bank,
    out_dir: str | Path,
    episodes: int = 20_000,
    eval_seed: int = 0,
    oracles: bool = True,
    prior: str = "log_linear",
    likelihood: str = "size_principle",
    num_workers: int = 0,
    batch_size: int | None = None,
    force: bool = False,
    progress: bool = True,
    launcher: Launcher | None = None,
) -> dict | None:
    """Train and test every run of `plan_runs` as jobs, skipping finished ones, and tabulate.

    Every run folder is checked (and marked with its settings, ``run.json``) before any job
    starts, so a folder made with other settings fails first. The unfinished runs are then
    jobs (`run_job`: one per configuration, split and seed) and, with `oracles`, the strong /
    weak / random / prior-only oracles one job per split (`oracle_job`, on the same test
    episodes), all run by `launcher` (None: in this process, one after another). The plan is
    kept in ``<out_dir>/sweep.json``; the table is collected from the folders
    (`collect_baselines`).

    A run trains with `curi.models.train.train` in ``<run dir>/train`` (resumed from its last
    checkpoint when one is there), keeps the checkpoint with the best val mAP (``best.pt``, as
    the paper picks its checkpoints), and is tested on `episodes` test episodes of seed
    `eval_seed`; ``result.json`` marks it finished, ``failed.json`` holds its error.

    Args:
        runs: from `plan_runs`.
        bank: the loaded bank the runs train on.
        out_dir: the sweep's folder (sweep.json, runs/, oracles/).
        episodes: test episodes per run (paper: 20,000).
        eval_seed: the test episodes' seed (the same episodes for every run and the oracles).
        num_workers, batch_size: of the test evaluation (batch: the training batch size).
        force: start again a run whose folder was made with other settings (else an error).
        launcher: where the jobs run (`curi.jobs.Launcher`), each with one torch thread
            unless its ``threads`` says otherwise (`curi.jobs.Launcher.for_sweep`), as
            ``run.json`` records (``threads``) and ``result.json`` confirms.

    Returns:
        `collect_baselines` of `out_dir`, or None when the jobs were submitted without
        waiting (SLURM with ``wait=false``: collect later).

    Raises:
        ConfigError: bad options, a run folder made with other settings (without `force`),
            a file of the sweep that is not a regular file (a FIFO), or a result or oracle
            file of another shape than the sweep writes.
        RemovalError: with `force`, a run folder to empty that is a symlink or leads out of
            `out_dir` (through a symlinked configuration folder).
    """
    launcher = (launcher or Launcher()).for_sweep()
    evaluation = _evaluation(episodes, eval_seed, prior, likelihood)
    out_dir = Path(out_dir)
    where = bank if launcher.in_process else str(bank.path)  # other processes open it
    job_kw = {
        "num_workers": num_workers,
        "batch_size": batch_size,
        "progress": progress and launcher.in_process,
    }
    jobs, plan, oracle_files = _plan_jobs(
        runs, bank, where, out_dir, evaluation, oracles, force, launcher.threads, job_kw
    )
    _write_sweep(out_dir, bank, evaluation["episodes"], eval_seed, runs, plan, oracle_files)
    to_run = sum(j.fn is run_job for j in jobs)
    log.info("%d runs: %d to run, %d finished before", len(plan), to_run, len(plan) - to_run)
    outcomes = run_jobs(jobs, launcher, progress=progress and not launcher.in_process)
    _record_killed(jobs, outcomes)
    if any(o.status == "submitted" for o in outcomes):
        return None
    return collect_baselines(out_dir)


def _evaluation(episodes: int, eval_seed: int, prior: str, likelihood: str) -> dict:
    """The test evaluation's settings, checked (each run adds its ``negatives``)."""
    episodes = validate.integer(episodes, "episodes", low=1, high=validate.MAX_EPISODES)
    return {
        "episodes": episodes,
        "seed": validate.seed(eval_seed),
        "prior": prior,
        "likelihood": likelihood,
    }


def _plan_jobs(
    runs: Sequence[BaselineRun],
    bank,
    where,
    out_dir: Path,
    evaluation: Mapping,
    oracles: bool,
    force: bool,
    threads: int,
    job_kw: Mapping,
) -> tuple[list[Job], list[dict], dict[tuple[str, str], str]]:
    """The jobs of a sweep after every run folder is claimed (`_claim`): one per unfinished
    run and, with `oracles`, one per (split, negatives) whose oracle file is missing or stale;
    with the plan's rows (``sweep.json``'s ``runs``) and the oracle files by (split,
    negatives). `where`: the bank as the jobs get it (loaded, or its path)."""
    jobs, plan, oracle_files = [], [], {}
    for spec in runs:
        r = dataclasses.replace(spec, run=dataclasses.replace(spec.run, bank=dict(bank.config)))
        ev = {**evaluation, "negatives": r.run.negatives}
        name = f"{r.baseline.name}/{r.split}/seed{r.seed}"
        plan.append({"name": name, "dir": str(r.dir.relative_to(out_dir))})
        ident = _identity(r.run, ev, threads, learner=r.baseline.learner)
        if _claim(r, ident, force, out_dir) is None:
            jobs.append(Job(name, run_job, (r, where, ev), dict(job_kw)))
        else:
            log.info("%s: finished before; skipped", name)
        key = (r.split, r.run.negatives)
        if oracles and key not in oracle_files:
            path = _oracle_file(out_dir, *key)
            oracle_files[key] = str(path.relative_to(out_dir))
            if _oracles_stale(path, ev):
                args = (where, r.split, ev, str(path))
                jobs.append(Job(f"oracles/{r.split}/{r.run.negatives}", oracle_job, args))
    return jobs, plan, oracle_files


def _oracles_stale(path: Path, evaluation: Mapping) -> bool:
    """Whether the oracle file at `path` must be scored (again): missing, of other evaluation
    settings, or from before the prior-only oracle."""
    saved = _read_oracles(path)
    # a file from before the prior-only oracle lacks its column: scored again
    stale = saved is None or "map_prior" not in (saved.get("row") or {})
    return stale or saved.get("eval") != evaluation


def _write_sweep(
    out_dir: Path,
    bank,
    episodes: int,
    eval_seed: int,
    runs: Sequence[BaselineRun],
    plan: list[dict],
    oracle_files: Mapping[tuple[str, str], str],
) -> None:
    """Write the sweep's plan, ``sweep.json`` (what `collect_baselines` reads back)."""
    settings = {
        "bank": bank.config.get("name"),
        "episodes": episodes,
        "eval_seed": eval_seed,
        "seeds": sorted({r.seed for r in runs}),
    }
    sweep = {
        "settings": settings,
        "runs": plan,
        "oracles": [{"split": s, "negatives": n, "file": f} for (s, n), f in oracle_files.items()],
    }
    write_text(out_dir / "sweep.json", json.dumps(sweep, indent=2) + "\n")


def _record_killed(jobs: Sequence[Job], outcomes: Sequence) -> None:
    """Write ``failed.json`` for a run job that failed without writing one itself (killed:
    no word from it), so `collect_baselines` lists its error."""
    for job, o in zip(jobs, outcomes, strict=True):
        if (
            o.status == "failed"
            and job.fn is run_job
            and not (job.args[0].dir / "failed.json").is_file()
        ):
            _write_failure(job.args[0].dir, o.error or "failed", o.detail)


def check_sweep_folder(out_dir: str | Path) -> None:
    """Refuse a folder that holds no sweep of `run_baselines` (no ``sweep.json``); cheap, so
    `curi baselines collect` checks it first.

    Raises:
        ConfigError: naming the folder.
    """
    if not os.path.lexists(Path(out_dir) / "sweep.json"):  # a FIFO there: the reader says so
        raise ConfigError(f"{out_dir} holds no baseline sweep (no sweep.json); give its output_dir")


def collect_baselines(out_dir: str | Path) -> dict:
    """The table of a sweep rebuilt from its folders (``sweep.json``, each run's
    ``result.json``, the oracles' files): `curi.models.baseline_table.baseline_table` with
    ``incomplete`` listing every run that failed (with its error) or has no result yet
    (``missing``: not run, still running, or killed), never dropped silently.

    Raises:
        ConfigError: `out_dir` holds no sweep (no ``sweep.json``), or a file of it is not a
            regular file (a FIFO) or has another shape than the sweep writes (edited or
            damaged).
    """
    out_dir = Path(out_dir)
    sweep = _read_file(out_dir / "sweep.json", _SWEEP, "sweep file", _RESWEEP)
    if sweep is None:
        check_sweep_folder(out_dir)
    results, incomplete = [], []
    for run in sweep["runs"]:
        d = out_dir / run["dir"]
        result = _read_result(d)
        if result is not None:
            results.append(result)
            continue
        failed = _read_file(d / "failed.json", _FAILURE, "failure file", "remove it")
        status = "failed" if failed else "missing"
        incomplete.append(
            {
                "run": run["name"],
                "status": status,
                "error": (failed or {}).get("error"),
                "dir": str(d),
            }
        )
    oracle_rows = {}
    for o in sweep["oracles"]:
        saved = _read_oracles(out_dir / o["file"])
        if saved is not None:
            oracle_rows[(o["split"], o["negatives"])] = saved["row"]
    table = baseline_table(results, oracle_rows, settings=sweep["settings"])
    table["incomplete"] = incomplete
    return table

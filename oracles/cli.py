"""The oracles layer's commands: `curi gap` (config -> bank -> gap table -> report files),
`curi score` (a rule-query task set and a model's predictions -> scores) and `curi curve` (MCD
splits at target divergences -> the gap-versus-divergence study); each turns its composed Hydra
config into plain calls of the library (`curi.oracles.gap`, `curi.oracles.rule_scores`,
`curi.oracles.curve`)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curi import validate
from curi.atomic import exclusive, write_text
from curi.core_cli import check_bank_of, open_bank_from_config, required
from curi.errors import ConfigError
from curi.jobs import sweep_lock
from curi.oracles.gap import check_gap_options, compositionality_gap
from curi.oracles.gap_folder import GapFolder, again, gap_settings
from curi.oracles.report import markdown_table, plot_title
from curi.paths import output_path, read_text, regular_file
from curi.schema import check_shape
from curi.signals import Interrupted, stop_on_signals
from curi.splits import SplitSpec, make_split

__all__ = ["audit", "curve", "curve_collect", "gap", "score"]

log = logging.getLogger("curi")


def _check_gap(cfg: DictConfig) -> None:
    check_gap_options(cfg.episodes.test, cfg.workers, cfg.seed)
    validate.number(cfg.progress_every, "progress_every", low=0)
    if cfg.get("split") is None:
        validate.splits(OmegaConf.to_container(cfg.splits, resolve=True))
    check_bank_of(cfg)


@validate.checked(_check_gap)
def gap(cfg: DictConfig) -> None:
    """Compositionality gap of every split (strong/weak/random/prior-only oracles, D_A, D_C),
    each row saved as it finishes; run again into the same output_dir, it computes only the
    missing rows. Ctrl-C or SIGTERM ends it in one line, the finished rows kept."""
    check_gap_options(cfg.episodes.test, cfg.workers, cfg.seed)  # before building a bank
    out = Path(cfg.output_dir)
    folder = None
    lock = exclusive(out / "gap", what=f"output_dir={out} (a gap table)", error=ConfigError)
    try:
        with stop_on_signals(), lock:
            bank = open_bank_from_config(cfg)
            splits, negatives, options = _table_options(cfg, bank)
            settings = gap_settings(bank, splits, negatives, **options, divergences=True)
            folder = GapFolder(out, settings, total=len(splits) * len(negatives))
            done = folder.claim()  # logs how many rows are done
            meta = _gap_meta(cfg, bank)
            rows = compositionality_gap(
                bank,
                splits,
                negatives,
                **options,
                workers=cfg.workers,
                progress=cfg.progress,
                progress_every=cfg.progress_every,
                done=done,
                on_rows=lambda rows: folder.save(rows, meta=meta),
            )
            name = f"{bank.path.name} ({len(bank):,} concepts)"
            title = plot_title(rows, bank=name, episodes=cfg.episodes.test)
            paths = folder.finish(rows, meta=meta, title=title)
    except Interrupted as stop:
        n = folder.written if folder else 0
        kept = f"{n} of {folder.total} rows kept in {out / 'gap.json'}" if n else "no row done"
        print(f"curi gap: {stop}; {kept}; {again(out)}", file=sys.stderr)
        raise
    print(markdown_table(rows))
    log.info("wrote %s", ", ".join(str(p) for p in paths.values()))


def _table_options(cfg: DictConfig, bank) -> tuple[list, list[str], dict]:
    """(splits, negatives, scoring options) of the table `cfg` asks for."""
    one = cfg.get("split")  # split=NAME or split=FILE.json: that split instead of splits
    specs = (
        [OmegaConf.to_container(one, resolve=True)]
        if one is not None
        else OmegaConf.to_container(cfg.splits, resolve=True)
    )
    splits = list({sp.name: sp for sp in (make_split(bank, s) for s in specs)}.values())
    options = {
        "episodes": cfg.episodes.test,
        "prior": cfg.prior,
        "likelihood": cfg.likelihood,
        "seed": cfg.seed,
        "negative_sampler": cfg.negative_sampler,
    }
    return splits, OmegaConf.to_container(cfg.negatives, resolve=True), options


def _gap_meta(cfg: DictConfig, bank) -> dict:
    """The settings listed at the top of gap.md."""
    return {
        "bank": f"{bank.path} ({len(bank):,} concepts, {bank.num_scenes:,} scenes)",
        "test episodes per row": f"{cfg.episodes.test:,}",
        "prior": cfg.prior,
        "likelihood": cfg.likelihood,
        "negative sampler": cfg.negative_sampler,
        "seed": cfg.seed,
    }


def _check_audit(cfg: DictConfig) -> None:
    from curi.oracles.audit import check_audit_options

    check_audit_options(cfg.episodes.train, cfg.episodes.test, cfg.seed, cfg.max_iter)
    validate.integer(cfg.threads, "threads", low=1, high=1024)
    validate.splits(OmegaConf.to_container(cfg.splits, resolve=True))
    check_bank_of(cfg)


@validate.checked(_check_audit)
def audit(cfg: DictConfig) -> None:
    """The shortcut audit: a support-free learner's AUC / CBA on every split's test queries."""
    from curi.oracles.audit import markdown, run_audit

    bank = open_bank_from_config(cfg)
    result = run_audit(
        bank,
        OmegaConf.to_container(cfg.splits, resolve=True),
        OmegaConf.to_container(cfg.negatives, resolve=True),
        train_episodes=cfg.episodes.train,
        test_episodes=cfg.episodes.test,
        support=cfg.support,
        negative_sampler=cfg.negative_sampler,
        max_iter=cfg.max_iter,
        seed=cfg.seed,
        threads=cfg.threads,
        progress=cfg.progress,
    )
    result["bank"] = f"{bank.path} ({len(bank):,} concepts, {bank.num_scenes:,} scenes)"
    out = Path(cfg.output_dir)
    text = markdown(result)
    head = (
        f"# Shortcut audit\n\nBank {result['bank']}; negative sampler "
        f"{cfg.negative_sampler}; {cfg.episodes.train:,} training and {cfg.episodes.test:,} "
        f"test episodes per row; seed {cfg.seed}. AUC, CBA and mAP: means over test episodes "
        "of a learner that sees one query scene at a time (0.5: no shortcut).\n\n"
    )
    paths = [
        write_text(out / "audit.json", json.dumps(result, indent=1).replace("NaN", "null") + "\n"),
        write_text(out / "audit.md", head + text + "\n"),
    ]
    print(text)
    log.info("wrote %s", ", ".join(str(p) for p in paths))


def _check_score(cfg: DictConfig) -> None:
    example = "curi score tasks=OUT/tasks.jsonl predictions=FILE"
    required(cfg, "tasks", "the task set (tasks.jsonl of `curi rules`)", example)
    required(cfg, "predictions", "the predictions, one per request", example)
    if cfg.get("out"):
        output_path(cfg.out, folder=False)
    for key in ("tasks", "predictions"):
        regular_file(Path(cfg[key]).expanduser(), f"{key} file")


@validate.checked(_check_score)
def score(cfg: DictConfig) -> None:
    """Score a model's predictions on a rule-query task set (accuracy, consistency)."""
    from curi.oracles.rule_scores import markdown, read_predictions, read_tasks, score_predictions

    out = cfg.get("out")
    tasks = read_tasks(cfg.tasks)
    scores = score_predictions(tasks, read_predictions(cfg.predictions, tasks))
    print(markdown(scores))
    if out:
        text = json.dumps(scores, indent=1, default=str).replace("NaN", "null")
        print(write_text(out, text + "\n"))


def _model_results(path: str) -> dict:
    """The JSON file of split name -> a model's mAP that `curi curve` plots beside the oracles.

    Raises:
        ConfigError: an unreadable file, or one that does not map names to numbers.
    """
    p = Path(path).expanduser()
    try:
        model = json.loads(read_text(p, "model_results file"))
    except (json.JSONDecodeError, RecursionError) as e:
        raise ConfigError(f"model_results {str(p)!r} is not a readable JSON file: {e}") from None
    fix = "it must map split names to mAP values"
    return check_shape(model, {str: float}, f"model_results {str(p)!r}", fix=fix)


def _check_curve(cfg: DictConfig) -> None:
    from curi.core_cli import job_launcher
    from curi.oracles.curve import check_step

    for seed in cfg.seeds:
        check_gap_options(cfg.episodes.test, cfg.workers, seed)
    check_step(cfg.step)  # before the jobs: a NaN or tiny step fails after them, or never ends
    mcd = OmegaConf.to_container(cfg.mcd, resolve=True)  # else each job fails, then the table
    SplitSpec.from_mapping({"name": "mcd", "rule": "mcd", "progress": False, **mcd})
    job_launcher(Path(cfg.output_dir), threads=cfg.threads)
    if cfg.get("model_results"):
        _model_results(str(cfg.model_results))
    check_bank_of(cfg)


@validate.checked(_check_curve)
def curve(cfg: DictConfig) -> None:
    """Gap versus compound divergence: MCD splits at target D_C, oracles, correlations."""
    from curi.core_cli import job_launcher
    from curi.oracles.curve import divergence_curve

    out = Path(cfg.output_dir)
    launcher = job_launcher(out, threads=cfg.threads)
    with sweep_lock(out):  # one command at a time in the curve's folder
        bank = open_bank_from_config(cfg)
        model = _model_results(str(cfg.model_results)) if cfg.get("model_results") else None
        result = divergence_curve(
            bank,
            mcd=OmegaConf.to_container(cfg.mcd, resolve=True),
            step=cfg.step,
            seeds=list(cfg.seeds),
            negatives=list(cfg.negatives),
            episodes=int(cfg.episodes.test),
            paper_splits=bool(cfg.paper_splits),
            split_dir=out / "splits",
            model_results=model,
            workers=int(cfg.workers),
            progress=bool(cfg.progress),
            out_dir=out,
            launcher=launcher,
        )
        _write_curve(result, out)


def _check_curve_collect(cfg: DictConfig) -> None:
    from curi.oracles.curve import check_curve_folder

    check_curve_folder(cfg.output_dir)
    if cfg.get("model_results"):
        _model_results(str(cfg.model_results))


@validate.checked(_check_curve_collect)
def curve_collect(cfg: DictConfig) -> None:
    """Rebuild the curve's results from its points (after the jobs of a cluster end)."""
    from curi.oracles.curve import collect_curve

    model = _model_results(str(cfg.model_results)) if cfg.get("model_results") else None
    with sweep_lock(cfg.output_dir):
        _write_curve(collect_curve(cfg.output_dir, model_results=model), Path(cfg.output_dir))


def _write_curve(result: dict, out: Path) -> None:
    """Write and print the study; a point that failed or is missing (not a target the
    generator could not reach) ends the command with exit status 1 once all is written."""
    from curi.oracles.curve import markdown, write_curve

    paths = write_curve(result, out)
    print(markdown(result))
    log.info("wrote %s (%.0f s)", ", ".join(str(p) for p in paths.values()), result["seconds"])
    bad = [f for f in result["failed"] if f.get("point")]
    if bad:
        names = ", ".join(f["point"] for f in bad)
        print(f"curi curve: {len(bad)} points failed or are missing: {names}", file=sys.stderr)
        sys.exit(1)

"""The models layer's commands, `curi train`, `curi eval`, `curi baselines` and `curi
difficulty`: composed Hydra config -> plain library calls (`curi.models.train.train`,
`curi.models.evaluate.evaluate_checkpoint`, `curi.models.baselines.run_baselines`,
`curi.models.difficulty_report.difficulty_report`)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curi import validate
from curi.bank import check_bank, open_bank
from curi.core_cli import check_bank_of, job_launcher, open_bank_from_config, required
from curi.errors import ConfigError
from curi.jobs import sweep_lock
from curi.models.checkpoint import check_checkpoint, checkpoint_file
from curi.models.config import RunConfig, check_eval_options
from curi.models.learner_cli import check_learner, eval_learner, learner_of, train_learner
from curi.models.torchrun import torchrun_env
from curi.paths import inside

__all__ = ["baselines", "baselines_collect", "difficulty", "evaluate", "train"]

log = logging.getLogger("curi")

RUN_KEYS = (
    "bank",
    "split",
    "negatives",
    "negative_sampler",
    "modality",
    "pooling",
    "train",
    "embed_dim",
    "seed",
    "device",
    "data_dir",
)


def run_config(cfg: DictConfig) -> RunConfig:
    """The `RunConfig` of a composed `curi train` config."""
    c = OmegaConf.to_container(cfg, resolve=True)
    return RunConfig.from_mapping({k: c[k] for k in RUN_KEYS if k in c})


def _check_train(cfg: DictConfig) -> None:
    if check_learner(cfg)["name"] != "protonet":  # its own checks: models/learner_cli.py
        check_bank_of(cfg)
        return
    run_config(cfg)
    # before a bank is built or opened, and before any rendezvous: a bad torchrun environment,
    # or a rank without output_dir= (Hydra's default, a folder per process: it waited there)
    raw = OmegaConf.to_container(cfg, resolve=False)["output_dir"]
    torchrun_env(output_dir_given=not str(raw).startswith("${hydra:"))
    check_bank_of(cfg)
    if cfg.resume is not None:
        check_checkpoint(cfg.resume, last=True)


@validate.checked(_check_train)
def train(cfg: DictConfig) -> None:
    """Train a prototypical network; checkpoints, metrics and TensorBoard logs."""
    from curi.models.train import train as train_run

    if learner_of(cfg) != "protonet":
        train_learner(cfg)
        return
    run = run_config(cfg)
    if cfg.get("build"):  # asked for: build a missing bank first (else training refuses it)
        open_bank(run.bank, run.data_dir, progress=cfg.progress, build=True)
    summary = train_run(run, run_dir=Path(cfg.output_dir), resume=cfg.resume, progress=cfg.progress)
    print(json.dumps(summary, indent=2))


def _eval_out(cfg: DictConfig) -> Path:
    return inside(
        cfg.output_dir, cfg.out, what="eval out", hint="; set output_dir= to write elsewhere"
    )


def _check_eval(cfg: DictConfig) -> None:
    from curi.models.learners import list_learners

    required(cfg, "checkpoint", "the checkpoint to evaluate", "checkpoint=<run dir or .pt file>")
    checkpoint_file(cfg.checkpoint)
    check_eval_options(
        episodes=cfg.episodes,
        seed=cfg.seed,
        batch_size=cfg.batch_size,
        num_workers=cfg.num_workers,
        chunk=cfg.chunk,
    )
    _eval_out(cfg)
    check_checkpoint(cfg.checkpoint, learners=tuple(list_learners()))  # its contents, last


@validate.checked(_check_eval)
def evaluate(cfg: DictConfig) -> None:
    """Evaluate a checkpoint on test episodes, with the oracles on the same episodes."""
    from curi.models.evaluate import evaluate_checkpoint, write_concepts, write_metrics
    from curi.models.plots import plot_metrics

    out = _eval_out(cfg)
    if eval_learner(cfg, checkpoint_file(cfg.checkpoint), out):  # a propose_verify checkpoint
        return
    split = cfg.split
    if split is not None and not isinstance(split, str):
        split = OmegaConf.to_container(split, resolve=True)
    metrics = evaluate_checkpoint(
        cfg.checkpoint,
        data_dir=cfg.data_dir,
        subset=cfg.subset,
        episodes=cfg.episodes,
        seed=cfg.seed,
        split=split,
        negatives=cfg.negatives,
        negative_sampler=cfg.get("negative_sampler"),
        device=cfg.device,
        render_device=cfg.render_device,
        batch_size=cfg.batch_size,
        num_workers=cfg.num_workers,
        chunk=cfg.chunk,
        oracles=cfg.oracles,
        prior=cfg.prior,
        likelihood=cfg.likelihood,
        progress=cfg.progress,
        build=True if cfg.get("build") else None,
    )
    path = write_metrics(metrics, out)
    concepts = write_concepts(metrics["per_concept"], out.with_name("concepts.parquet"))
    plot = plot_metrics([metrics], out.with_name("eval.png"))
    log.info("wrote %s, %s and %s", path, concepts, plot)
    brief = {k: metrics[k] for k in ("checkpoint", "step", "split", "negatives", "episodes")}
    print(
        json.dumps(
            {
                **brief,
                "model": metrics["model"],
                "oracles": metrics["oracles"],
                "metrics": str(path),
                "concepts": str(concepts),
            },
            indent=2,
        )
    )


def _plan(cfg: DictConfig, *, models: bool) -> list:
    """The sweep's runs, each config checked (with `models`, each configuration's model
    built: torch), its test options and the bank."""
    from curi.models.baselines import parse_baselines, plan_runs

    c = OmegaConf.to_container(cfg, resolve=True)
    plan = parse_baselines(
        c["configs"], only=c["only"], splits=c["splits"], render_device=c["render_device"]
    )
    kw = {
        "seeds": c["seeds"],
        "negatives": c["negatives"],
        "embed_dim": c["embed_dim"],
        "device": c["device"],
        "data_dir": c["data_dir"],
        "out_dir": Path(cfg.output_dir),
        "models": models,
    }
    runs = plan_runs(plan, bank=c["bank"], train=c["train"], **kw)
    check_eval_options(
        episodes=c["episodes"],
        seed=c["eval_seed"],
        batch_size=c["eval_batch_size"],
        num_workers=0,
        chunk=1,
    )
    check_bank(c["bank"], c["data_dir"], build=True if c["build"] else None)
    return runs


def _check_baselines(cfg: DictConfig) -> None:
    _plan(cfg, models=False)
    job_launcher(Path(cfg.output_dir), threads=cfg.threads, wait=cfg.wait)


@validate.checked(_check_baselines)
def baselines(cfg: DictConfig) -> None:
    """Train and test the paper's baseline configurations; one table beside the paper's."""
    from curi.models.baselines import run_baselines

    c = OmegaConf.to_container(cfg, resolve=True)
    out = Path(cfg.output_dir)
    # every run checked before the bank opens (run_baselines then sets each run's bank config)
    runs = _plan(cfg, models=True)
    launcher = job_launcher(out, threads=c["threads"], wait=c["wait"])
    with sweep_lock(out):  # one command at a time in a sweep's folder; each job locks its run
        bank = open_bank(
            c["bank"], c["data_dir"], progress=c["progress"], build=True if c["build"] else None
        )
        table = run_baselines(
            runs,
            bank=bank,
            out_dir=out,
            episodes=c["episodes"],
            eval_seed=c["eval_seed"],
            oracles=c["oracles"],
            prior=c["prior"],
            likelihood=c["likelihood"],
            num_workers=c["train"].get("num_workers", 0),
            batch_size=c["eval_batch_size"],
            force=c["force"],
            progress=c["progress"],
            launcher=launcher,
        )
        if table is None:
            print(f"jobs submitted; once they end: curi baselines collect output_dir={out}")
            return
        _write_baselines(table, out)


def _check_collect(cfg: DictConfig) -> None:
    from curi.models.baselines import check_sweep_folder

    check_sweep_folder(cfg.output_dir)


@validate.checked(_check_collect)
def baselines_collect(cfg: DictConfig) -> None:
    """Rebuild the table of a `curi baselines` sweep from its folders (after SLURM jobs end)."""
    from curi.models.baselines import collect_baselines

    out = Path(cfg.output_dir)
    with sweep_lock(out):
        _write_baselines(collect_baselines(out), out)


def _write_baselines(table: dict, out: Path) -> None:
    """Write the table (JSON, Markdown, chart) and print it; runs that failed or are missing
    end the command with exit status 1 after the table is written."""
    from curi.models.baseline_table import write_baseline_table
    from curi.models.plots import plot_baselines

    paths = write_baseline_table(table, out)
    if table["rows"]:
        paths.append(plot_baselines(table, out / "baselines.png"))
    log.info("wrote %s", ", ".join(map(str, paths)))
    print(paths[1].read_text())
    bad = table["incomplete"]
    if bad:
        failed = sum(r["status"] == "failed" for r in bad)
        print(
            f"curi baselines: {len(bad)} of {len(bad) + len(table['runs'])} runs not finished "
            f"({failed} failed, {len(bad) - failed} missing); listed in {paths[1]}",
            file=sys.stderr,
        )
        sys.exit(1)


def _check_difficulty(cfg: DictConfig) -> None:
    from curi.models.difficulty_report import check_options

    check_options(episodes=cfg.episodes_per_concept, max_concepts=cfg.max_concepts)
    validate.splits(OmegaConf.to_container(cfg.splits, resolve=True))
    if not isinstance(cfg.threshold, str):  # easy: AP >= threshold, so in [0, 1]
        validate.number(cfg.threshold, "threshold", low=0, high=1)
    more = cfg.checkpoints
    if more is not None and not isinstance(more, DictConfig):  # a list: .values() failed
        shown = list(more) if OmegaConf.is_list(more) else more
        raise ConfigError(
            f"checkpoints={shown!r} is not a mapping; give {{split name: checkpoint, ...}}"
        )
    for path in [cfg.checkpoint, *(cfg.checkpoints or {}).values()]:
        if path:
            check_checkpoint(path)
    check_bank_of(cfg)


@validate.checked(_check_difficulty)
def difficulty(cfg: DictConfig) -> None:
    """Predict which test concepts are hard (unobserved local structures) and check it."""
    from curi.models.checkpoint import check_checkpoint_bank, load_checkpoint
    from curi.models.difficulty_report import difficulty_report, write_report

    def _split_name(split) -> str:
        """The name of a split as `curi difficulty` takes it: a rule mapping's ``name``, a split
        file's own name (so a checkpoint trained on that file matches it), else the string."""
        if isinstance(split, dict):
            return split["name"]
        path = Path(split).expanduser()
        if split.endswith(".json") and path.is_file():
            try:
                return json.loads(path.read_text())["name"]
            except (OSError, ValueError, KeyError, TypeError):
                return split  # make_split says what is wrong with the file
        return split

    c = OmegaConf.to_container(cfg, resolve=True)
    bank = open_bank_from_config(cfg)
    splits = c["splits"] if isinstance(c["splits"], list) else [c["splits"]]
    checkpoints = dict(c.get("checkpoints") or {})
    if c.get("checkpoint"):
        ckpt, _ = load_checkpoint(c["checkpoint"])
        sp = ckpt["config"]["split"]
        name = _split_name(sp)
        check_checkpoint_bank(ckpt["config"]["bank"], bank)
        if name not in [_split_name(s) for s in splits]:
            splits.append(sp)
        checkpoints[name] = c["checkpoint"]
    report = difficulty_report(
        bank,
        splits,
        checkpoints=checkpoints,
        predictors=c["predictors"],
        episodes=c["episodes_per_concept"],
        max_concepts=c["max_concepts"],
        negatives=c["negatives"],
        threshold=c["threshold"],
        prior=c["prior"],
        likelihood=c["likelihood"],
        seed=c["seed"],
        device=c["device"],
        negative_sampler=c.get("negative_sampler", "paper"),
    )
    settings = {
        "bank": bank.config["name"],
        "episodes_per_concept": c["episodes_per_concept"],
        "max_concepts": c["max_concepts"],
        "threshold": c["threshold"],
        "negatives": c["negatives"],
        "seed": c["seed"],
    }
    paths = write_report(report, cfg.output_dir, settings=settings)
    for p in paths:
        log.info("wrote %s", p)
    print((Path(cfg.output_dir) / "auc.md").read_text())

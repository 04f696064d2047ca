"""The `curi lm` commands: `curi lm` lists them, `curi lm export` writes CURI episodes as an
lm-evaluation-harness task folder, `curi lm compare` puts a model's lm-eval results beside the
oracles on the same documents."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curi import validate
from curi.core_cli import check_bank_of, open_bank_from_config, required
from curi.errors import ConfigError
from curi.paths import output_path

__all__ = ["lm", "lm_compare", "lm_export", "lm_rules"]

log = logging.getLogger("curi")

_SUBCOMMANDS = ("export", "compare", "rules")


def lm(cfg: DictConfig) -> None:
    """List the `curi lm` subcommands."""
    from curi.options import summary

    lines = ["usage: curi lm <subcommand> [key=value ...] [--help]", "", "subcommands:"]
    lines += [f"  lm {name:<10} {summary(f'lm_{name}')}" for name in _SUBCOMMANDS]
    lines += ["", "`curi lm <subcommand> --help` lists its options."]
    print("\n".join(lines))


def _splits(cfg: DictConfig) -> list:
    """The splits of an export: ``split=`` alone when given, else ``splits=``."""
    one = cfg.get("split")
    return [one] if one is not None else list(cfg.splits)


def _rule(spec):
    """A split of `_splits` as `curi.splits.make_split` takes it: a name, or a plain dict."""
    return spec if isinstance(spec, str) else OmegaConf.to_container(spec, resolve=True)


def _check_export(cfg: DictConfig) -> None:
    from curi.models.lm.lengths import check_tokenizer

    required(cfg, "out", "the task folder to write", "curi lm export out=DIR")
    output_path(cfg.out, folder=True)
    validate.integer(cfg.n, "n", low=1, high=validate.MAX_EPISODES)
    validate.seed(cfg.seed)
    validate.integer(cfg.eval_scenes, "eval_scenes", low=0, high=10**6)
    if cfg.get("max_length") is not None:
        validate.integer(cfg.max_length, "max_length", low=1, high=10**8)
        if cfg.get("tokenizer") is None:
            raise ConfigError("max_length= needs tokenizer=PATH (the model's tokenizer)")
    if cfg.get("tokenizer") is not None:
        check_tokenizer(cfg.tokenizer)
    if cfg.get("episodes"):
        from curi.export import check_episode_file

        check_episode_file(cfg.episodes)
    else:
        validate.splits(OmegaConf.to_container(cfg.splits, resolve=True))
    check_bank_of(cfg)


@validate.checked(_check_export)
def lm_export(cfg: DictConfig) -> None:
    """Write an lm-evaluation-harness task folder: one task per split and kind of negatives."""
    from curi.models.lm.export import export_tasks
    from curi.models.lm.lengths import check_context
    from curi.splits import make_split

    bank = open_bank_from_config(cfg)
    specs = [] if cfg.get("episodes") else _splits(cfg)
    splits = [make_split(bank, _rule(s)) for s in specs]
    path = export_tasks(
        bank,
        splits,
        cfg.out,
        negatives=list(cfg.negatives),
        n=int(cfg.n),
        seed=int(cfg.seed),
        subset=cfg.subset,
        wording=cfg.wording,
        answers=list(cfg.answers),
        eval_scenes=int(cfg.eval_scenes),
        progress=cfg.progress,
        episode_file=cfg.get("episodes"),
        negative_sampler=cfg.get("negative_sampler", "paper"),
    )
    report = {"tasks": str(Path(cfg.out)), "manifest": str(path)}
    if cfg.get("tokenizer") is not None:
        max_length = cfg.get("max_length")
        max_length = None if max_length is None else int(max_length)
        report["lengths"] = check_context(cfg.out, cfg.tokenizer, max_length)
    print(json.dumps(report, indent=1))


def _check_compare(cfg: DictConfig) -> None:
    from curi.models.lm.compare import read_results
    from curi.models.lm.task import read_manifest

    required(cfg, "results", "lm-eval's output folder", "curi lm compare results=DIR tasks=DIR")
    required(cfg, "tasks", "the task folder of `curi lm export`", "curi lm compare tasks=DIR")
    if cfg.get("out"):
        output_path(cfg.out, folder=False)
    read_manifest(cfg.tasks)
    read_results(cfg.results)
    validate.seed(cfg.seed)
    check_bank_of(cfg)


@validate.checked(_check_compare)
def lm_compare(cfg: DictConfig) -> None:
    """A model's lm-eval results beside the strong, weak, prior-only and random oracles."""
    from curi.atomic import write_text
    from curi.models.lm.compare import compare, format_table

    bank = open_bank_from_config(cfg)
    rows = compare(
        bank,
        cfg.tasks,
        cfg.results,
        seed=int(cfg.seed),
        prior=cfg.prior,
        likelihood=cfg.likelihood,
    )
    table = format_table(rows)
    if cfg.get("out"):
        write_text(cfg.out, json.dumps(rows, indent=1) + "\n")
    print(table)


def _check_rules(cfg: DictConfig) -> None:
    from curi.renderers.rules_cli import check_rule_config

    required(cfg, "out", "the task folder to write", "curi lm rules out=DIR")
    validate.integer(cfg.max_gen_toks, "max_gen_toks", low=1, high=10**4)
    validate.splits(OmegaConf.to_container(cfg.splits, resolve=True))
    check_rule_config(cfg)


@validate.checked(_check_rules)
def lm_rules(cfg: DictConfig) -> None:
    """Write the rule-query tasks of `curi rules` as lm-evaluation-harness generation tasks."""
    from curi.models.lm.rules import export_rule_tasks_lm
    from curi.renderers.rules_cli import rule_task_options
    from curi.splits import make_split

    n, tokens = int(cfg.n), int(cfg.max_gen_toks)
    options = rule_task_options(cfg)
    bank = open_bank_from_config(cfg)
    specs = _splits(cfg)
    splits = [make_split(bank, _rule(s)) for s in specs]
    path = export_rule_tasks_lm(
        bank,
        splits,
        cfg.out,
        n=n,
        instructions=cfg.instructions,
        max_gen_toks=tokens,
        progress=cfg.progress,
        subset=cfg.subset,
        seed=int(cfg.seed),
        **options,
    )
    tasks = json.loads(path.read_text())["tasks"]
    docs = {k: v["documents"] for k, v in tasks.items()}
    report = {"tasks": str(Path(cfg.out)), "manifest": str(path), "documents": docs}
    print(json.dumps(report, indent=1))

"""Thin entry point of `curi rules`: compose config -> bank -> split -> `RuleTaskSampler` ->
task set on disk (structured and text) and its class mix, printed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import DictConfig

from curi import validate
from curi.core_cli import check_bank_of, open_bank_from_config, split_from_config
from curi.errors import ConceptError, ConfigError
from curi.paths import output_path, read_text

__all__ = ["check_rule_config", "read_rules", "rule_task_options", "rules"]

log = logging.getLogger("curi")


#: Rules files take the postfix form (as `ConceptBank.concepts` holds it); `curi split` prints
#: concepts in the readable form (`Concept.pretty`), which no parser reads back.
POSTFIX_HINT = (
    "rules are written in the postfix form, e.g. 'x color? blue = lambda S. exists=', not the "
    "readable form 'exists x in S: color(x) = blue' that curi split prints"
)


def read_rules(path: str | Path) -> list[str]:
    """Rule programs from a file, one per line (blank lines and ``#`` comments skipped), each
    checked by the parser. Programs are in the postfix form (`POSTFIX_HINT`).

    Raises:
        ConfigError: a missing file or one that is not a regular file (a FIFO would block the
            read), or none in it.
        ConceptError: a line that does not parse, naming the file and line.
    """
    from curi.concepts import parse

    if not isinstance(path, str | Path):  # rules=[...] on the command line: a list
        raise ConfigError(
            f"rules= takes the name of a file of rule programs, one a line, not {path!r}; "
            "write them to a file and give rules=FILE"
        )
    lines = read_text(path, "rules file").splitlines()
    out = []
    for n, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            parse(text)
        except ConceptError as e:
            hint = f"; {POSTFIX_HINT}" if any(c in text for c in "():,") else ""
            raise ConceptError(
                f"{path} line {n}: rule {text!r} does not parse: {e}{hint}"
            ) from None
        out.append(text)
    if not out:
        raise ConfigError(f"the rules file {path} holds no rule")
    return out


def rule_task_options(cfg: DictConfig) -> dict:
    """The `curi.tasks.RuleTaskSampler` options of a rule-task command's config (`curi rules`,
    `curi lm rules`), the rules file read."""
    return {
        "negatives": cfg.negatives,
        "hypotheses": cfg.hypotheses,
        "theta": cfg.theta,
        "rule_rate": cfg.rule_rate,
        "kinds": list(cfg.kinds),
        "scene_requests": cfg.scene_requests,
        "rules_per_kind": cfg.rules_per_kind,
        "context_rules": cfg.context_rules,
        "candidates": cfg.candidates,
        "rules": read_rules(cfg.rules) if cfg.rules else None,
        "prior": cfg.prior,
        "likelihood": cfg.likelihood,
    }


def check_rule_config(cfg: DictConfig) -> None:
    """Refuse the options of a rule-query task set that need no bank (`curi rules`, `curi lm
    rules`): the sampler's, the count, the output folder, the rules file, the bank."""
    from curi.tasks.sampler import check_rule_options

    keys = ("hypotheses", "theta", "rule_rate", "kinds", "scene_requests", "rules_per_kind")
    more = ("context_rules", "candidates", "prior", "likelihood")
    check_rule_options(**{k: cfg[k] for k in (*keys, *more)})
    validate.integer(cfg.n, "n", low=1, high=validate.MAX_EPISODES)
    validate.seed(cfg.seed)
    output_path(cfg.out, folder=True)
    if cfg.rules:
        read_rules(cfg.rules)
    check_bank_of(cfg)


@validate.checked(check_rule_config)
def rules(cfg: DictConfig) -> None:
    """Write a rule-query task set of a split (structured + text) and print its class mix."""
    from curi.renderers.text_export import export_rule_tasks
    from curi.tasks import RuleTaskSampler, format_mix

    n = int(cfg.n)
    options = rule_task_options(cfg)
    bank = open_bank_from_config(cfg)

    split = split_from_config(bank, cfg)
    sampler = RuleTaskSampler(bank, split, cfg.subset, seed=cfg.seed, size=max(n, 1), **options)
    paths = export_rule_tasks(sampler, Path(cfg.out), n=n, progress=cfg.progress)
    mix = json.loads(paths["mix"].read_text(encoding="utf-8"))
    print(format_mix(mix))
    print(json.dumps({k: str(v) for k, v in paths.items()}, indent=1))

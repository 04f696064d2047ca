"""The plan of a baseline sweep (`curi.models.baselines`): its configurations checked
(`parse_baselines`) and expanded into one run per configuration, split and seed with its
config and folder (`plan_runs`). A configuration is a prototypical network (the paper's), or
another learner of `curi.models.learners` (``learner: propose_verify``) run on the same
splits and test episodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from curi import validate
from curi.errors import ConfigError
from curi.models.config import RunConfig, build_model
from curi.paths import safe_name
from curi.presets import list_presets, load_preset

__all__ = ["Baseline", "BaselineRun", "parse_baselines", "plan_runs"]

_KEYS = ("name", "modality", "pooling", "alpha", "splits", "train", "learner", "default")


@dataclasses.dataclass(frozen=True)
class Baseline:
    """One configuration of the table.

    Attributes:
        name: its column in the table and its folder (``schema-relation_net``).
        modality: the renderer config (a ``conf/modality`` preset with overrides).
        pooling: the pooler config (a ``conf/pooling`` preset with overrides).
        alpha: weight of the concept-decoding loss (paper: 0, or 1 "with language").
        splits: names of ``conf/split`` presets it is trained and tested on.
        train: train settings of this configuration over the shared ones.
        learner: the learner and its checked options (`curi.models.learners`):
            ``{"name": "protonet"}``, or e.g. ``propose_verify``'s, which trains with its own
            options instead of `pooling` and `train` (its `pooling` is its fallback's).
        default: part of the sweep when no configuration is named (``only``); False: run
            only when named.
    """

    name: str
    modality: dict
    pooling: dict
    alpha: float
    splits: tuple[str, ...]
    train: dict
    learner: dict = dataclasses.field(default_factory=lambda: {"name": "protonet"})
    default: bool = True

    @property
    def protonet(self) -> bool:
        """Whether this configuration is a prototypical network (else another learner)."""
        return self.learner["name"] == "protonet"


@dataclasses.dataclass(frozen=True)
class BaselineRun:
    """One training run of the sweep: a configuration on one split with one seed."""

    baseline: Baseline
    split: str
    seed: int
    run: RunConfig
    dir: Path


def _preset(group: str, spec, where: str, device: str | None) -> dict:
    """A ``conf/<group>`` preset named by `spec` (a name, or a mapping with ``name`` and
    overrides of the preset's options); `device`, when given, replaces a renderer's device."""
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        known = ", ".join(list_presets(group))
        raise ConfigError(
            f"{where}.{group} must be a name in conf/{group} ({known}) or a mapping with a name"
        )
    out = {**load_preset(group, spec["name"]), **spec}
    if device is not None and "device" in out:
        out["device"] = device
    return out


def _splits(splits, where: str) -> tuple[str, ...]:
    """`splits` (a name or a list of names of ``conf/split`` presets), checked, in order."""
    splits = [splits] if isinstance(splits, str) else splits
    known = list_presets("split")
    if not splits or not isinstance(splits, Sequence):
        raise ConfigError(f"{where} must be a list of split names ({', '.join(known)})")
    bad = [s for s in splits if s not in known]
    if bad:
        raise ConfigError(f"{where}: unknown splits {bad}; known: {', '.join(known)}")
    return tuple(dict.fromkeys(splits))


def _learner(c: Mapping, where: str) -> dict:
    """The configuration's learner (``learner``: a name in ``conf/learner`` or a mapping with a
    name and options over its preset), its options not yet checked (`_checked`); a learner
    other than the protonet takes neither ``pooling``, ``alpha`` nor ``train`` (its own
    options replace them)."""
    from curi.models.learners import LEARNERS

    learner = _preset("learner", c.get("learner", "protonet"), where, None)
    LEARNERS.get(learner["name"])  # an unknown name: OptionError naming the known ones
    if learner["name"] != "protonet":
        given = [k for k in ("pooling", "alpha", "train") if c.get(k) not in (None, 0, {})]
        if given:
            raise ConfigError(
                f"{where}: {', '.join(given)} configure a protonet, not learner="
                f"{learner['name']}; give its options in {where}.learner"
            )
    return learner


def _baseline(i: int, c, render_device: str | None) -> Baseline:
    from curi.models.learners import FALLBACK_POOLING

    where = f"configs[{i}]"
    if not isinstance(c, Mapping):
        raise ConfigError(f"{where} must be a mapping with keys {', '.join(_KEYS)}; got {c!r}")
    unknown = sorted(set(c) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; valid: {', '.join(_KEYS)}")
    learner = _learner(c, where)
    protonet = learner["name"] == "protonet"
    modality = _preset(
        "modality", c.get("modality", None if protonet else "schema"), where, render_device
    )
    if not protonet and modality["name"] != "schema":
        raise ConfigError(f"{where}: learner={learner['name']} reads modality schema only")
    pooling = _preset("pooling", c.get("pooling") if protonet else FALLBACK_POOLING, where, None)
    alpha = float(validate.number(c.get("alpha", 0.0), f"{where}.alpha", low=0, high=1e6))
    splits = _splits(c.get("splits"), f"{where}.splits")
    train_over = dict(c.get("train") or {})
    if "alpha" in train_over:
        raise ConfigError(f"{where}: give alpha as {where}.alpha, not in its train settings")
    kind = pooling["name"] if protonet else learner["name"]
    name = c.get("name") or f"{modality['name']}-{kind}" + (f"-alpha{alpha:g}" if alpha else "")
    safe_name(str(name), f"{where}.name")
    default = c.get("default", True)
    if not isinstance(default, bool):
        raise ConfigError(f"{where}.default must be true or false, got {default!r}")
    return Baseline(str(name), modality, pooling, alpha, splits, train_over, learner, default)


def parse_baselines(
    configs: Sequence[Mapping],
    *,
    only: Sequence[str] | None = None,
    splits: Sequence[str] | None = None,
    render_device: str | None = None,
) -> list[Baseline]:
    """The configurations of a sweep, checked.

    Args:
        configs: mappings with ``modality`` and ``pooling`` (preset names, or mappings with a
            ``name`` and overrides), ``splits`` (names), optional ``alpha`` (default 0),
            ``name`` (default ``<modality>-<pooling>[-alpha<a>]``), ``train`` (settings of
            this configuration over the shared ones), ``learner`` (default ``protonet``; or
            ``propose_verify``, a name or a mapping with a name and its options, with neither
            pooling, alpha nor train: default name ``schema-propose_verify``) and ``default``
            (false: only run when named in `only`).
        only: keep these configurations (by name), in this order; None: every configuration
            but those marked ``default: false``.
        splits: run every configuration on these splits instead of its own.
        render_device: where image and sound scenes render (``cpu`` or ``cuda``), for every
            configuration whose modality has a device option.

    Raises:
        ConfigError: an unknown key, preset, split or name, a duplicate name, or no
            configuration at all.
    """
    if not configs or isinstance(configs, (str, Mapping)):
        raise ConfigError("configs must be a non-empty list of configurations")
    out = [_baseline(i, c, render_device) for i, c in enumerate(configs)]
    names = [b.name for b in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"configuration names must differ; repeated: {dup} (set name=)")
    if only is not None:
        missing = [n for n in only if n not in names]
        if missing:
            raise ConfigError(f"only: unknown configurations {missing}; known: {names}")
        out = [out[names.index(n)] for n in dict.fromkeys(only)]
    else:
        out = [b for b in out if b.default]
        if not out:
            raise ConfigError("every configuration is default: false; name some in only=")
    if splits is not None:
        out = [dataclasses.replace(b, splits=_splits(splits, "splits")) for b in out]
    return [_checked(b) for b in out]


def _checked(b: Baseline) -> Baseline:
    """`b` with its learner's options checked and completed (`curi.models.learners`): only for
    the configurations a sweep runs, as checking another learner's imports torch."""
    from curi.models.learners import learner_options

    opts = dict(b.learner)
    try:
        learner = learner_options(opts.pop("name"), opts)
    except ConfigError as e:
        raise ConfigError(f"configuration {b.name}: {e}") from None
    return dataclasses.replace(b, learner=learner)


def plan_runs(
    baselines: Sequence[Baseline],
    *,
    bank: Mapping,
    train: Mapping,
    out_dir: str | Path,
    seeds: Sequence[int] = (0,),
    negatives: str = "hard",
    embed_dim: int = 256,
    device: str = "auto",
    data_dir: str | Path | None = None,
    models: bool = True,
) -> list[BaselineRun]:
    """Every run of the sweep (configuration x split x seed) with its config checked and, with
    `models`, each configuration's model built once (torch), so a bad setting fails before the
    first run trains. Run folders: ``<out_dir>/runs/<name>/<split>/seed<seed>``.

    Raises:
        ConfigError: a bad train setting or seed; with `models`, a bad pooling or renderer
            option.
    """
    seeds = [validate.seed(s) for s in (seeds if isinstance(seeds, Sequence) else [seeds])]
    if not seeds:
        raise ConfigError("seeds must name at least one training seed")
    out = []
    # each split as its conf/split preset, as `curi train split=NAME` stores it (resumable)
    presets = {s: load_preset("split", s) for b in baselines for s in b.splits}
    for b in baselines:
        settings = {**dict(train), **b.train, "alpha": b.alpha}
        for split in b.splits:
            for seed in dict.fromkeys(seeds):
                run = RunConfig.from_mapping(
                    {
                        "bank": dict(bank),
                        "split": presets[split],
                        "negatives": negatives,
                        "modality": b.modality,
                        "pooling": b.pooling,
                        "train": settings,
                        "embed_dim": embed_dim,
                        "seed": seed,
                        "device": device,
                        "data_dir": None if data_dir is None else str(data_dir),
                    }
                )
                where = Path(out_dir) / "runs" / b.name / split / f"seed{seed}"
                out.append(BaselineRun(b, split, seed, run, where))
        if models and b.protonet:
            from curi.models.data import make_renderer

            build_model(out[-1].run, make_renderer(b.modality))  # options the model refuses
    return out

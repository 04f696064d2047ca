"""Training of the propose-and-verify learner (docs/learners.md): the proposer learns, by
teacher forcing, to write each training episode's concept (the shortest synonym among the
training concepts, in canonical form) from its support set; a held-out tenth of the training
concepts (whole synonym groups, the learner's own seeded draw) chooses the checkpoint and the
search settings. Validation and test concepts are never read."""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from curi import validate
from curi.atomic import atomic_path
from curi.concepts import parse
from curi.episodes import EpisodeSampler, EpisodeSpec
from curi.errors import ConfigError
from curi.models.program_decoder import ProgramProposer, scene_features
from curi.models.program_grammar import PAD, TOKENS, to_holes, to_sequence
from curi.models.propose_verify import ProposeVerify, Settings, load_universe
from curi.splits import Split, make_split

__all__ = [
    "LEARNER",
    "evaluate_learner",
    "fit_and_held",
    "load_checkpoint",
    "save_checkpoint",
    "target_texts",
    "train_propose_verify",
]

log = logging.getLogger(__name__)
LEARNER = "propose_verify"
HELD_FRACTION = 0.1
_ID = {t: i for i, t in enumerate(TOKENS)}


def fit_and_held(bank, split: Split, *, seed: int = 0) -> tuple[Split, Split]:
    """The split's training concepts cut into a fitting part and a held-out tenth, by whole
    synonym groups drawn with `seed`: two splits whose ``train`` (fit) and ``test`` (held)
    subsets `EpisodeSampler` reads. Training concepts in the synonym group of a val or test
    concept are left out (on every split whose test concepts are not its training ones)."""
    train = np.asarray(split.train, np.int64)
    all_groups = np.asarray(bank.groups)
    held_out = np.r_[np.asarray(split.val, np.int64), np.asarray(split.test, np.int64)]
    if not np.isin(train, held_out).all():
        # a training concept synonymous with a val or test concept would teach the learner to
        # write a held-out extension: dropped (instance_iid, whose train is its test, keeps all)
        train = train[~np.isin(all_groups[train], all_groups[held_out])]
    groups = all_groups[train]
    uniq = np.unique(groups)
    rng = np.random.default_rng([int(seed), 46])
    n_held = max(1, round(HELD_FRACTION * len(uniq))) if len(uniq) > 1 else 0
    held_groups = rng.choice(uniq, size=n_held, replace=False)
    held = np.isin(groups, held_groups)
    fit_ids, held_ids = train[~held], train[held]
    if len(fit_ids) == 0:
        raise ConfigError(f"split {split.name!r} has too few training concepts to hold a tenth out")
    empty = np.zeros(0, np.int64)
    fit = Split(f"{split.name}:pv_fit", fit_ids, empty, empty, empty)
    hold = Split(
        f"{split.name}:pv_held", fit_ids, held_ids, held_ids if len(held_ids) else fit_ids, empty
    )
    return fit, hold


def target_texts(bank, concepts: np.ndarray) -> dict[int, str]:
    """Each concept's training target: the shortest member of its synonym group among
    `concepts` (the first in the bank on a tie), so that synonyms share one target."""
    groups = np.asarray(bank.groups)
    best: dict[int, int] = {}
    for h in np.asarray(concepts).tolist():
        g = int(groups[h])
        if g not in best or bank.lengths[h] < bank.lengths[best[g]]:
            best[g] = h
    return {int(h): bank.concepts[best[int(groups[h])]] for h in np.asarray(concepts).tolist()}


def _targets(texts: list[str], holes: bool) -> torch.Tensor:
    seqs = [(to_holes if holes else to_sequence)(parse(t).tokens()) for t in texts]
    out = torch.full((len(seqs), max(len(s) for s in seqs)), _ID[PAD], dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor([_ID[t] for t in s])
    return out


def _batch(bank, eps: dict, targets: dict[int, str], holes: bool):
    ids = eps["support_ids"]  # (B, S)
    sc = bank.scenes
    feats, mask = scene_features(sc.n_objects[ids.reshape(-1)], sc.props[ids.reshape(-1)])
    shape = ids.shape
    feats = feats.reshape(*shape, *feats.shape[1:])  # (B, S, 5, F)
    mask = mask.reshape(*shape, mask.shape[-1])
    labels = torch.as_tensor(eps["support_labels"].astype(np.int64))
    tgt = _targets([targets[int(h)] for h in eps["concept"]], holes)
    return feats, mask, labels, tgt


def _held_loss(model, bank, held_sampler, targets, holes: bool, episodes: int) -> float:
    model.eval()
    with torch.no_grad():
        eps = held_sampler.stacked(0, episodes)
        loss = float(model.loss(*_batch(bank, eps, targets, holes)))
    model.train()
    return loss


def train_proposer(
    bank,
    fit: Split,
    hold: Split,
    *,
    negatives: str,
    steps: int,
    batch: int,
    lr: float,
    model: ProgramProposer,
    seed: int,
    evals: int = 4,
    held_episodes: int = 64,
) -> tuple[ProgramProposer, list[dict]]:
    """Train `model` for `steps` steps on episodes of the fitting concepts; keep the state with
    the lowest teacher-forced loss on held-out episodes (checked `evals` times)."""
    torch.manual_seed(seed)
    sampler = EpisodeSampler(bank, fit, "train", negatives, seed=seed, size=steps * batch)
    held = EpisodeSampler(bank, hold, "test", negatives, seed=seed, size=held_episodes)
    targets = target_texts(bank, np.r_[fit.train, hold.test])
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    best = (
        _held_loss(model, bank, held, targets, model.holes, held_episodes),
        copy.deepcopy(model.state_dict()),
    )
    history = [{"step": 0, "held_loss": best[0]}]
    every = max(1, steps // max(evals, 1))
    t0 = time.perf_counter()
    model.train()
    for s in range(steps):
        loss = model.loss(
            *_batch(bank, sampler.stacked(s * batch, (s + 1) * batch), targets, model.holes)
        )
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (s + 1) % every == 0 or s + 1 == steps:
            hl = _held_loss(model, bank, held, targets, model.holes, held_episodes)
            history.append(
                {
                    "step": s + 1,
                    "loss": loss.item(),
                    "held_loss": hl,
                    "seconds": time.perf_counter() - t0,
                }
            )
            log.info("propose_verify step %d loss %.3f held %.3f", s + 1, loss.item(), hl)
            if hl < best[0]:
                best = (hl, copy.deepcopy(model.state_dict()))
    model.load_state_dict(best[1])
    return model.eval(), history


def hit_mass(learner: ProposeVerify, bank, sampler: EpisodeSampler) -> dict:
    """Mean posterior mass on the true concept's extension (synonyms count as right), the
    share of episodes whose extension survives, and the fallback rate, on `sampler`'s
    episodes (held-out training concepts)."""
    mass, hits, falls = [], [], []
    sc = bank.scenes
    for i in range(len(sampler)):
        e = sampler[i]
        support = {"n_objects": sc.n_objects[e.support_ids], "props": sc.props[e.support_ids]}
        hyps = learner.hypotheses(support, e.support_labels.astype(bool))
        truth = np.asarray(bank.truth_words[e.concept])
        m = 0.0
        if hyps is not None:
            same = (hyps.words == truth[None, :]).all(1)
            m = float(hyps.weights[same].sum())
        mass.append(m)
        hits.append(m > 0)
        falls.append(learner.stats.fallback != "")
    return {
        "hit_mass": float(np.mean(mass)),
        "recall": float(np.mean(hits)),
        "fallback_rate": float(np.mean(falls)),
    }


#: The search settings `select_settings` tries: how sketches are decoded (samples at a
#: temperature, or beam search), how fast a sketch's later fillings fall behind
#: (`Settings.fill_decay`) and whether a quarter of K goes to repairs of near-misses.
SELECT_GRID: tuple[dict, ...] = tuple(
    {"decode": decode, "temperature": temp, "fill_decay": decay, "repair": rep}
    for decode, temp in (("sample", 0.7), ("sample", 1.0), ("beam", 1.0))
    for decay in (1.0, 4.0)
    for rep in (False, True)
)


def select_settings(
    learner: ProposeVerify, bank, spec: EpisodeSpec, grid: tuple[dict, ...] = SELECT_GRID
) -> tuple[Settings, list[dict]]:
    """The search settings with the highest hit mass on `spec`'s episodes (of held-out
    training concepts) among `grid` (K stays the one asked for)."""
    sampler = EpisodeSampler.from_spec(bank, spec)
    base, table = learner.settings, []
    for point in grid:
        learner.settings = replace(base, **point)
        learner._cache = None
        table.append({**point, **hit_mass(learner, bank, sampler)})
    best = max(table, key=lambda r: (r["hit_mass"], r["recall"]))
    learner.settings = replace(base, **{k: best[k] for k in grid[0]})
    return learner.settings, table


def train_propose_verify(
    bank,
    split,
    *,
    negatives: str = "hard",
    steps: int = 200,
    batch: int = 16,
    lr: float = 3e-3,
    dim: int = 64,
    layers: int = 2,
    holes: bool = True,
    settings: Settings | None = None,
    select: bool = True,
    select_episodes: int = 50,
    fallback_steps: int = 500,
    seed: int = 0,
) -> dict:
    """Train the learner on `split`'s training concepts and return its checkpoint (a dict:
    the proposer's config and weights, the chosen settings and what they were chosen on, the
    fallback protonet (`curi.models.protonet_fallback.train_fallback`: `fallback_steps` steps
    of `batch` episodes on the same fitting concepts, chosen on `select_episodes` held-out
    episodes; None with 0 steps), and the bank, split, negatives and modality the learner is
    for)."""
    from curi.models.protonet_fallback import train_fallback

    steps = validate.integer(steps, "learner.steps", low=0)
    batch = validate.integer(batch, "learner.batch", low=1)
    sp = split if isinstance(split, Split) else make_split(bank, split)
    fit, hold = fit_and_held(bank, sp, seed=seed)
    torch.manual_seed(seed)
    model = ProgramProposer(dim=dim, layers=layers, holes=holes)
    history: list[dict] = []
    if steps:
        model, history = train_proposer(
            bank,
            fit,
            hold,
            negatives=negatives,
            steps=steps,
            batch=batch,
            lr=lr,
            model=model,
            seed=seed,
        )
    bins = bank.config.get("location_bins", "spec")
    learner = ProposeVerify(
        model, load_universe(bank.path, bins), negatives=negatives, settings=settings
    )
    table: list[dict] = []
    if select and len(hold.test):
        spec = EpisodeSpec(hold, "test", negatives, seed=seed + 1, size=select_episodes)
        _, table = select_settings(learner, bank, spec)
    fallback = train_fallback(
        bank,
        hold,
        negatives=negatives,
        steps=fallback_steps,
        batch=batch,
        seed=seed,
        val_episodes=select_episodes,
    )
    return {
        "learner": LEARNER,
        "modality": "schema",
        "bank": dict(bank.config),
        "bank_path": str(bank.path),
        "split": sp.name,
        "negatives": negatives,
        "location_bins": bins,
        "proposer": model.config(),
        "state_dict": model.state_dict(),
        "settings": asdict(learner.settings),
        "selection": table,
        "history": history,
        "held_concepts": int(len(hold.test)),
        "fit_concepts": int(len(fit.train)),
        "fallback": fallback,
    }


def save_checkpoint(ckpt: dict, path: str | Path) -> Path:
    """Write a checkpoint atomically."""
    with atomic_path(path) as tmp:
        torch.save(ckpt, tmp)
    return Path(path)


def load_checkpoint(path: str | Path) -> dict:
    """A propose_verify checkpoint (ConfigError when it is missing or another learner's)."""
    from curi.models.checkpoint import _safe_load

    p = Path(path)
    try:
        ckpt = _safe_load(p)  # tensors and plain values only: unpickling runs no code
    except OSError as e:
        raise ConfigError(f"cannot read the checkpoint {p}: {e}") from None
    if not isinstance(ckpt, dict) or ckpt.get("learner") != LEARNER:
        raise ConfigError(f"{p} is not a {LEARNER} checkpoint")
    return ckpt


def learner_from_checkpoint(
    ckpt: dict, bank_dir: str | Path, *, fallback="checkpoint", **overrides
) -> ProposeVerify:
    """The learner a checkpoint holds, its universe read from the bank's ``scenes/`` only;
    `overrides` replace settings (e.g. ``k``). `fallback`: ``"checkpoint"`` (the protonet the
    checkpoint holds, if any), None (none: scores 0 where nothing survives nor nearly), or a
    `Predict`."""
    if isinstance(fallback, str):
        if fallback != "checkpoint":
            raise ConfigError(f"fallback must be 'checkpoint', None or a predict, not {fallback!r}")
        fallback = None
        if ckpt.get("fallback"):
            from curi.models.protonet_fallback import fallback_from_checkpoint

            fallback = fallback_from_checkpoint(ckpt["fallback"])
    model = ProgramProposer(**ckpt["proposer"])
    model.load_state_dict(ckpt["state_dict"])
    settings = Settings(**{**ckpt["settings"], **overrides})
    universe = load_universe(bank_dir, ckpt["location_bins"])
    return ProposeVerify(
        model, universe, negatives=ckpt["negatives"], settings=settings, fallback=fallback
    )


def train_run(
    bank, split, options: dict, *, negatives: str, seed: int, out_dir: str | Path
) -> dict:
    """`curi train learner=propose_verify`: train on `split`, write the checkpoint to
    ``out_dir/checkpoints/best.pt`` and ``summary.json`` beside it; returns the summary."""
    import json

    search = {k: options[k] for k in ("k", "max_errors", "samples", "rounds")}
    t0 = time.perf_counter()
    ckpt = train_propose_verify(
        bank,
        split,
        negatives=negatives,
        steps=options["steps"],
        batch=options["batch"],
        lr=options["lr"],
        dim=options["dim"],
        layers=options["layers"],
        holes=options["holes"],
        settings=Settings(**search, seed=seed),
        select_episodes=options["select_episodes"],
        fallback_steps=options["fallback_steps"],
        seed=seed,
    )
    out = Path(out_dir)
    path = save_checkpoint(ckpt, out / "checkpoints" / "best.pt")
    summary = {
        "learner": LEARNER,
        "checkpoint": str(path),
        "split": ckpt["split"],
        "negatives": negatives,
        "settings": ckpt["settings"],
        "selection": ckpt["selection"],
        "history": ckpt["history"],
        "fit_concepts": ckpt["fit_concepts"],
        "held_concepts": ckpt["held_concepts"],
        "fallback": _fallback_summary(ckpt["fallback"]),
        "seconds": time.perf_counter() - t0,
    }
    with atomic_path(out / "summary.json") as tmp:
        tmp.write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def _fallback_summary(entry: dict | None) -> dict | None:
    """What the summary says of the fallback protonet (None: none trained)."""
    if not entry:
        return None
    keys = ("steps", "best_step", "best_map")
    return {"pooling": entry["config"]["pooling"]["name"], **{k: entry[k] for k in keys}}


def is_checkpoint(path: str | Path) -> bool:
    """Whether `path` holds a propose_verify checkpoint (not a protonet's)."""
    from curi.models.checkpoint import _safe_load

    try:
        ckpt = _safe_load(Path(path))
    except (OSError, ConfigError):
        return False
    return isinstance(ckpt, dict) and ckpt.get("learner") == LEARNER


def evaluate_run(
    path: str | Path,
    bank,
    spec: EpisodeSpec | None = None,
    *,
    oracles: bool = True,
    progress: bool = False,
) -> dict:
    """`curi eval` of a propose_verify checkpoint: the learner answers
    `oracles.model_score`'s ``predict`` on `spec`'s episodes (None: 1,000 test episodes of
    seed 0 of the checkpoint's split and negatives), with the oracles of the same episodes;
    also ``fallback_rate`` (episodes without an exact survivor: answered by near-misses, the
    checkpoint's fallback protonet or 0s), ``fallback_model_rate`` (those answered by the
    protonet: no near-miss either) and ``map_answered``, the mAP of the episodes with an
    exact survivor.

    Raises:
        ConfigError: the checkpoint is another bank's, or `spec` asks for other negatives
            than the checkpoint was trained with.
    """
    from curi.models.checkpoint import check_checkpoint_bank

    ckpt = load_checkpoint(path)
    check_checkpoint_bank(ckpt["bank"], bank, path)
    if spec is None:
        spec = EpisodeSpec(ckpt["split"], "test", ckpt["negatives"], size=1000)
    if spec.negatives != ckpt["negatives"]:
        raise ConfigError(
            f"the checkpoint {path} was trained with negatives={ckpt['negatives']}, not "
            f"{spec.negatives}; drop negatives= or give a checkpoint trained so"
        )
    asked = _split_name(spec.split)
    if asked != ckpt["split"]:
        raise ConfigError(
            f"the checkpoint {path} was trained on split {ckpt['split']}, not {asked}: its "
            "proposer learned that split's training concepts; drop split= or train on it"
        )
    learner = learner_from_checkpoint(ckpt, bank.path)
    got = evaluate_learner(learner, bank, spec, oracles=oracles, progress=progress)
    return {
        "learner": LEARNER,
        "checkpoint": str(path),
        **got,
        "settings": learner.checkpoint_settings(),
        "fallback": _fallback_summary(ckpt.get("fallback")),
    }


def evaluate_learner(
    learner: ProposeVerify, bank, spec: EpisodeSpec, *, oracles: bool = True, progress=False
) -> dict:
    """A learner's metrics on `spec`'s episodes (`oracles.model_score`'s ``predict`` answered
    by `learner`), with the oracles of the same episodes (`oracles`): the split row of
    `score_arrays`, and ``fallback_rate`` (episodes without an exact survivor),
    ``fallback_model_rate`` (answered by the fallback protonet: no near-miss either),
    ``map_answered`` (the mAP of the others), ``recall_at_k`` (episodes whose concept's
    extension is among the survivors: read here, from the bank, never by the learner) and
    ``ms_per_episode`` (median time of an episode's two answers)."""
    from curi.oracles.model_score import model_predictions, score_arrays

    sampler = EpisodeSampler.from_spec(bank, spec)
    truth = np.asarray(bank.truth_words)
    how: list[str] = []
    hit: list[bool] = []
    seconds: list[float] = []
    query_s = [0.0]

    def predict(support, labels, targets):
        t0 = time.perf_counter()
        out = learner.predict(support, labels, targets)
        dt = time.perf_counter() - t0
        if len(seconds) == len(how):  # the query set: a new episode, its search runs here
            e = sampler[len(how)]
            hyps = learner.hypotheses(support, np.asarray(labels).astype(bool))  # cached
            hit.append(hyps is not None and bool((hyps.words == truth[e.concept]).all(1).any()))
            how.append(learner.stats.fallback)  # "": an exact survivor
            query_s[0] = dt
        else:  # the evaluation set of the same episode
            seconds.append(query_s[0] + dt)
        return out

    kw = {
        "subset": spec.subset,
        "negatives": spec.negatives,
        "seed": spec.seed,
        "negative_sampler": spec.negative_sampler,
    }
    pred = model_predictions(predict, bank, spec.split, episodes=spec.size, progress=progress, **kw)
    scores = {"query_scores": pred["query_scores"], "eval_scores": pred["eval_scores"]}
    got = score_arrays(bank, spec.split, **scores, oracles=oracles, **kw)
    fell = np.array(how) != ""
    return {
        **got["split"][0],
        "fallback_rate": float(fell.mean()),
        "fallback_model_rate": float((np.array(how) == "model").mean()),
        "map_answered": _map_of(bank, spec, pred["eval_scores"], ~fell),
        "recall_at_k": float(np.mean(hit)),
        "ms_per_episode": 1000 * float(np.median(seconds)),
    }


def _split_name(split) -> str:
    """The name of a split given as a name, a `Split` or a split config."""
    if isinstance(split, str):
        return split
    if isinstance(split, Split):
        return split.name
    return str(dict(split).get("name"))


def _map_of(bank, spec: EpisodeSpec, eval_scores: np.ndarray, keep: np.ndarray) -> float | None:
    """mAP of `spec`'s episodes in `keep` (those the learner answered itself; None when none)."""
    from curi.bits import unpack_rows
    from curi.oracles.eval_set import EvalSet
    from curi.oracles.metrics import average_precision_batch

    if not keep.any():
        return None
    sampler = EpisodeSampler.from_spec(bank, spec.replace(size=len(keep)))
    concepts = np.array([sampler[int(i)].concept for i in np.flatnonzero(keep)])
    ev = EvalSet.from_bank(bank)
    ap = average_precision_batch(eval_scores[keep], unpack_rows(ev.rows[concepts], len(ev)))
    return float(np.nanmean(ap))

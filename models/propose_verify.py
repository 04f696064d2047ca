"""The propose-and-verify learner (docs/learners.md): a support-conditioned decoder proposes
concept programs, each is checked exactly on the 25 support scenes, and scenes are scored by
the posterior predictive over the survivors, weighted as the strong oracle weighs (CURI paper,
section 3). It answers as `oracles.model_score.Predict` does and reads only the bank's scenes."""

from __future__ import annotations

import heapq
import math
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from curi import validate
from curi.concepts import Concept, parse
from curi.errors import ConfigError
from curi.executor import BitScenes
from curi.models.program_decoder import ProgramProposer, scene_features
from curi.models.program_search import (
    Hypotheses,
    fill_holes,
    repairs,
    support_errors,
    universe_filter,
    weigh,
)
from curi.oracles.model_score import TargetCache
from curi.scenes import MIN_OBJECTS, records_to_props

__all__ = ["MAX_K", "ProposeVerify", "Settings", "load_universe", "scene_arrays"]

MAX_K = 65_536  # the most programs one episode may execute


@dataclass
class Settings:
    """How the learner searches; chosen on held-out training concepts and kept in the
    checkpoint.

    Attributes:
        k: distinct complete programs executed on the support set per episode, counted after
            hole filling and repair.
        temperature: sampling temperature of the decoder (0: greedy, one sketch).
        repair: spend a quarter of `k` on one-token changes of the near-misses.
        fill_decay: how fast a sketch's later fillings fall behind other sketches (the r-th
            filling costs fill_decay * log(1 + r) in log-probability).
        decode: ``sample`` (the greedy sketch, then samples at `temperature`, `samples` a
            round for at most `rounds` rounds) or ``beam`` (beam search: about the k most
            probable sketches, best first; `temperature` unused).
        max_errors: support scenes a near-miss may label wrong (fallback when none survives).
        samples: sketches sampled per round; rounds: at most this many rounds.
        seed: seeds each episode's sampling together with its support set.
    """

    k: int = 64
    temperature: float = 1.0
    repair: bool = True
    fill_decay: float = 1.0
    decode: str = "sample"
    max_errors: int = 2
    samples: int = 32
    rounds: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        self.k = validate.integer(self.k, "learner.k", low=1, high=MAX_K)
        self.temperature = validate.number(self.temperature, "learner.temperature", low=0.0)
        self.fill_decay = validate.number(self.fill_decay, "learner.fill_decay", low=0.0)
        self.decode = validate.choice(self.decode, "learner.decode", ("sample", "beam"))
        self.max_errors = validate.integer(self.max_errors, "learner.max_errors", low=0, high=25)
        self.samples = validate.integer(self.samples, "learner.samples", low=1, high=MAX_K)
        self.rounds = validate.integer(self.rounds, "learner.rounds", low=1, high=1000)
        self.seed = validate.seed(self.seed)


def scene_arrays(x) -> tuple[np.ndarray, np.ndarray]:
    """(n_objects, props) of scenes given as records (``{"objects": [...]}``, as
    `oracles.model_score` hands them by default) or as a mapping with those two arrays.

    Raises:
        ConfigError: scenes in another form, or records curi cannot read.
    """
    if isinstance(x, dict) and "props" in x:
        return np.asarray(x["n_objects"]), np.asarray(x["props"])
    try:
        return records_to_props(list(x), min_objects=MIN_OBJECTS)
    except (ValueError, TypeError, KeyError) as e:
        raise ConfigError(f"the propose_verify learner reads scene records: {e}") from None


def load_universe(bank_dir: str | Path, location_bins: str) -> BitScenes:
    """The bank's scenes as bit planes, read from its ``scenes/`` arrays alone."""
    d = Path(bank_dir) / "scenes"
    n_obj = np.load(d / "n_objects.npy", mmap_mode="r")
    props = np.load(d / "props.npy", mmap_mode="r")
    return BitScenes.from_arrays(np.asarray(n_obj), np.asarray(props), location_bins=location_bins)


@dataclass
class EpisodeStats:
    """What the search did on one support set."""

    programs: int = 0
    survivors: int = 0
    hypotheses: int = 0
    fallback: str = ""  # "", "near_miss", "model" or "none"
    found: list[str] = field(default_factory=list)


class ProposeVerify:
    """The learner: ``predict(support, support_labels, targets) -> (T,) scores``.

    Args:
        proposer: the trained (or untrained) `ProgramProposer`, or a support-free source of
            sketches (`models.program_enumerate.GrammarProposer`, the grammar-only reference).
        universe: the bank's scenes as bit planes (`load_universe`): |h| and N of the
            likelihood, and the bank's filter (more than 10 scenes, fewer than 10 %).
        negatives: ``hard`` or ``easy``: which size-principle form weighs the survivors.
        settings: the search's `Settings`.
        fallback: a `Predict` used when no program survives nor nearly survives (None: every
            score 0).
    """

    def __init__(
        self,
        proposer: ProgramProposer,
        universe: BitScenes,
        *,
        negatives: str = "hard",
        settings: Settings | None = None,
        fallback=None,
    ) -> None:
        self.proposer = proposer.eval() if isinstance(proposer, torch.nn.Module) else proposer
        self.universe = universe
        self.negatives = validate.choice(negatives, "negatives", ("hard", "easy"))
        self.settings = settings or Settings()
        self.fallback = fallback
        self.stats = EpisodeStats()
        self._cache: tuple[bytes, Hypotheses | None, EpisodeStats] | None = None
        # the evaluation set comes as one object for every episode: its planes are kept
        self._target_planes = TargetCache(self._target_bits)

    def predict(self, support, support_labels, targets) -> np.ndarray:
        """Posterior predictive of each target scene given the labelled support set."""
        labels = np.asarray(support_labels).astype(bool).reshape(-1)
        hyps = self.hypotheses(support, labels)
        if hyps is None:
            if self.fallback is not None:
                return np.asarray(self.fallback(support, support_labels, targets), np.float64)
            return np.zeros(len(scene_arrays(targets)[0]))
        return hyps.predictive(self._target_planes(targets))

    def _target_bits(self, targets) -> BitScenes:
        n_obj, props = scene_arrays(targets)
        return BitScenes.from_arrays(n_obj, props, location_bins=self.universe.location_bins)

    def hypotheses(self, support, labels: np.ndarray) -> Hypotheses | None:
        """The weighed survivors of one support set (None: nothing survives nor nearly)."""
        n_obj, props = scene_arrays(support)
        if len(n_obj) != len(labels):
            raise ConfigError(f"{len(n_obj)} support scenes but {len(labels)} labels")
        key = props.tobytes() + n_obj.tobytes() + labels.tobytes()
        if self._cache is not None and self._cache[0] == key:
            self.stats = self._cache[2]
            return self._cache[1]
        bits = BitScenes.from_arrays(n_obj, props, location_bins=self.universe.location_bins)
        seed = zlib.crc32(key) ^ self.settings.seed
        programs, errors = self.search(n_obj, props, labels, bits, seed=seed)
        stats = EpisodeStats(programs=len(programs), survivors=int((errors == 0).sum()))
        hyps = self._weigh([c for c, e in zip(programs, errors, strict=True) if e == 0], labels)
        if hyps is None and len(errors) and errors.min() <= self.settings.max_errors:
            best = errors.min()
            near = [c for c, e in zip(programs, errors, strict=True) if e == best]
            hyps = self._weigh(near, labels)
            stats.fallback = "near_miss" if hyps is not None else ""
        if hyps is None:
            stats.fallback = "model" if self.fallback is not None else "none"
        else:
            stats.hypotheses = len(hyps)
            stats.found = [c.postfix() for c in hyps.programs[:5]]
        self.stats = stats
        self._cache = (key, hyps, stats)
        return hyps

    def _weigh(self, programs: list[Concept], labels: np.ndarray) -> Hypotheses | None:
        keep, words = universe_filter(programs, self.universe)
        if not keep:
            return None
        kept = [programs[i] for i in keep]
        return weigh(kept, words, self.universe.num_scenes, labels, self.negatives)

    def search(self, n_obj, props, labels, bits: BitScenes, *, seed: int):
        """Distinct programs proposed for the support set (at most k) and their numbers of
        wrongly labelled support scenes.

        K is spent best first over (sketch, filling) pairs: the r-th filling of a sketch of
        log-probability lp comes at lp - fill_decay * log(1 + r), so a likely sketch gets
        more of its fillings tried than an unlikely one gets its first."""
        s = self.settings
        budget = s.k if not s.repair else max(1, math.ceil(0.75 * s.k))
        sketches = self._sketches(n_obj, props, labels, budget, seed)
        scores = _value_scores(n_obj, props, labels)
        fills = [fill_holes(t, scores, budget) for t, _ in sketches]
        queue = [(-lp, i, 0) for i, (_, lp) in enumerate(sketches)]
        heapq.heapify(queue)
        seen: dict[str, Concept] = {}
        while queue and len(seen) < budget:
            _, i, r = heapq.heappop(queue)
            c = parse(fills[i][r])  # every proposal parses: a failure here is a bug
            seen.setdefault(c.postfix(), c)
            if r + 1 < len(fills[i]):
                lp = sketches[i][1] - s.fill_decay * math.log(r + 2)
                heapq.heappush(queue, (-lp, i, r + 1))
        programs = list(seen.values())
        errors = support_errors(programs, bits, labels)
        if s.repair and len(programs) < s.k:
            extra = self._repairs(programs, errors, seen, s.k - len(programs))
            programs += extra
            errors = np.concatenate([errors, support_errors(extra, bits, labels)])
        return programs, errors

    def _sketches(self, n_obj, props, labels, budget: int, seed: int):
        """Distinct decoded sequences and their log-probabilities, most probable first: the
        greedy one, then samples, round after round until `budget` of them or a round brings
        none new."""
        s = self.settings
        if not isinstance(self.proposer, ProgramProposer):
            return self.proposer.sketches(budget)  # support-free: the same for every episode
        feats, mask = scene_features(n_obj, props)
        lab = torch.as_tensor(labels.astype(np.int64))
        if s.decode == "beam":
            return self.proposer.beam(feats, mask, lab, width=budget)
        gen = torch.Generator().manual_seed(int(seed))
        out: dict[tuple[str, ...], float] = {}
        for r in range(1 if s.temperature == 0 else s.rounds + 1):
            n, temp = (1, 0.0) if r == 0 else (s.samples, s.temperature)
            got = self.proposer.sample(feats, mask, lab, n=n, temperature=temp, generator=gen)
            before = len(out)
            for toks, lp in got:
                key = tuple(toks)
                out[key] = max(out.get(key, -math.inf), lp)
            if len(out) >= budget or (r > 0 and len(out) == before):
                break
        ranked = sorted(out.items(), key=lambda kv: -kv[1])[:budget]
        return [(list(t), lp) for t, lp in ranked]

    def _repairs(self, programs, errors, seen: dict, room: int) -> list[Concept]:
        """Up to `room` new programs one token away from the near-misses, fewest errors first."""
        order = np.lexsort(([len(c) for c in programs], errors))
        out: list[Concept] = []
        for i in order:
            if not 0 < errors[i] <= self.settings.max_errors or len(out) >= room:
                break
            for text in repairs(programs[i].postfix()):
                if text not in seen and len(out) < room:
                    seen[text] = c = parse(text)
                    out.append(c)
        return out

    def checkpoint_settings(self) -> dict:
        """The settings as plain values (for a checkpoint)."""
        return asdict(self.settings)


def _value_scores(n_obj: np.ndarray, props: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """How much more often each constant's value occurs in the positive support scenes than in
    the negative ones (share of scenes holding it): the order in which holes are filled."""
    from curi.concepts import NUMBERS
    from curi.scenes import COLORS, MATERIALS, SHAPES, SIZES

    vocabs = (SHAPES, COLORS, MATERIALS, SIZES, NUMBERS, NUMBERS)
    present: list[set[str]] = []
    for i in range(len(n_obj)):
        vals = set()
        for k in range(int(n_obj[i])):
            for j, vocab in enumerate(vocabs):
                vals.add(vocab[int(props[i, k, j]) - (1 if j >= 4 else 0)])
        present.append(vals)
    lab = np.asarray(labels, bool)
    n_pos, n_neg = max(int(lab.sum()), 1), max(int((~lab).sum()), 1)
    out: dict[str, float] = {}
    for vals, y in zip(present, lab.tolist(), strict=True):
        for v in vals:
            out[v] = out.get(v, 0.0) + (1 / n_pos if y else -1 / n_neg)
    return out

"""Rule-query tasks (docs/rules.md, "Tasks"; after Conceptual SCAN): an episode's support
set, optionally rules asserted in the context, and requests (query scenes and rule requests
``implies`` / ``equals`` / ``excludes`` r) answered by the Bayesian oracle with a reply and an
M/D qualifier; task i is a pure function of the sampler's arguments and i."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from curi import validate
from curi.episodes import EpisodeSampler, EpisodeSpec
from curi.errors import ConfigError
from curi.posterior import LIKELIHOODS, Posterior, hypothesis_bits
from curi.prior import PRIORS
from curi.rng import derive_rng
from curi.splits import Split
from curi.tasks.draw import Pools, classify, draw_candidates, draw_context_rule, pick_balanced
from curi.tasks.replies import RULE_KINDS, Hypotheses, RuleRows, compress_groups, relation

__all__ = ["HYPOTHESES", "Request", "RuleTask", "RuleTaskSampler", "check_rule_options"]

HYPOTHESES = ("strong", "weak")


@dataclass(frozen=True)
class Request:
    """One request and the oracle's reply.

    Attributes:
        kind: ``scene``, ``implies``, ``equals`` or ``excludes``.
        id: the scene id (scene requests), else None.
        rule: the rule's canonical program (rule requests), else None.
        label: the hidden concept's own answer (1 / 0): a scene's label, or whether the
            relation holds for the hidden concept.
        reply: ``"1"``, ``"0"`` or ``"?"``; qualifier: ``"M"`` or ``"D"``.
        p: the posterior mass of the answer 1.
    """

    kind: str
    id: int | None
    rule: str | None
    label: int
    reply: str
    qualifier: str
    p: float

    def to_dict(self) -> dict:
        head = (
            {"kind": "scene", "id": self.id}
            if self.kind == "scene"
            else {"kind": self.kind, "rule": self.rule}
        )
        return {
            **head,
            "label": self.label,
            "reply": self.reply,
            "qualifier": self.qualifier,
            "p": round(self.p, 6),
        }


@dataclass(frozen=True)
class RuleTask:
    """One rule-query task: context (support examples and asserted rules) and requests.

    Attributes:
        index: the task's index in its sampler.
        concept: the hidden concept's bank index; concept_text its canonical program.
        support_ids, support_labels: (S,) the context's examples.
        context_rules: asserted ``(kind, rule)`` pairs (kind is ``implies``).
        requests: the requests with the oracle's replies.
        worlds: the answers of H_D to the requests, one int per distinct answer pattern (bit j:
            the answer to request j), which is all the consistency metric needs.
        num_hypotheses: |H_D|, the hypotheses consistent with the context.
    """

    index: int
    concept: int
    concept_text: str
    support_ids: np.ndarray
    support_labels: np.ndarray
    context_rules: tuple[tuple[str, str], ...]
    requests: tuple[Request, ...]
    worlds: tuple[int, ...]
    num_hypotheses: int
    bank: object = field(repr=False, compare=False, default=None)

    def to_dict(self) -> dict:
        """The structured form (one JSON line of a task set;
        docs/rules.md, "The structured form")."""
        return {
            "index": self.index,
            "concept": self.concept_text,
            "concept_index": self.concept,
            "support": [
                {"id": int(i), "label": int(y)}
                for i, y in zip(self.support_ids, self.support_labels, strict=True)
            ],
            "context_rules": [{"kind": k, "rule": r} for k, r in self.context_rules],
            "requests": [r.to_dict() for r in self.requests],
            "worlds": list(self.worlds),
            "num_hypotheses": self.num_hypotheses,
        }


def check_rule_options(
    *,
    hypotheses: str,
    theta: float,
    rule_rate: float,
    kinds: Sequence[str],
    scene_requests: int,
    rules_per_kind: int,
    context_rules: int,
    candidates: int,
    prior: str,
    likelihood: str,
) -> dict:
    """The options of `RuleTaskSampler` that need no bank, checked (the numbers as ints and
    floats, `kinds` as a tuple); cheap, so `curi rules` checks them before opening the bank.

    Raises:
        ConfigError: an unknown option or a value out of range, naming the key.
    """
    validate.choice(hypotheses, "hypotheses", HYPOTHESES)
    validate.choice(prior, "prior", PRIORS)
    validate.choice(likelihood, "likelihood", LIKELIHOODS)
    kinds = tuple(kinds)
    for k in kinds:
        validate.choice(k, "kinds", RULE_KINDS)
    if len(set(kinds)) != len(kinds):
        raise ConfigError(f"kinds must not repeat, got {list(kinds)}")
    return {
        "kinds": kinds,
        "theta": validate.number(theta, "theta", low=0.5, high=1.0, open_low=True),
        "rule_rate": validate.number(rule_rate, "rule_rate", low=0.0, high=1.0),
        "scene_requests": validate.integer(scene_requests, "scene_requests", low=0, high=1000),
        "rules_per_kind": validate.integer(rules_per_kind, "rules_per_kind", low=0, high=100),
        "context_rules": validate.integer(context_rules, "context_rules", low=0, high=16),
        "candidates": validate.integer(candidates, "candidates", low=1, high=1000),
    }


class RuleTaskSampler:
    """Rule-query tasks of one subset of a split: ``sampler[i]`` is task i.

    Task i is episode i of ``EpisodeSampler(bank, split, subset, negatives, seed)`` (its
    support set is the context, its query scenes the ordinary requests) plus, at `rule_rate`,
    an asserted rule and rule requests, all answered by the oracle over `hypotheses` with the
    prior and likelihood of the strong oracle (CURI paper, section 3; docs/rules.md,
    "Hypotheses and the posterior").

    Args:
        bank: a `ConceptBank`.
        split: a `Split` or a split name.
        subset: ``train``, ``val`` or ``test``.
        negatives: ``hard`` or ``easy`` (the episode's, and the size principle's form).
        seed: the seed.
        hypotheses: ``strong`` (H = every concept of the bank) or ``weak`` (the split's
            training concepts).
        theta: induction threshold of `1 D` / `0 D` in (0.5, 1]; above 2/3 the oracle's
            replies are consistent on sets of 3 (docs/rules.md, "Replies").
        rule_rate: probability that each of `context_rules` rules is asserted in a task.
        kinds: rule request kinds to ask.
        scene_requests: query scenes asked per task (picked to balance the classes).
        rules_per_kind: rule requests per kind and task.
        context_rules: the most rules asserted in one task.
        candidates: candidate rules drawn per kind before balancing.
        rules: rule programs to ask about (and assert) instead of the bank's concepts.
        prior, likelihood: the posterior's (`curi.posterior.Posterior`).
        size: number of tasks (default: the episode sampler's, paper sizes).

    Raises:
        ConfigError: an unknown option or a value out of range.
        ConceptError: a rule of `rules` that does not parse.
    """

    def __init__(
        self,
        bank,
        split: Split | str,
        subset: str,
        *,
        negatives: str = "hard",
        seed: int = 0,
        hypotheses: str = "strong",
        theta: float = 0.9,
        rule_rate: float = 0.0,
        kinds: Sequence[str] = RULE_KINDS,
        scene_requests: int = 6,
        rules_per_kind: int = 2,
        context_rules: int = 1,
        candidates: int = 8,
        rules: Sequence[str] | None = None,
        prior: str = "log_linear",
        likelihood: str = "size_principle",
        size: int | None = None,
    ):
        c = check_rule_options(
            hypotheses=hypotheses,
            theta=theta,
            rule_rate=rule_rate,
            kinds=kinds,
            scene_requests=scene_requests,
            rules_per_kind=rules_per_kind,
            context_rules=context_rules,
            candidates=candidates,
            prior=prior,
            likelihood=likelihood,
        )
        self.kinds, self.theta, self.rule_rate = c["kinds"], c["theta"], c["rule_rate"]
        self.scene_requests, self.rules_per_kind = c["scene_requests"], c["rules_per_kind"]
        self.num_context_rules, self.candidates = c["context_rules"], c["candidates"]
        spec = EpisodeSpec(split, subset, negatives, seed=seed, size=size)  # checked here
        self.episodes = EpisodeSampler.from_spec(bank, spec)
        self.spec, split = self.episodes.spec, self.episodes.split
        self.bank, self.split, self.subset = bank, split, subset
        self.negatives, self.seed, self.hypotheses = negatives, self.episodes.seed, hypotheses
        self.prior, self.likelihood = prior, likelihood
        space = None if hypotheses == "strong" else split.train
        self.posterior = Posterior(
            bank, space, prior=prior, likelihood=likelihood, negatives=negatives
        )
        self.rules = self._user_rules(rules)
        self._tag = f"{split.name}:{subset}:{negatives}"

    def _user_rules(self, rules) -> tuple[RuleRows, list[str]] | None:
        if rules is None:
            return None
        rules = list(rules)
        if not rules:
            raise ConfigError("rules must name at least one rule program (or be None)")
        return RuleRows.of_programs(self.bank, rules, self._execute)

    def _execute(self, concepts) -> np.ndarray:
        """Truth rows of concepts that are not in the bank, on the bank's scene pool."""
        from curi.executor import execute

        return execute(concepts, self.bank.bit_scenes())

    def __len__(self) -> int:
        return len(self.episodes)

    def __repr__(self) -> str:
        return (
            f"RuleTaskSampler(split={self.split.name!r}, subset={self.subset!r}, "
            f"negatives={self.negatives!r}, hypotheses={self.hypotheses!r}, seed={self.seed}, "
            f"theta={self.theta}, rule_rate={self.rule_rate}, size={len(self)})"
        )

    def settings(self) -> dict:
        """The arguments that determine the tasks (recorded beside an exported set)."""
        return {
            "split": self.split.name,
            "subset": self.subset,
            "negatives": self.negatives,
            "seed": self.seed,
            "hypotheses": self.hypotheses,
            "theta": self.theta,
            "rule_rate": self.rule_rate,
            "kinds": list(self.kinds),
            "scene_requests": self.scene_requests,
            "rules_per_kind": self.rules_per_kind,
            "context_rules": self.num_context_rules,
            "candidates": self.candidates,
            "rules": None if self.rules is None else self.rules[1],
            "prior": self.prior,
            "likelihood": self.likelihood,
            "size": len(self),
        }

    # --- one task -----------------------------------------------------------------------------
    def __getitem__(self, i: int) -> RuleTask:
        ep = self.episodes[i]
        bank, h = self.bank, ep.concept
        rng = derive_rng(self.seed, f"rules:{self._tag}", ep.index)
        idx, w = self.posterior.posterior(ep.support_ids, ep.support_labels)
        hyps = Hypotheses(bank.truth_words, *compress_groups(bank.groups, idx, w))
        pools = Pools(bank, h, ep.support_ids[ep.support_labels == 1])
        asserted, removed = [], []
        for _ in range(self.num_context_rules):
            if rng.random() >= self.rule_rate:
                continue
            cands = self._context_candidates(rng, pools)
            j = draw_context_rule(rng, bank, h, hyps, cands)
            if j is not None:
                rule = cands.take([j])
                keep = hyps.answers(rule, "implies")[:, 0]
                removed.append(hyps.reps[~keep])
                hyps = hyps.restrict(keep)
                asserted.append(("implies", self._text(rule)[0]))
        num_h = len(idx)
        if removed:
            num_h -= int(np.isin(bank.groups[idx], bank.groups[np.concatenate(removed)]).sum())

        answers, requests = [], []
        self._scene_requests(rng, ep, hyps, answers, requests)
        self._rule_requests(rng, pools, h, hyps, answers, requests)
        order = rng.permutation(len(requests))
        requests = [requests[j] for j in order]
        ans = np.stack([answers[j] for j in order], 1) if answers else np.zeros((len(hyps), 0))
        return RuleTask(
            index=ep.index,
            concept=h,
            concept_text=ep.concept_text,
            support_ids=ep.support_ids,
            support_labels=ep.support_labels,
            context_rules=tuple(asserted),
            requests=tuple(requests),
            worlds=_worlds(ans),
            num_hypotheses=num_h,
            bank=bank,
        )

    def _scene_requests(self, rng, ep, hyps: Hypotheses, answers, requests) -> None:
        if not self.scene_requests:
            return
        bits = hypothesis_bits(self.bank, hyps.reps, ep.query_ids)  # (Q, G)
        replies = hyps.replies(bits.T, self.theta)
        picked = pick_balanced(rng, [f"{r} {q}" for r, q, _ in replies], self.scene_requests)
        for j in picked:
            answers.append(bits[j])
            requests.append(
                Request("scene", int(ep.query_ids[j]), None, int(ep.query_labels[j]), *replies[j])
            )

    def _rule_requests(self, rng, pools, h, hyps: Hypotheses, answers, requests) -> None:
        """`rules_per_kind` requests of each kind, picked among candidates classified on the
        sketch (all kinds in one batch), then answered exactly."""
        if not self.rules_per_kind or not self.kinds:
            return
        parts = self._candidates(rng, pools, hyps.reps)
        cands = RuleRows(parts[0].matrix, np.concatenate([p.index for p in parts]))
        kinds = [k for k, p in zip(self.kinds, parts, strict=True) for _ in range(len(p))]
        classes = classify(hyps, cands, kinds, self.theta)
        picked, start = [], 0
        for p in parts:
            picked += [
                start + j
                for j in pick_balanced(rng, classes[start : start + len(p)], self.rules_per_kind)
            ]
            start += len(p)
        chosen, kinds = cands.take(picked), [kinds[j] for j in picked]
        ans = hyps.answers(chosen, kinds)  # (G, K)
        own = np.flatnonzero(self.bank.groups[hyps.reps] == self.bank.groups[h])
        if len(own):  # the hidden concept's group answers for it
            truth = ans[own[0]]
        else:
            truth = relation(self.bank.truth_words, np.array([h]), chosen, kinds)[0]
        replies = hyps.replies(ans, self.theta)
        for j, text in enumerate(self._text(chosen)):
            answers.append(ans[:, j])
            requests.append(Request(kinds[j], None, text, int(truth[j]), *replies[j]))

    def _candidates(self, rng, pools, reps) -> list[RuleRows]:
        """Candidate rules for each kind of `kinds`."""
        if self.rules is not None:
            rows = self.rules[0]
            k = min(len(rows), self.candidates)
            return [
                rows.take(np.sort(rng.choice(len(rows), size=k, replace=False))) for _ in self.kinds
            ]
        return [
            RuleRows.of_bank(self.bank, c)
            for c in draw_candidates(rng, pools, self.kinds, reps, self.candidates)
        ]

    def _context_candidates(self, rng, pools) -> RuleRows:
        if self.rules is not None:
            rows = self.rules[0]
            k = min(len(rows), self.candidates)
            return rows.take(np.sort(rng.choice(len(rows), size=k, replace=False)))
        return RuleRows.of_bank(self.bank, pools.sample(rng, "maybe_implied", self.candidates))

    def _text(self, rules: RuleRows) -> list[str]:
        if self.rules is not None:
            return [self.rules[1][int(j)] for j in rules.index]
        return [self.bank.concepts[int(j)] for j in rules.index]


def _worlds(answers: np.ndarray) -> tuple[int, ...]:
    """Distinct rows of a (G, R) answer matrix as ints (bit j: request j), sorted."""
    if answers.shape[0] == 0:
        return ()
    if answers.shape[1] <= 63:
        codes = answers.astype(np.int64) @ (np.int64(1) << np.arange(answers.shape[1]))
        return tuple(np.unique(codes).tolist())
    weights = [1 << j for j in range(answers.shape[1])]
    return tuple(
        sorted({sum(w for w, a in zip(weights, row, strict=True) if a) for row in answers.tolist()})
    )

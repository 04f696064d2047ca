"""The rule-query oracle of `curi rules` as a generating lm-evaluation-harness model
(docs/lm.md, "Rule tasks"; docs/rules.md, "Replies"): it reads each prompt back into the
context's examples and rules and the request (the parser of `curi.renderers.text`, scenes
found in the bank by their contents), weighs the hypotheses as `curi.tasks.RuleTaskSampler`
does, and generates the reply and qualifier. Run on an exported rule task folder, lm-eval's
metrics are then `curi score`'s of the oracle: the check that the prompt holds the whole task
and that the task's metric code is right."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from lm_eval.api.model import LM

from curi.errors import ConfigError, TextFormatError
from curi.models.lm.oracle_lm import SceneIndex
from curi.models.lm.rules import read_rules_manifest

__all__ = ["RuleOracleLM"]


class RuleOracleLM(LM):
    """lm-eval model answering rule-query tasks with the oracle of `curi rules`.

    Args:
        bank: the `ConceptBank` the tasks were exported from.
        tasks: the rule task folder (`curi lm rules`): its manifest gives the oracle's
            settings (hypotheses, theta, prior, likelihood, negatives), the description to
            strip and per task its split (the weak hypotheses). Never its context tables.
        hypotheses, theta: another oracle than the one that wrote the gold replies (None: the
            manifest's), e.g. a weak oracle or another induction threshold.

    Raises:
        ConfigError, BankError: a folder of another curi version or bank, a bad option.
    """

    def __init__(
        self, bank, tasks: str | Path, *, hypotheses: str | None = None, theta: float | None = None
    ):
        from curi import validate
        from curi.tasks import HYPOTHESES

        super().__init__()
        self.bank, self.folder = bank, Path(tasks)
        self.manifest = read_rules_manifest(self.folder, bank)
        m = self.manifest
        self.hypotheses = validate.choice(hypotheses or m["hypotheses"], "hypotheses", HYPOTHESES)
        theta = m["theta"] if theta is None else theta
        self.theta = validate.number(theta, "theta", low=0.5, high=1.0, open_low=True)
        self.index = SceneIndex(bank)
        self._posteriors: dict = {}
        self._concepts = {s: i for i, s in enumerate(bank.concepts)}

    def posterior(self, task: str):
        """The `curi.posterior.Posterior` of a task's hypotheses."""
        from curi.posterior import Posterior
        from curi.splits.saved import load_split

        if task not in self._posteriors:
            info = self.manifest["tasks"].get(task)
            if info is None:
                raise ConfigError(f"task {task!r} is not a task of {self.folder}")
            space = None
            if self.hypotheses == "weak":
                space = load_split(self.bank, self.folder / info["split_file"]).train
            m = self.manifest
            self._posteriors[task] = Posterior(
                self.bank,
                space,
                prior=m["prior"],
                likelihood=m["likelihood"],
                negatives=m["negatives"],
            )
        return self._posteriors[task]

    def _rules(self, programs: list[str]):
        """`RuleRows` of rule programs (bank concepts by index, others executed)."""
        from curi.executor import execute
        from curi.tasks.replies import RuleRows

        known = [self._concepts.get(p, -1) for p in programs]
        if all(k >= 0 for k in known):
            return RuleRows.of_bank(self.bank, known)
        rows, _ = RuleRows.of_programs(
            self.bank, programs, lambda c: execute(c, self.bank.bit_scenes())
        )
        return rows

    def _parse(self, text: str) -> dict:
        from curi.renderers.text import parse_input

        m = self.manifest
        if not text.startswith(m["description"]) or not text.endswith(m["end"]):
            raise TextFormatError(
                f"a prompt of {self.folder} starts with its description and ends with "
                f"{m['end']!r}; got {text[-40:]!r}"
            )
        return parse_input(text[len(m["description"]) : len(text) - len(m["end"])])

    def answers(self, task: str, prompts: list[str]) -> list[tuple[str, str]]:
        """The oracle's ``(reply, qualifier)`` to each prompt of a task. The prompts of one
        context are answered together, their rule requests in one batch as the sampler
        answers a task's (the same sums of posterior weights, to the last bit)."""
        from curi.posterior import hypothesis_bits
        from curi.tasks.replies import Hypotheses, compress_groups

        parsed = [self._parse(p) for p in prompts]
        by_head: dict[str, list[int]] = {}
        for k, p in enumerate(prompts):
            by_head.setdefault(p.rpartition("\nrequest: ")[0], []).append(k)
        out: list = [None] * len(prompts)
        for ks in by_head.values():
            ctx = parsed[ks[0]]
            ids = self.index.find([{"objects": e["objects"]} for e in ctx["support"]])
            labels = np.array([e["label"] for e in ctx["support"]], np.int8)
            idx, w = self.posterior(task).posterior(ids, labels)
            hyps = Hypotheses(self.bank.truth_words, *compress_groups(self.bank.groups, idx, w))
            for rule in ctx["context_rules"]:  # an asserted rule: keep the hypotheses implying it
                hyps = hyps.restrict(hyps.answers(self._rules([rule["rule"]]), rule["kind"])[:, 0])
            scenes = [k for k in ks if parsed[k]["request"]["kind"] == "scene"]
            if scenes:
                q = self.index.find([{"objects": parsed[k]["request"]["objects"]} for k in scenes])
                bits = hypothesis_bits(self.bank, hyps.reps, q)  # (Q, G)
                for k, (r, qual, _) in zip(scenes, hyps.replies(bits.T, self.theta), strict=True):
                    out[k] = (r, qual)
            rules = [k for k in ks if parsed[k]["request"]["kind"] != "scene"]
            if rules:
                rows = self._rules([parsed[k]["request"]["rule"] for k in rules])
                kinds = [parsed[k]["request"]["kind"] for k in rules]
                ans = hyps.answers(rows, kinds)  # (G, K)
                for k, (r, qual, _) in zip(rules, hyps.replies(ans, self.theta), strict=True):
                    out[k] = (r, qual)
        return out

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Each request's generation: ``" <reply> <qualifier>"``, after the prompt's ``" =>"``."""
        by_task: dict[str, list[int]] = {}
        for k, r in enumerate(requests):
            by_task.setdefault(r.task_name, []).append(k)
        out = [""] * len(requests)
        for task, ks in by_task.items():
            for k, (reply, qual) in zip(
                ks, self.answers(task, [requests[k].args[0] for k in ks]), strict=True
            ):
                out[k] = f" {reply} {qual}"
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(
            "the rule oracle generates (rule tasks); CURI episode tasks: "
            "curi.models.lm.oracle_lm.OracleLM"
        )

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the rule oracle answers rule tasks only (generate_until)")

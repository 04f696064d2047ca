"""The Bayesian oracle as a language model for lm-evaluation-harness (CURI paper, section 3):
it reads each prompt back into scenes, weighs the hypotheses of the strong or weak oracle on
the support set, and answers with the predictive probability p of the query scene, as the
log-likelihoods ``log p`` (positive answer) and ``log(1 - p)`` (negative answer). Run on an
exported task folder, lm-eval's metrics are then the oracle's own: the check that the text
holds the whole episode and that the task's metric code is right."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from lm_eval.api.model import LM

from curi.errors import ConfigError, TextFormatError
from curi.models.lm.prompt import REQUEST, parse_prompt
from curi.models.lm.task import check_manifest, read_manifest
from curi.scenes import records_to_props
from curi.tasks.sampler import HYPOTHESES
from curi.validate import choice

__all__ = ["FLOOR", "OracleLM", "SceneIndex", "log_likelihoods"]

#: The log-likelihood given for a probability of exactly 0: below log of the smallest positive
#: double (about -745), so ranking and decision stay the oracle's, and no -inf reaches lm-eval.
FLOOR = -1000.0


def log_likelihoods(p: float) -> tuple[float, float]:
    """(ll of the negative answer, ll of the positive answer) for a predictive probability p:
    ``log(1 - p)`` and ``log p``, `FLOOR` where that probability is 0. Their difference (the
    task's score) increases with p and is positive exactly when p > 0.5."""
    pos = math.log(p) if p > 0.0 else FLOOR
    neg = math.log1p(-p) if p < 1.0 else FLOOR
    return neg, pos


class SceneIndex:
    """Finds a scene of a bank by its contents (objects' properties and locations, in order):
    the text of a scene names exactly these, and a concept's truth on a scene depends on them
    alone, so the found scene's truth row is the one executing every concept on the parsed
    record would give (tests/test_lm_export.py checks it)."""

    def __init__(self, bank):
        self.bank = bank
        scenes = bank.scenes
        n = np.asarray(scenes.n_objects, np.int8)[:, None]
        keys = np.ascontiguousarray(
            np.concatenate([n, np.asarray(scenes.props, np.int8).reshape(len(n), -1)], 1)
        )  # (N, 1 + 5 * 6)
        rows = keys.view(np.dtype((np.void, keys.shape[1]))).ravel().tolist()  # N bytes keys
        # inserted from the last scene down: of equal scenes, the lowest id stays
        self._ids = dict(zip(rows[::-1], range(len(rows) - 1, -1, -1), strict=True))

    def find(self, records: list[dict]) -> np.ndarray:
        """The scene ids of `records` (dicts with ``objects``).

        Raises:
            TextFormatError: a scene that is not in the bank.
        """
        n, props = records_to_props(records)
        keys = np.concatenate([n.astype(np.int8)[:, None], props.reshape(len(n), -1)], 1)
        out = np.empty(len(records), np.int64)
        for k, key in enumerate(keys):
            i = self._ids.get(key.tobytes())
            if i is None:
                raise TextFormatError(
                    f"scene {k} of the prompt is not a scene of the bank at "
                    f"{self.bank.path}; the oracle knows that bank's scenes"
                )
            out[k] = i
        return out


class OracleLM(LM):
    """lm-eval model answering with the strong or weak Bayesian oracle.

    Args:
        bank: the `ConceptBank` the tasks were exported from.
        tasks: the task folder (`curi lm export`): its manifest gives the wording and answer
            words, and per task the kind of negatives and the split (the weak oracle's
            hypotheses: the split's training concepts). Never its episode tables.
        policy: ``strong`` or ``weak``.
        prior, likelihood: the oracle's options (`curi.posterior.Posterior`).

    Raises:
        ConfigError, BankError: a task folder of another curi version or bank, a bad policy.
    """

    def __init__(
        self,
        bank,
        tasks: str | Path,
        *,
        policy: str = "strong",
        prior: str = "log_linear",
        likelihood: str = "size_principle",
    ):
        super().__init__()
        choice(policy, "policy", HYPOTHESES)  # the oracle's hypothesis set
        self.bank, self.folder, self.policy = bank, Path(tasks), policy
        self.manifest = read_manifest(self.folder)
        check_manifest(self.manifest, self.folder, bank)
        self.options = {"prior": prior, "likelihood": likelihood}
        self.index = SceneIndex(bank)
        self._oracles: dict = {}

    def oracle(self, task: str):
        """The oracle of a task (its negatives; for the weak policy, its split)."""
        from curi.oracles.oracle import Oracle
        from curi.splits.saved import load_split

        if task not in self._oracles:
            info = self.manifest["tasks"].get(task)
            if info is None:
                raise ConfigError(f"task {task!r} is not a task of {self.folder}")
            kw = {**self.options, "negatives": info["negatives"]}
            if self.policy == "strong":
                self._oracles[task] = Oracle.strong(self.bank, **kw)
            elif info["split_file"] is None:
                raise ConfigError(
                    f"task {task} has no split (exported from an episode file of a split this "
                    "bank cannot make): the weak oracle needs one; use policy='strong'"
                )
            else:
                split = load_split(self.bank, self.folder / info["split_file"])
                self._oracles[task] = Oracle.weak(self.bank, split, **kw)
        return self._oracles[task]

    def probabilities(self, task: str, contexts: list[str]) -> np.ndarray:
        """The oracle's p(y = 1) of the query scene of each prompt of a task."""
        from curi.posterior import predictive_on

        m = self.manifest
        opts = {"wording": m["wording"], "answers": m["answers"]}
        oracle = self.oracle(task)
        heads: dict[str, tuple] = {}
        out = np.empty(len(contexts))
        for k, text in enumerate(contexts):
            head, sep, scene = text.rpartition(REQUEST)
            if not sep:
                raise TextFormatError(f"prompt {k} of {task} does not end with a request")
            if head not in heads:  # the support set: parsed and weighed once per episode
                support, labels, _ = parse_prompt(text, **opts)
                idx, w = oracle.posterior(self.index.find(support), labels)
                heads[head] = (idx, w)
            _, _, query = parse_prompt("context:\n" + REQUEST + scene, **opts)
            idx, w = heads[head]
            out[k] = predictive_on(self.bank, idx, w, self.index.find([query]))[0]
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """``(log-likelihood, is greedy)`` of each request's answer (the continuation: the
        delimiter, then one of the two answer words)."""
        delim, answers = self.manifest["delimiter"], self.manifest["answers"]
        by_task: dict[str, dict[str, int]] = {}
        for r in requests:
            by_task.setdefault(r.task_name, {}).setdefault(r.args[0], len(by_task[r.task_name]))
        p = {t: self.probabilities(t, list(c)) for t, c in by_task.items()}
        out = []
        for r in requests:
            context, continuation = r.args
            word = continuation.removeprefix(delim)
            if word not in answers or not continuation.startswith(delim):
                raise TextFormatError(
                    f"answer {continuation!r} is not {delim!r} then one of {answers}"
                )
            ll = log_likelihoods(float(p[r.task_name][by_task[r.task_name][context]]))
            k = answers.index(word)
            out.append((ll[k], ll[k] >= ll[1 - k]))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the oracle answers CURI episode tasks only (loglikelihood)")

    def generate_until(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the oracle answers CURI episode tasks only (loglikelihood)")

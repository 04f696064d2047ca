"""The oracles of the compositionality gap (CURI paper, section 3) as policies over the core's
posterior: the strong oracle weighs every concept of the bank, the weak oracle only the split's
training concepts, and the prior-only oracle the strong oracle's hypotheses under the prior
alone (no support set: what any learner has before it sees an episode). The posterior maths
lives in `curi.posterior`; the random oracle (uniform scores) is drawn where episodes are
scored (`curi.oracles.gap`)."""

from __future__ import annotations

import multiprocessing as mp
from typing import TYPE_CHECKING

import numpy as np

from curi.bits import set_bits
from curi.oracles.metrics import FixedScores, oracle_scores
from curi.posterior import LIKELIHOODS, Posterior, posterior_predictive
from curi.prior import PRIORS

if TYPE_CHECKING:
    from curi.oracles.eval_set import EvalSet
    from curi.splits import Split

__all__ = ["LIKELIHOODS", "PRIORS", "Oracle", "PriorOnlyOracle", "posterior_predictive"]

_BYTE_BITS = (np.arange(256)[:, None] >> np.arange(8)) & 1  # (256, 8): the bits of each byte


class Oracle(Posterior):
    """An ideal learner: the posterior over a hypothesis set H_O chosen by a policy.

    ``Oracle.strong(bank)`` takes H_O = every concept of the bank (train and test together),
    ``Oracle.weak(bank, split)`` H_O = the split's training concepts; a weak oracle that finds no
    consistent training concept scores every scene 0. ``Oracle.prior_only(bank)`` weighs the
    strong oracle's H_O by the prior alone, whatever the support set. The constructor takes any
    H_O (see `curi.posterior.Posterior` for the prior, likelihood and negatives options).
    """

    @classmethod
    def strong(cls, bank, **options) -> Oracle:
        """The strong oracle: H_O is the whole bank."""
        return cls(bank, None, **options)

    @classmethod
    def weak(cls, bank, split: Split, **options) -> Oracle:
        """The weak oracle: H_O is the split's training concepts."""
        return cls(bank, split.train, **options)

    @classmethod
    def prior_only(cls, bank, **options) -> PriorOnlyOracle:
        """The prior-only oracle: H_O is the whole bank, the support set is ignored (the
        prior predictive ``p(y=1 | u) = sum_h prior(h) [h(u)]``; see `PriorOnlyOracle`)."""
        return PriorOnlyOracle(bank, None, **options)


class PriorOnlyOracle(Oracle):
    """The prior predictive: the posterior given an EMPTY support set, whatever support it is
    handed, so code that scores oracles episode by episode scores it unchanged.

    Its posterior is the normalised prior over H_O (computed once); the likelihood and
    negatives options are accepted (as for the other oracles) and have no effect. Scores are
    the same for every episode, so `predictive` caches them per scene of the bank and
    `eval_average_precision` its AP per concept.

    Args:
        bank, hypotheses, prior, likelihood, negatives: as `curi.posterior.Posterior`.
    """

    def __init__(self, bank, hypotheses: np.ndarray | None = None, **options):
        super().__init__(bank, hypotheses, **options)
        logw = self.log_prior[self.hypotheses]
        w = np.exp(logw - logw.max())
        self._w = w / w.sum()
        for a in (self._w, self.hypotheses):  # handed out by every `posterior` call: read-only
            a.setflags(write=False)
        self._tables: np.ndarray | None = None  # (B * 256,) prior mass of each concept byte
        self._cache = np.full(bank.num_scenes, np.nan)  # predictive of the scenes seen so far
        self._eval: tuple | None = None  # (eval set, its `FixedScores`, concept -> AP)

    def posterior(
        self, support_ids: np.ndarray, support_labels: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(every hypothesis of H_O, its normalised prior): the support set is ignored."""
        return self.hypotheses, self._w

    def predict(
        self, support_ids: np.ndarray, support_labels: np.ndarray, scene_ids: np.ndarray
    ) -> np.ndarray:
        """The prior predictive of each scene of `scene_ids` (the support set is ignored)."""
        return self.predictive(scene_ids)

    def predictive(self, scene_ids: np.ndarray) -> np.ndarray:
        """(len(scene_ids),) prior predictive ``sum_h prior(h) [h(u)]`` of each scene u, each
        scene computed once: its scene-major row is read one byte (8 concepts) at a time and
        each byte scored by a 256-entry table of those concepts' prior mass."""
        ids = np.asarray(scene_ids, np.int64)
        missing = np.unique(ids[np.isnan(self._cache[ids])])
        if len(missing):
            from curi.oracles.loops import byte_terms

            row_bytes = np.ascontiguousarray(self.bank.truth_by_scene, "<u8").view(np.uint8)
            terms = byte_terms(row_bytes, missing, self._byte_tables())  # (k, B)
            self._cache[missing] = terms.sum(1)
        return self._cache[ids]

    def eval_average_precision(self, ev: EvalSet, concept: int) -> float:
        """The AP on the evaluation set `ev` of the prior predictive against `concept`'s
        ground truth, as `curi.oracles.metrics.oracle_average_precision` scores the other
        oracles (the same scores, ties compared to 12 decimals); computed once per concept.
        The evaluation set's scores are computed once (a constant ranking of its scenes)."""
        if self._eval is None or self._eval[0] is not ev:
            groups = np.asarray(self.bank.groups)
            scores = FixedScores(oracle_scores(ev, self.hypotheses, self._w, groups))  # (M,)
            self._eval = (ev, scores, {})
        _, scores, done = self._eval
        concept = int(concept)
        if concept not in done:
            done[concept] = scores.of_positives(set_bits(ev.rows[concept]))
        return done[concept]

    def share_cache(self) -> None:
        """Keep the per-scene predictive computed so far, and from now on, in memory shared
        with the processes forked after this call: a pool's workers then compute each scene
        once between them (two that compute one at once write the same value)."""
        shared = np.frombuffer(mp.RawArray("d", len(self._cache)))
        shared[:] = self._cache
        self._cache = shared

    def _byte_tables(self) -> np.ndarray:
        """(B * 256,) the prior mass of each byte value of each of the B bytes of a
        scene-major row (8 concepts each), byte after byte."""
        if self._tables is None:
            n = len(self.bank)
            w = np.zeros(-(-n // 8) * 8)
            w[self.hypotheses] = self._w
            # multiply-sum, not `@`: BLAS would wake its threads in every worker of the gap report
            self._tables = (w.reshape(-1, 1, 8) * _BYTE_BITS).sum(-1).reshape(-1)  # (B * 256,)
        return self._tables

"""The posterior over a hypothesis set given a support set (CURI paper, section 3,
"Compositionality Gap"): a log-linear or PCFG prior, a size-principle or consistency likelihood,
and the posterior predictive. Consistent hypotheses are found with bit operations on the bank's
scene-major truth matrix (`consistent_words`), so only they are ever weighed; episodes use the
same bit-AND for their alternates (paper Appendix D)."""

from __future__ import annotations

import numpy as np

from curi.bits import pack_rows, unpack_rows

__all__ = [
    "LIKELIHOODS",
    "PRIORS",
    "Posterior",
    "consistent_words",
    "hypothesis_bits",
    "posterior_predictive",
    "predictive_on",
]

PRIORS = ("log_linear", "pcfg")
LIKELIHOODS = ("size_principle", "consistent")
NEGATIVES = ("hard", "easy")


def consistent_words(
    bank, support_ids: np.ndarray, labels: np.ndarray, mask: np.ndarray | None = None
) -> np.ndarray:
    """Packed set of the hypotheses consistent with labelled scenes: every positive true and
    every negative false under h.

    Args:
        bank: a `ConceptBank` (its scene-major ``truth_by_scene`` rows are read).
        support_ids: (S,) scene ids.
        labels: (S,) labels, 1 (or True) for positives.
        mask: (ceil(H / 64),) packed hypotheses to restrict to (None: the whole bank).

    Returns:
        (ceil(H / 64),) uint64 words: bit h set when concept h is consistent (and in `mask`).
    """
    rows = np.asarray(bank.truth_by_scene[np.asarray(support_ids)])  # (S, ceil(H / 64))
    lab = np.asarray(labels, dtype=bool)
    # all positives (an episode's alternates): no boolean indexing, it would copy the rows
    pos, neg = (rows, rows[:0]) if lab.all() else (rows[lab], rows[~lab])
    words = np.bitwise_and.reduce(pos, 0) if len(pos) else pack_rows(np.ones(len(bank), bool))
    if len(neg):
        words &= ~np.bitwise_or.reduce(neg, 0)
    if mask is not None:
        words &= mask
    return words


class Posterior:
    """The posterior over a hypothesis set H_O of a bank's concepts given a support set D.

    ``p(h | D) ∝ prior(h) lik(D | h)`` for h in H_O consistent with D (every positive true and
    every negative false under h), zero otherwise; ``p(y=1 | u, D) = sum_h p(h | D) [h(u)]``.
    When no hypothesis is consistent every score is 0.

    Args:
        bank: a `ConceptBank`.
        hypotheses: concept indices of H_O (None: the whole bank).
        prior: ``log_linear`` (exp(-0.2 len(h)), paper Appendix B.3) or ``pcfg`` (the draw's
            PCFG probability).
        likelihood: ``size_principle`` (hard negatives: ``-n+ log|h| - n- log(N - |h|)``;
            easy: ``-n+ log|h|``) or ``consistent`` (1 for every consistent h).
        negatives: ``hard`` or ``easy``: which size-principle form applies.

    Raises:
        ValueError: an unknown prior, likelihood or negatives option.
    """

    def __init__(
        self,
        bank,
        hypotheses: np.ndarray | None = None,
        *,
        prior: str = "log_linear",
        likelihood: str = "size_principle",
        negatives: str = "hard",
    ):
        if prior not in PRIORS:
            raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")
        if likelihood not in LIKELIHOODS:
            raise ValueError(f"likelihood must be one of {LIKELIHOODS}, got {likelihood!r}")
        if negatives not in NEGATIVES:
            raise ValueError(f"negatives must be 'hard' or 'easy', got {negatives!r}")
        self.bank = bank
        n = len(bank)
        member = np.zeros(n, bool)
        member[np.arange(n) if hypotheses is None else np.asarray(hypotheses, np.int64)] = True
        self.hypotheses = np.flatnonzero(member)
        self.mask = pack_rows(member)  # (ceil(H / 64),)
        self.likelihood = likelihood
        self.negatives = negatives
        self.log_prior = np.asarray(
            bank.log_prior if prior == "log_linear" else bank.pcfg_logprob, np.float64
        )
        counts = np.asarray(bank.counts, np.float64)
        self._log_size = np.log(counts)
        self._log_rest = np.log(bank.num_scenes - counts)

    def consistent(self, support_ids: np.ndarray, support_labels: np.ndarray) -> np.ndarray:
        """Indices of the hypotheses of H_O consistent with the support set."""
        words = consistent_words(self.bank, support_ids, support_labels, self.mask)
        return np.flatnonzero(unpack_rows(words, len(self.bank)))

    def posterior(
        self, support_ids: np.ndarray, support_labels: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(consistent hypothesis indices, their normalised posterior weights)."""
        idx = self.consistent(support_ids, support_labels)
        if idx.size == 0:
            return idx, np.zeros(0)
        logw = self.log_prior[idx].copy()
        if self.likelihood == "size_principle":
            n_pos = int(np.asarray(support_labels).astype(bool).sum())
            logw -= n_pos * self._log_size[idx]
            if self.negatives == "hard":
                logw -= (len(support_labels) - n_pos) * self._log_rest[idx]
        w = np.exp(logw - logw.max())
        return idx, w / w.sum()

    def predict(
        self, support_ids: np.ndarray, support_labels: np.ndarray, scene_ids: np.ndarray
    ) -> np.ndarray:
        """Posterior predictive p(y=1 | u, D) for each scene of `scene_ids`."""
        idx, w = self.posterior(support_ids, support_labels)
        return predictive_on(self.bank, idx, w, scene_ids)


def hypothesis_bits(bank, idx: np.ndarray, scene_ids: np.ndarray) -> np.ndarray:
    """(len(scene_ids), len(idx)) booleans: whether hypothesis idx[k] holds on each scene."""
    rows = np.asarray(bank.truth_by_scene[np.asarray(scene_ids)])  # (M, ceil(H / 64))
    idx = np.asarray(idx, np.int64)
    return ((rows[:, idx >> 6] >> (idx & 63).astype(np.uint64)) & np.uint64(1)).astype(bool)


def predictive_on(bank, idx: np.ndarray, w: np.ndarray, scene_ids: np.ndarray) -> np.ndarray:
    """sum_k w[k] [idx[k] holds on u] for each scene u (0 where idx is empty)."""
    if len(idx) == 0:
        return np.zeros(len(scene_ids))
    # multiply-sum, not `@`: these products are tiny, and BLAS would wake (and spin) its threads
    # in every worker process of the gap report
    return (hypothesis_bits(bank, idx, scene_ids) * w).sum(1)


def posterior_predictive(
    bank,
    episode,
    hypotheses: np.ndarray | None,
    scene_ids: np.ndarray,
    prior: str = "log_linear",
    likelihood: str = "size_principle",
    negatives: str = "hard",
) -> np.ndarray:
    """p(y=1 | u, D) of the posterior over `hypotheses` (None: all) for the episode's support D.

    Convenience wrapper of `Posterior` (build one `Posterior` to score many episodes).
    """
    post = Posterior(bank, hypotheses, prior=prior, likelihood=likelihood, negatives=negatives)
    return post.predict(episode.support_ids, episode.support_labels, scene_ids)

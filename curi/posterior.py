"""The posterior over a hypothesis set given a support set (CURI paper, section 3,
"Compositionality Gap"): a log-linear or PCFG prior, a size-principle or consistency likelihood,
and the posterior predictive. Consistent hypotheses are found with bit operations on the bank's
scene-major truth matrix (`consistent_words`), so only they are ever weighed; episodes use the
same bit-AND for their alternates (paper Appendix D)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from curi.bits import pack_rows, set_bits
from curi.prior import PRIORS, concept_log_prior
from curi.validate import choice

__all__ = [
    "LIKELIHOODS",
    "NEGATIVES",
    "NUM_NEGATIVES",
    "NUM_POSITIVES",
    "Posterior",
    "Posteriors",
    "consistent_words",
    "hypothesis_bits",
    "posterior_predictive",
    "predictive_on",
]

LIKELIHOODS = ("size_principle", "consistent")
NEGATIVES = ("hard", "easy")  # how a support set's negatives are drawn (paper, section 3)
NUM_POSITIVES = 5  # a support set's positives (paper, section 3)
NUM_NEGATIVES = 20  # and its negatives


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
        OptionError: an unknown prior, likelihood or negatives option (a ValueError).
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
        choice(prior, "prior", PRIORS)
        choice(likelihood, "likelihood", LIKELIHOODS)
        choice(negatives, "negatives", NEGATIVES)
        self.bank = bank
        n = len(bank)
        member = np.zeros(n, bool)
        member[np.arange(n) if hypotheses is None else np.asarray(hypotheses, np.int64)] = True
        self.hypotheses = np.flatnonzero(member)
        self.mask = pack_rows(member)  # (ceil(H / 64),)
        self.likelihood = likelihood
        self.negatives = negatives
        self.log_prior = concept_log_prior(bank, prior)
        counts = np.asarray(bank.counts, np.float64)
        self._log_size = np.log(counts)
        self._log_rest = np.log(bank.num_scenes - counts)

    def consistent(self, support_ids: np.ndarray, support_labels: np.ndarray) -> np.ndarray:
        """Indices of the hypotheses of H_O consistent with the support set."""
        words = consistent_words(self.bank, support_ids, support_labels, self.mask)
        return set_bits(words)  # the mask holds no bit past the last concept

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

    def posteriors(self, support_ids: np.ndarray, support_labels: np.ndarray) -> Posteriors:
        """The posteriors of E support sets at once, each equal to the bits to what
        `posterior` returns for it (the gap report scores thousands of episodes a row).

        Args:
            support_ids: (E, S) scene ids.
            support_labels: (E, S) labels, 1 (or True) for positives.
        """
        from curi.bit_loops import set_bits_rows as listed
        from curi.posterior_loops import consistent_words as consistent

        ids = np.asarray(support_ids, np.int64)
        lab = np.asarray(support_labels, bool)
        words = consistent(np.asarray(self.bank.truth_by_scene), ids, lab, self.mask)
        episode, idx = listed(words)  # ascending per episode
        logw = self.log_prior[idx]
        if self.likelihood == "size_principle":
            n_pos = lab.sum(1).astype(np.float64)  # (E,)
            logw = logw - n_pos[episode] * self._log_size[idx]
            if self.negatives == "hard":
                logw -= (lab.shape[1] - n_pos)[episode] * self._log_rest[idx]
        lengths = np.bincount(episode, minlength=len(words))
        return Posteriors.from_log_weights(idx, logw, lengths)


@dataclass(frozen=True)
class Posteriors:
    """The posteriors of E support sets, concatenated: episode e weighs the concepts
    ``idx[offsets[e]:offsets[e + 1]]`` by ``w[offsets[e]:offsets[e + 1]]``.

    Attributes:
        idx: (K,) concept indices, ascending within each episode.
        w: (K,) normalised posterior weights.
        offsets: (E + 1,) where each episode starts.
    """

    idx: np.ndarray
    w: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_log_weights(cls, idx: np.ndarray, logw: np.ndarray, lengths: np.ndarray):
        """Normalise each episode's log weights as `Posterior.posterior` does: its maximum
        subtracted, exponentiated, divided by the sum. Episodes of equal length are summed
        together as rows of one matrix, so each sum adds its terms in the same order as the
        sum of one episode's weights (a segmented sum, ``np.add.reduceat``, would not)."""
        offsets = np.r_[0, np.cumsum(lengths)]
        episode = np.repeat(np.arange(len(lengths)), lengths)
        has = lengths > 0
        top = np.zeros(len(lengths))
        top[has] = np.maximum.reduceat(logw, offsets[:-1][has])
        e = np.exp(logw - top[episode])
        total = np.zeros(len(lengths))
        for k, members in _by_length(lengths):
            total[members] = e[offsets[members, None] + np.arange(k)].sum(1)
        return cls(idx, e / total[episode], offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def concat(cls, parts: list[Posteriors]) -> Posteriors:
        """The episodes of `parts`, one after another."""
        lengths = np.concatenate([np.diff(p.offsets) for p in parts])
        idx, w = (np.concatenate([getattr(p, k) for p in parts]) for k in ("idx", "w"))
        return cls(idx, w, np.r_[0, np.cumsum(lengths)])

    def select(self, episodes: np.ndarray) -> Posteriors:
        """The posteriors of `episodes` (indices), in that order."""
        lengths = np.diff(self.offsets)[episodes]
        at = np.arange(int(lengths.sum())) + np.repeat(
            self.offsets[episodes] - (np.cumsum(lengths) - lengths), lengths
        )
        return Posteriors(self.idx[at], self.w[at], np.r_[0, np.cumsum(lengths)])

    def __getitem__(self, e: int) -> tuple[np.ndarray, np.ndarray]:
        """(concept indices, weights) of episode e."""
        a, b = self.offsets[e], self.offsets[e + 1]
        return self.idx[a:b], self.w[a:b]

    def predictive(self, bank, scene_ids: np.ndarray) -> np.ndarray:
        """(E, Q) `predictive_on` of each episode's posterior on its row of `scene_ids`
        (E, Q), equal to the bits: `predictive_on` adds its hypotheses' terms one after
        another, and so does `curi.posterior_loops.predictive`."""
        from curi.posterior_loops import predictive

        ids = np.asarray(scene_ids, np.int64)
        by_scene = np.asarray(bank.truth_by_scene)
        return predictive(by_scene, self.idx, self.w, self.offsets, ids.reshape(len(self), -1))


def _by_length(lengths: np.ndarray):
    """(k, the indices with length k) for every length k > 0 in `lengths`."""
    order = np.argsort(lengths, kind="stable")
    values, starts = np.unique(lengths[order], return_index=True)
    for k, members in zip(values.tolist(), np.split(order, starts[1:]), strict=True):
        if k:
            yield k, members


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

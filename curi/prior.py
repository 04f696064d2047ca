"""The concept priors, defined once. The length term is the paper's log-linear weight
``w(h) ∝ exp(-0.2 l(h))`` (CURI paper, Appendix B.3, eq. 2), used by the bank's stored prior,
episode sampling, the oracles' ``log_linear`` prior and the divergences' ``length`` weighting;
the ``pcfg`` prior is the grammar's log-probability of a concept's first draw, summed as the
grammar drew it (`curi.grammar`) and stored by the bank (`concept_log_prior` picks one)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["LENGTH_PRIOR_SLOPE", "PRIORS", "concept_log_prior", "length_log_prior"]

LENGTH_PRIOR_SLOPE = -0.2  # log w(h) = -0.2 * len(h), len in canonical postfix tokens
PRIORS = ("log_linear", "pcfg")  # the oracles' priors over a bank's concepts


def length_log_prior(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """Unnormalised log prior ``-0.2 * len(h)`` of concepts of the given lengths.

    Normalising ``exp`` of it over a concept set gives the probability with which episodes draw
    a concept of that set (paper Appendix B.3, eq. 3).

    Args:
        lengths: concept lengths in canonical postfix tokens (any integer or float array).

    Returns:
        float64 array of the same shape.
    """
    return LENGTH_PRIOR_SLOPE * np.asarray(lengths, dtype=np.float64)


def concept_log_prior(bank, prior: str) -> np.ndarray:
    """float64 (H,): the unnormalised log prior `prior` of each of `bank`'s concepts,
    ``log_linear`` (`length_log_prior` of its length) or ``pcfg`` (the log-probability of its
    first draw by the grammar), as the bank stores them."""
    return np.asarray(bank.log_prior if prior == "log_linear" else bank.pcfg_logprob, np.float64)

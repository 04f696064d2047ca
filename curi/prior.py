"""The concept prior's length term, defined once: the paper's log-linear weight
``w(h) ∝ exp(-0.2 l(h))`` (CURI paper, Appendix B.3, eq. 2), used by the bank's stored prior,
episode sampling, the oracles' ``log_linear`` prior and the divergences' ``length`` weighting."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["LENGTH_PRIOR_SLOPE", "length_log_prior"]

LENGTH_PRIOR_SLOPE = -0.2  # log w(h) = -0.2 * len(h), len in canonical postfix tokens


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

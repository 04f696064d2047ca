"""The oracles of the compositionality gap (CURI paper, section 3) as policies over the core's
posterior: the strong oracle weighs every concept of the bank, the weak oracle only the split's
training concepts. The posterior maths lives in `curi.posterior`; the random oracle (uniform
scores) is drawn where episodes are scored (`curi.oracles.gap`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from curi.posterior import LIKELIHOODS, PRIORS, Posterior, posterior_predictive

if TYPE_CHECKING:
    from curi.splits import Split

__all__ = ["LIKELIHOODS", "PRIORS", "Oracle", "posterior_predictive"]


class Oracle(Posterior):
    """An ideal learner: the posterior over a hypothesis set H_O chosen by a policy.

    ``Oracle.strong(bank)`` takes H_O = every concept of the bank (train and test together),
    ``Oracle.weak(bank, split)`` H_O = the split's training concepts; a weak oracle that finds no
    consistent training concept scores every scene 0. The constructor takes any H_O (see
    `curi.posterior.Posterior` for the prior, likelihood and negatives options).
    """

    @classmethod
    def strong(cls, bank, **options) -> Oracle:
        """The strong oracle: H_O is the whole bank."""
        return cls(bank, None, **options)

    @classmethod
    def weak(cls, bank, split: Split, **options) -> Oracle:
        """The weak oracle: H_O is the split's training concepts."""
        return cls(bank, split.train, **options)

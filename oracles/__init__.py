"""Oracles, metrics and split measures of CURI (spec section 6, DIVERGENCE.md): average
precision and class-balanced accuracy, and DBCA atom / compound divergences."""

from curi.oracles.divergence import (
    DivergenceIndex,
    Divergences,
    atom_distribution,
    atom_divergence,
    atoms,
    canonical_tree,
    chernoff_coefficient,
    compound_distribution,
    compound_divergence,
    compounds,
)
from curi.oracles.gap import compositionality_gap
from curi.oracles.metrics import (
    average_precision,
    average_precision_batch,
    class_balanced_accuracy,
    class_balanced_accuracy_batch,
    pooled_class_balanced_accuracy,
)

__all__ = [
    "DivergenceIndex",
    "Divergences",
    "atom_distribution",
    "atom_divergence",
    "atoms",
    "average_precision",
    "average_precision_batch",
    "canonical_tree",
    "chernoff_coefficient",
    "class_balanced_accuracy",
    "class_balanced_accuracy_batch",
    "compound_distribution",
    "compositionality_gap",
    "compound_divergence",
    "compounds",
    "pooled_class_balanced_accuracy",
]

"""Oracles, metrics and the compositionality gap of CURI (paper, section 3): strong and weak
oracles as policies over `curi.posterior`, average precision and class-balanced accuracy, and
the gap report. The DBCA divergences live in `curi.divergence` and are re-exported here."""

from curi.divergence import (
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
from curi.oracles.oracle import Oracle

__all__ = [
    "DivergenceIndex",
    "Divergences",
    "Oracle",
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

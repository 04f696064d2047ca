"""The mAP evaluation set of CURI (paper, section 3): three positive scenes of every concept of
the bank, held as concept-major packed rows so that an oracle's or a model's ranking of the set
is scored from bit operations. Both the oracles and the models score episodes on it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from curi.bits import pack_rows, transpose_blocks

__all__ = ["EvalSet"]


@dataclass(frozen=True)
class EvalSet:
    """The mAP evaluation set, as concept-major packed rows over its scenes.

    Attributes:
        ids: (M,) scene ids (3 positives per concept of the bank).
        rows: (H, ceil(M / 64)) words: bit j of row i set when concept i holds on ids[j].
    """

    ids: np.ndarray
    rows: np.ndarray

    @classmethod
    def from_bank(cls, bank) -> EvalSet:
        """The evaluation set of a `ConceptBank`, read from its scene-major truth matrix."""
        ids = np.asarray(bank.eval_ids)
        by_scene = np.asarray(bank.truth_by_scene[ids])  # (M, ceil(H / 64))
        return cls(ids, np.concatenate(list(transpose_blocks(by_scene, len(bank)))))

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def all_scenes(self) -> np.ndarray:
        """(ceil(M / 64),) words with the bits of every evaluation scene set."""
        return pack_rows(np.ones(len(self.ids), bool))

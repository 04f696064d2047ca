"""The mAP evaluation set of CURI (paper, section 3): three positive scenes of every concept of
the bank, held as concept-major packed rows so that an oracle's or a model's ranking of the set
is scored from bit operations. Both the oracles and the models score episodes on it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from curi.bits import pack_rows, set_bits_rows, transpose_blocks

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

    @cached_property
    def _positives(self) -> dict[int, np.ndarray]:
        """concept -> its positives, for the concepts asked for so far (`positives`)."""
        return {}

    def positives(self, concepts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(k, position) of every evaluation scene on which ``concepts[k]`` holds, k by k,
        positions ascending (the ground truth of many episodes, without unpacking rows);
        each concept's positions are found once."""
        concepts = np.asarray(concepts).tolist()
        known = self._positives
        missing = sorted(set(concepts).difference(known))
        if missing:
            k, at = set_bits_rows(self.rows[missing])
            ends = np.cumsum(np.bincount(k, minlength=len(missing)))
            known.update(zip(missing, np.split(at, ends[:-1]), strict=True))
        parts = [known[h] for h in concepts]
        k = np.repeat(np.arange(len(parts)), [len(p) for p in parts])
        return k, np.concatenate(parts) if parts else np.zeros(0, np.int64)

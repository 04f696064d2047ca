"""Easiness of test concepts from what a learner sees (a CURI extension, not in Bogin et al.
2022): the test concept's extension (the scenes it picks out) against the training concepts'.

A learner that generalises from training concepts does well on a test concept when a training
concept picks out nearly the same scenes and the support set leaves it standing. The
predictors measure both from the bank's truth bits alone; they never score an oracle or a model
on an episode. Agreement of concepts h and g is ``|h & g|^2 / (|h| |g|)`` (precision times
recall of g as a guess of h; the AP of ranking g's scenes first, to first order), counted on
the bank's mAP evaluation scenes, where mAP is scored.

- ``ext-nn``: the largest agreement of the test concept with a training concept.
- ``ext-pos``: draws of five positives of the concept (``draws`` of them, seeded per concept,
  like a support set's positives); the training concepts true on all five, weighed by the
  log-linear prior and the size principle (|g|^-5); their weighted mean agreement (0 when none
  is true on all five), averaged over draws.
- ``ext-left``: how likely some training concept is left standing by a support set: hard
  negatives are drawn from the scenes of the bank's concepts true on the five positives, minus
  the concept's own (CURI paper, Appendix D); a training concept g true on the positives
  survives twenty of them with probability ``(1 - |g & pool| / |pool|)^20`` (``|.|`` counted
  on a seeded sample of the bank's scenes); ``ext-left`` is ``1 - prod_g (1 - survival)``,
  averaged over draws.
- ``ext-neg``: ``ext-left`` times the mean agreement of the training concepts weighed as
  ``ext-pos`` with the size principle of the twenty negatives too and their survival.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from curi.bits import pack_rows, select_bits, transpose_blocks, unpack_rows
from curi.posterior import NUM_NEGATIVES, NUM_POSITIVES
from curi.rng import derive_rng
from curi.validate import choice

__all__ = [
    "EXTENSION_PREDICTORS",
    "NUM_DRAWS",
    "SUPPORT_PREDICTORS",
    "ExtensionIndex",
    "extension_easiness",
    "leave_group_out",
    "support_draws",
]

#: name -> what it measures; the predictors of this module (CURI extensions).
EXTENSION_PREDICTORS = {
    "ext-nn": "largest agreement with a training concept on the evaluation scenes",
    "ext-pos": "prior x size-principle weighted agreement of the training concepts true on "
    "five drawn positives",
    "ext-left": "chance that a training concept true on five drawn positives survives twenty "
    "hard negatives",
    "ext-neg": "ext-left x weighted agreement of the training concepts that survive the "
    "hard negatives",
}
NUM_DRAWS = 4  # draws of positives per concept (8 gave the same AUCs, docs/fidelity.md)
SAMPLE_SCENES = 16384  # scenes on which the negatives' pool is counted
_CHUNK = 4096  # evaluation scenes unpacked at once: (chunk, H) booleans
#: the predictors `leave_group_out` scores (those of a support set), the default first
SUPPORT_PREDICTORS = ("ext-neg", "ext-left", "ext-pos")
_SUPPORT = {"ext-pos": 0, "ext-left": 1, "ext-neg": 2}  # rows of `_support_scores`


@dataclass
class ExtensionIndex:
    """A bank's concepts on its evaluation scenes and on a scene sample, as packed bits.

    Attributes:
        bank: the `ConceptBank`.
        eval_by_scene: (M, ceil(H / 64)) words, the evaluation scenes' scene-major truth rows.
        eval_rows: (H, ceil(M / 64)) words, the same bits concept-major.
        sizes: (H,) evaluation scenes each concept holds on.
        sample: (S,) the sampled scene ids (sorted), on which the negatives' pool is counted.
        sample_rows: (H, ceil(S / 64)) words: concept-major bits on `sample`.
    """

    bank: object
    eval_by_scene: np.ndarray
    eval_rows: np.ndarray
    sizes: np.ndarray
    sample: np.ndarray
    sample_rows: np.ndarray

    @classmethod
    def from_bank(cls, bank, *, sample_scenes: int = SAMPLE_SCENES) -> ExtensionIndex:
        """The index of `bank`'s concepts (evaluation scenes: ``bank.eval_ids``)."""
        h, n = len(bank), bank.num_scenes
        by_scene = np.ascontiguousarray(bank.truth_by_scene[np.asarray(bank.eval_ids)])
        rows = np.concatenate(list(transpose_blocks(by_scene, h)))  # (H, ceil(M / 64))
        sizes = np.bitwise_count(rows).sum(1, dtype=np.int64)
        rng = derive_rng(0, "easiness-ext-sample")
        sample = np.sort(rng.choice(n, size=min(sample_scenes, n), replace=False))
        srows = np.ascontiguousarray(bank.truth_by_scene[sample])
        sample_rows = np.concatenate(list(transpose_blocks(srows, h)))  # (H, ceil(S / 64))
        return cls(bank, by_scene, rows, sizes, sample, sample_rows)

    def intersections(self, test: np.ndarray, train: np.ndarray) -> np.ndarray:
        """(len(test), len(train)) evaluation scenes both concepts hold on: a float32 0/1
        matrix product per chunk of scenes (exact: counts stay far below 2^24)."""
        h = len(self.bank)
        out = np.zeros((len(test), len(train)), np.float32)
        for lo in range(0, len(self.eval_by_scene), _CHUNK):
            bits = unpack_rows(self.eval_by_scene[lo : lo + _CHUNK], h)  # (chunk, H)
            a = np.take(bits, test, axis=1).T.astype(np.float32)  # (T, chunk)
            out += a @ np.take(bits, train, axis=1).astype(np.float32)
        return out.astype(np.float64)

    def agreement(self, h: int, g: np.ndarray) -> np.ndarray:
        """(len(g),) agreement of concept h with each concept of g (module docstring)."""
        inter = np.bitwise_count(self.eval_rows[g] & self.eval_rows[h]).sum(1, dtype=np.int64)
        return _agreement(inter, self.sizes[h], self.sizes[g])


def _agreement(inter, size_h, size_g) -> np.ndarray:
    inter = np.asarray(inter, np.float64)
    den = np.asarray(size_h, np.float64) * np.asarray(size_g, np.float64)
    return np.divide(
        inter * inter, den, out=np.zeros(np.broadcast(inter, den).shape), where=den > 0
    )


def support_draws(bank, h: int, *, seed: int = 0, draws: int = NUM_DRAWS) -> np.ndarray:
    """(draws, min(5, count)) distinct scene ids where concept h holds, seeded by (seed, h)
    alone, so a concept gets the same draws in every split."""
    rng = derive_rng(seed, "easiness-ext-support", int(h))
    row = np.asarray(bank.truth_words[h])
    count = int(bank.counts[h])
    k = min(NUM_POSITIVES, count)
    return np.stack(
        [select_bits(row, rng.choice(count, size=k, replace=False)) for _ in range(draws)]
    )


def _nearest(index: ExtensionIndex, train: np.ndarray, test: np.ndarray):
    """ext-nn and the nearest training concept, one per synonym group (a group's concepts
    share their extension)."""
    groups = np.asarray(index.bank.groups)
    _, first = np.unique(groups[train], return_index=True)
    reps = train[first]
    inter = index.intersections(test, reps)
    agree = _agreement(inter, index.sizes[test][:, None], index.sizes[reps][None, :])
    best = agree.argmax(1)
    return agree[np.arange(len(test)), best], reps[best]


def _support_scores(
    index: ExtensionIndex, train: np.ndarray, test: np.ndarray, *, seed, draws, own_group=True
):
    """(ext-pos, ext-left, ext-neg) of each test concept (module docstring); without
    `own_group`, training concepts in the test concept's synonym group are left out."""
    bank = index.bank
    n_h, n = len(bank), bank.num_scenes
    member = np.zeros(n_h, bool)
    member[train] = True
    groups = np.asarray(bank.groups)
    counts = np.asarray(bank.counts, np.float64)
    log_pos = np.asarray(bank.log_prior, np.float64) - NUM_POSITIVES * np.log(counts)
    log_neg = log_pos - NUM_NEGATIVES * np.log(n - counts)
    valid = pack_rows(np.ones(len(index.sample), bool))
    out = np.zeros((3, len(test)))
    for j, h in enumerate(np.asarray(test).tolist()):
        not_h = ~index.sample_rows[h] & valid  # (no padding bits past the sample's end)
        for ids in support_draws(bank, h, seed=seed, draws=draws):
            true_on_all = unpack_rows(np.bitwise_and.reduce(bank.truth_by_scene[ids], 0), n_h)
            g = np.flatnonzero(true_on_all & member)  # the training concepts left by positives
            if not own_group:
                g = g[groups[g] != groups[h]]
            if not len(g):
                continue
            agree = index.agreement(h, g)
            w = np.exp(log_pos[g] - log_pos[g].max())
            out[0, j] += (w * agree).sum() / w.sum()
            true_on_all[h] = False
            alternates = np.flatnonzero(true_on_all)  # the whole bank's, as episodes draw them
            pool = not_h.copy()
            if len(alternates):
                pool &= np.bitwise_or.reduce(index.sample_rows[alternates], 0)
            size = int(np.bitwise_count(pool).sum())
            if size == 0:  # no pool: episodes fill with random scenes not satisfying h
                pool, size = not_h, int(np.bitwise_count(not_h).sum())
            hit = np.bitwise_count(index.sample_rows[g] & pool).sum(1, dtype=np.int64)
            survive = (1.0 - hit / max(size, 1)) ** NUM_NEGATIVES
            left = 1.0 - float(np.prod(1.0 - survive))
            w = np.exp(log_neg[g] - log_neg[g].max()) * survive
            out[1, j] += left
            if w.sum() > 0:
                out[2, j] += left * (w * agree).sum() / w.sum()
    return out / draws


def leave_group_out(
    index: ExtensionIndex, name: str = "ext-neg", *, seed: int = 0, draws: int = 2
) -> np.ndarray:
    """(H,) easiness of every concept of the bank with every other synonym group as the
    training concepts (the adversarial split's ranking, `curi.splits.adversarial`); a group's
    concepts share their extension, so each group is scored once, by its first concept.

    Args:
        name: ``ext-pos``, ``ext-left`` or ``ext-neg``.
    """
    choice(name, "name", SUPPORT_PREDICTORS)
    groups = np.asarray(index.bank.groups)
    _, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    every = np.arange(len(groups))
    scores = _support_scores(index, every, first, seed=seed, draws=draws, own_group=False)
    return scores[_SUPPORT[name]][inverse]


def extension_easiness(
    index: ExtensionIndex,
    train: np.ndarray,
    test: np.ndarray,
    names: Sequence[str],
    *,
    seed: int = 0,
    draws: int = NUM_DRAWS,
) -> dict[str, np.ndarray]:
    """Each named extension predictor's easiness of the test concepts (higher: easier).

    Args:
        index: the bank's `ExtensionIndex`.
        train, test: concept indices of the split's training and (scored) test concepts.
        names: keys of `EXTENSION_PREDICTORS`.
        seed: seeds the drawn positives (with the concept; `support_draws`).
        draws: draws of positives per concept.

    Returns:
        ``{name: (len(test),) easiness in [0, 1]}``, 0 for every concept when no training
        concepts; with ``ext-nn``, also ``nearest``: the nearest training concept's index.

    Raises:
        ValueError: a name not in `EXTENSION_PREDICTORS`.
    """
    unknown = set(names) - set(EXTENSION_PREDICTORS)
    if unknown:
        raise ValueError(f"unknown extension predictors {sorted(unknown)}")
    train, test = np.asarray(train, np.int64), np.asarray(test, np.int64)
    if not len(train) or not len(test):
        return {name: np.zeros(len(test)) for name in names}
    out: dict[str, np.ndarray] = {}
    keep = list(names)
    if "ext-nn" in names:
        out["ext-nn"], out["nearest"] = _nearest(index, train, test)
        keep.append("nearest")
    if set(_SUPPORT) & set(names):
        pos, left, neg = _support_scores(index, train, test, seed=seed, draws=draws)
        out.update({"ext-pos": pos, "ext-left": left, "ext-neg": neg})
    return {name: out[name] for name in keep}

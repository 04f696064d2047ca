"""Episode metrics of CURI as the paper reports them: step-wise average precision and
class-balanced accuracy, for one episode or vectorised over many (rows = episodes, columns =
scenes); and the AP of an oracle on the mAP evaluation set, computed from the set's packed bit
rows (docs/design.md) without scoring scenes one by one where it can. Class-balanced accuracy
and AP are computed here only: the gap report and model evaluation call these functions."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from curi.bits import byte_codes, pack_rows

if TYPE_CHECKING:
    from curi.oracles.eval_set import EvalSet

__all__ = [
    "FixedScores",
    "ap_from_counts",
    "average_precision",
    "average_precision_batch",
    "class_balanced_accuracy",
    "class_balanced_accuracy_batch",
    "oracle_average_precision",
    "oracle_scores",
    "pooled_class_balanced_accuracy",
    "random_average_precision",
    "roc_auc",
]

# Elements (rows x columns) handled at once by the batched AP: 8 to about 30 bytes of scratch
# each. Small chunks stay in cache: on a 2-core Xeon, 2^17-2^18 elements ran about 1.4x faster
# than 2^21-2^22.
DEFAULT_MAX_ELEMENTS = 1 << 18
_LITTLE = sys.byteorder == "little"  # where the lowest byte of a uint64 lies


def _as_2d(scores: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Check shapes (not values) of a batch; values are checked chunk by chunk."""
    s, y = np.asarray(scores), np.asarray(labels)
    if s.ndim != 2 or y.ndim != 2:
        raise ValueError(
            f"expected 2-D (episodes, scenes) scores and labels, got shapes {s.shape} and {y.shape}"
        )
    if s.shape != y.shape:
        raise ValueError(f"scores {s.shape} and labels {y.shape} must have the same shape")
    if s.shape[1] == 0:
        raise ValueError("each episode needs at least one scored scene (got 0 columns)")
    return s, y


def _labels(y: np.ndarray) -> np.ndarray:
    """A chunk of labels as bool; only booleans or the numbers 0 and 1 are accepted."""
    if y.dtype == np.bool_:
        return y
    if not ((y == 0) | (y == 1)).all():
        raise ValueError("labels must be booleans or 0/1")
    return y != 0


def _sorted_keys(s: np.ndarray, y: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """Sort each row of a chunk into keys ``2 * v + label``, ascending.

    ``v`` is an integer that increases with the score and is equal exactly for equal scores,
    so equal scores form one run of keys in which the positives follow the negatives.
    Validates the chunk.

    Args:
        s: (C, M) scores.
        y: (C, M) labels.
        buf: (>= C, M) uint64 scratch, reused across chunks.

    Returns:
        (C, M) uint64 keys, a view of `buf`, each row sorted.
    """
    c = s.shape[0]
    key = buf[:c]
    vals = key.view(np.float64)
    np.add(s, 0.0, out=vals)  # float64 copy; -0.0 + 0.0 == +0.0, so the two zeros tie
    y = _labels(y)
    if (vals >= 0).all():
        # Fast path (probabilities): the bits of a non-negative double, read as an integer,
        # sort like the double and fit in 63 bits, so the label rides in the lowest bit and
        # one integer sort orders both (an argsort plus gathers is about twice as slow).
        key <<= np.uint64(1)
        key |= y
        key.sort(axis=1)
        return key
    if np.isnan(vals).any():
        raise ValueError("scores contain NaN; every scene needs a score")
    # General path (negative scores): replace each score by its dense rank, then as above.
    order = np.argsort(vals, axis=1)  # (C, M)
    sv = np.take_along_axis(vals, order, axis=1)
    grp = np.zeros(sv.shape, dtype=np.uint64)
    np.cumsum(sv[:, 1:] != sv[:, :-1], axis=1, out=grp[:, 1:])
    key[...] = (grp << np.uint64(1)) | np.take_along_axis(y, order, axis=1)
    key.sort(axis=1)
    return key


def _ap_keys(key: np.ndarray) -> np.ndarray:
    """AP of each row of sorted keys (see `_sorted_keys`); NaN for rows without positives.

    Only the groups holding positives contribute: for such a group g, starting at position
    a_g, with n_g positives and r_g positives below it, the threshold at g has precision
    (P - r_g) / (M - a_g) and raises the recall by n_g / P.
    """
    c, m = key.shape
    flat = key.reshape(-1)
    low = key.view(np.uint8).reshape(c, m, 8)[:, :, 0 if _LITTLE else 7]  # (C, M) lowest bytes
    f = np.flatnonzero(low & np.uint8(1))  # flat positions of the positives, row by row, ascending
    row = f // m
    n_pos = np.bincount(row, minlength=c)  # (C,) P per row
    first_of_row = np.concatenate(([0], np.cumsum(n_pos)[:-1]))
    pk = flat[f]
    # positives of one group carry identical keys and sit next to each other
    run = np.ones(f.size, dtype=bool)
    run[1:] = (pk[1:] != pk[:-1]) | (row[1:] != row[:-1])
    g = np.flatnonzero(run)  # index (among positives) of each group's first positive
    n_g = np.diff(np.append(g, f.size))
    g_row, g_pos, g_key = row[g], f[g], pk[g]
    r_g = g - first_of_row[g_row]
    a_g = g_pos - g_row * m  # column of the first positive: the group's start unless ...
    # ... negatives of the same score (key - 1) precede it: then search the row for the start.
    tied = a_g > 0
    tied[tied] = flat[g_pos[tied] - 1] == g_key[tied] - np.uint64(1)
    if tied.any():
        t = np.flatnonzero(tied)
        for part in np.split(t, np.flatnonzero(np.diff(g_row[t])) + 1):  # one row at a time
            a_g[part] = np.searchsorted(key[g_row[part[0]]], g_key[part] - np.uint64(1))
    contrib = n_g * (n_pos[g_row] - r_g) / (m - a_g)
    num = np.bincount(g_row, weights=contrib, minlength=c)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_pos > 0, num / n_pos, np.nan)


def average_precision_batch(
    scores: ArrayLike, labels: ArrayLike, *, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> np.ndarray:
    """Average precision of every row (episode) of a score matrix.

    The step-wise definition of scikit-learn's ``average_precision_score``:
    ``AP = sum_n (R_n - R_{n-1}) P_n`` over the distinct score thresholds, from the highest
    down; scenes with equal scores form one threshold, so all-equal scores give the positive
    rate. Rows are sorted once each, in chunks of about `max_elements` elements so memory stays
    bounded whatever the number of rows (the inputs may be memory-mapped).

    Args:
        scores: (E, M) scores, higher meaning more likely positive; any real numbers but NaN
            (non-negative scores take a faster path).
        labels: (E, M) booleans or 0/1, true where the scene satisfies the episode's concept.
        max_elements: elements processed at once (8 to about 30 bytes of scratch each).

    Returns:
        (E,) float64 average precisions; NaN for a row without positives (AP is undefined).

    Raises:
        ValueError: shapes differ or are not 2-D, no columns, NaN scores, labels other than
            0/1, or `max_elements` < 1.
    """
    s, y = _as_2d(scores, labels)
    if max_elements < 1:
        raise ValueError(f"max_elements must be at least 1, got {max_elements}")
    rows = max(1, min(s.shape[0], max_elements // s.shape[1]))
    buf = np.empty((rows, s.shape[1]), dtype=np.uint64)  # reused: no page faults per chunk
    out = np.empty(s.shape[0], dtype=np.float64)
    for start in range(0, s.shape[0], rows):
        stop = start + rows
        out[start:stop] = _ap_keys(_sorted_keys(s[start:stop], y[start:stop], buf))
    return out


def average_precision(scores: ArrayLike, labels: ArrayLike) -> float:
    """Average precision of one episode (see `average_precision_batch`).

    Args:
        scores: (M,) scores.
        labels: (M,) booleans or 0/1.

    Returns:
        The AP; NaN when there is no positive.

    Raises:
        ValueError: as `average_precision_batch`, or inputs that are not 1-D.
    """
    s, y = np.asarray(scores), np.asarray(labels)
    if s.ndim != 1 or y.ndim != 1:
        raise ValueError(f"expected 1-D scores and labels, got shapes {s.shape} and {y.shape}")
    return float(average_precision_batch(s[None], y[None])[0])


def _confusion(
    scores: ArrayLike, labels: ArrayLike, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-row true positives, positives, true negatives and negatives at `threshold`."""
    s, y = _as_2d(scores, labels)
    if np.isnan(s).any():
        raise ValueError("scores contain NaN; every scene needs a score")
    y = _labels(y)
    pred = s > threshold  # (E, M) predicted positive
    n_pos = y.sum(axis=1)
    tp = (pred & y).sum(axis=1)
    tn = (~pred & ~y).sum(axis=1)
    return tp, n_pos, tn, y.shape[1] - n_pos


def class_balanced_accuracy_batch(
    scores: ArrayLike, labels: ArrayLike, *, threshold: float = 0.5
) -> np.ndarray:
    """Class-balanced accuracy of every row (episode): the mean of the accuracy on the positives
    and the accuracy on the negatives, predicting positive iff score > `threshold`.

    Args:
        scores: (E, M) scores (e.g. query-set predictive probabilities).
        labels: (E, M) booleans or 0/1.
        threshold: strict decision threshold.

    Returns:
        (E,) float64; NaN for a row that lacks positives or negatives (one accuracy undefined).

    Raises:
        ValueError: shapes differ or are not 2-D, NaN scores or labels other than 0/1.
    """
    tp, n_pos, tn, n_neg = _confusion(scores, labels, threshold)
    with np.errstate(invalid="ignore", divide="ignore"):
        return 0.5 * (tp / n_pos + tn / n_neg)


def class_balanced_accuracy(
    scores: ArrayLike, labels: ArrayLike, *, threshold: float = 0.5
) -> float:
    """Class-balanced accuracy of one episode (see `class_balanced_accuracy_batch`).

    Args:
        scores: (M,) scores.
        labels: (M,) booleans or 0/1.
        threshold: strict decision threshold.

    Returns:
        The CBA; NaN when positives or negatives are missing.

    Raises:
        ValueError: as the batched form, or inputs that are not 1-D.
    """
    s, y = np.asarray(scores), np.asarray(labels)
    if s.ndim != 1 or y.ndim != 1:
        raise ValueError(f"expected 1-D scores and labels, got shapes {s.shape} and {y.shape}")
    return float(class_balanced_accuracy_batch(s[None], y[None], threshold=threshold)[0])


def pooled_class_balanced_accuracy(
    scores: ArrayLike, labels: ArrayLike, *, threshold: float = 0.5
) -> float:
    """Class-balanced accuracy with the classes pooled over all episodes: the mean of the
    accuracy on all positives of all rows and on all negatives of all rows.

    Args:
        scores: (E, M) scores.
        labels: (E, M) booleans or 0/1.
        threshold: strict decision threshold.

    Returns:
        The pooled CBA; NaN when no row has a positive or none has a negative.

    Raises:
        ValueError: shapes differ or are not 2-D, NaN scores or labels other than 0/1.
    """
    tp, n_pos, tn, n_neg = _confusion(scores, labels, threshold)
    p, n = int(n_pos.sum()), int(n_neg.sum())
    if p == 0 or n == 0:
        return float("nan")
    return 0.5 * (int(tp.sum()) / p + int(tn.sum()) / n)


# --- AP of an oracle on the evaluation set, from packed bit rows (docs/design.md) -----------
def ap_from_counts(scores: np.ndarray, n_pos: np.ndarray, n_tot: np.ndarray) -> float:
    """Step-wise average precision from per-score counts: ``n_pos[k]`` positives among
    ``n_tot[k]`` scenes scoring ``scores[k]``; equal scores form one threshold.

    Posterior scores lie in [0, 1] and sums of the same weights in another order can differ in
    the last bits, so scores are compared to 12 decimals."""
    rounded = np.round(-np.asarray(scores, np.float64), 12)
    values, inv = np.unique(rounded, return_inverse=True)  # descending scores
    pos = np.bincount(inv, weights=n_pos, minlength=len(values))
    tot = np.bincount(inv, weights=n_tot, minlength=len(values))
    total_pos = pos.sum()
    if total_pos == 0:
        return float("nan")
    tp, seen = np.cumsum(pos), np.cumsum(tot)
    return float(np.sum(pos / total_pos * tp / np.maximum(seen, 1)))


_NIBBLE_BITS = (np.arange(16)[:, None] >> np.arange(4)) & 1  # (16, 4): the bits of each nibble
_CELL_MAX_GROUPS = 8  # with more groups the cells mostly outgrow _MAX_CELLS (measured)
_MAX_CELLS = 16  # beyond this many distinct signatures, scoring every scene is cheaper


def _ap_by_cells(reps: np.ndarray, wg: np.ndarray, everything: np.ndarray, label_words):
    """AP from the cells of the partition of the evaluation set by the groups' rows: split
    every cell by each row in turn (cell & row, cell & ~row), drop empty cells; each final cell
    is one signature. Only packed words are touched: no scene is looked at one by one.
    Returns None when the cells outgrow `_MAX_CELLS`."""
    cells, scores = everything[None, :], np.zeros(1)  # (C, ceil(M / 64)), (C,)
    for row, weight in zip(reps, wg, strict=True):
        cells = np.concatenate([cells & row, cells & ~row])
        scores = np.r_[scores + weight, scores]
        n_tot = np.bitwise_count(cells).sum(1)
        keep = n_tot > 0
        if keep.sum() > _MAX_CELLS:
            return None
        cells, scores, n_tot = cells[keep], scores[keep], n_tot[keep]
    n_pos = np.bitwise_count(cells & label_words).sum(1)
    return ap_from_counts(scores, n_pos, n_tot)


def oracle_average_precision(
    ev: EvalSet,
    label: np.ndarray,
    idx: np.ndarray,
    w: np.ndarray,
    groups: np.ndarray,
    label_words: np.ndarray | None = None,
) -> float:
    """AP on the evaluation set of an oracle whose posterior puts mass `w` on the concepts
    `idx`: a scene scores the mass of the hypotheses that hold on it.

    A scene's score depends only on which consistent synonym groups hold on it. With few
    groups, the partition of the scenes by them is split on packed rows (`_ap_by_cells`);
    otherwise every scene is scored from byte codes of the groups' rows (one table look-up
    per 8 groups) and AP is read off the sorted scores (`_ap_of_scores`).

    Args:
        ev: the evaluation set.
        label: (M,) bool ground truth of the episode's concept on the evaluation set.
        idx, w: the posterior's concepts and weights (`Oracle.posterior`).
        groups: (H,) the synonym group of every concept of the bank.
        label_words: `label` packed (`ev.rows[concept]`), if at hand.
    """
    m = len(ev)
    if len(idx) == 0:
        return float(label.sum() / m)
    reps, wg = _group_rows(ev, idx, w, groups)
    if len(wg) <= _CELL_MAX_GROUPS:
        if label_words is None:
            label_words = pack_rows(label)
        ap = _ap_by_cells(reps, wg, ev.all_scenes, label_words)
        if ap is not None:
            return ap
    return _ap_of_scores(_scene_scores(reps, wg, m), label)


def _group_rows(ev: EvalSet, idx: np.ndarray, w: np.ndarray, groups: np.ndarray):
    """(G, ceil(M / 64)) one evaluation-set row per synonym group of `idx`, and (G,) the
    posterior mass of each group."""
    _, first, inv = np.unique(groups[idx], return_index=True, return_inverse=True)
    return ev.rows[idx[first]], np.bincount(inv, weights=w)


def oracle_scores(ev: EvalSet, idx: np.ndarray, w: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """(M,) the score of every evaluation scene under a posterior with mass `w` on the
    concepts `idx` (as `oracle_average_precision` scores them, summed per synonym group)."""
    if len(idx) == 0:
        return np.zeros(len(ev))
    reps, wg = _group_rows(ev, idx, w, groups)
    return _scene_scores(reps, wg, len(ev))


class FixedScores:
    """One (M,) score vector ranked against many labels: the scores rounded and sorted once,
    ties handled as `oracle_average_precision` does (scores compared to 12 decimals, equal
    scores one threshold). Calling it with (K, M) or (M,) bool labels gives (K,) APs, NaN for
    a row without positives."""

    def __init__(self, scores: np.ndarray):
        self.scores = np.round(np.asarray(scores, np.float64), 12)
        self.ordered = np.sort(self.scores)

    def __call__(self, labels: np.ndarray) -> np.ndarray:
        labels = np.asarray(labels, bool).reshape(-1, len(self.scores))
        return np.array([_ap_of_scores(self.scores, y, self.ordered) for y in labels])

    def of_positives(self, positives: np.ndarray) -> float:
        """The AP against the label whose positives are the scenes `positives` (positions,
        ascending: the same AP as their (M,) label, without one)."""
        return _ap_of_scores(self.scores, positives, self.ordered)


def _scene_scores(reps: np.ndarray, wg: np.ndarray, m: int) -> np.ndarray:
    """(M,) scores ``sum_g wg[g] [row g holds]`` of packed rows (G, ceil(M / 64)): each block
    of 8 rows becomes one byte per scene, scored by a 256-entry table of its weights."""
    codes = byte_codes(reps, m)  # (ceil(G / 8), M)
    w = np.zeros((len(codes), 2, 1, 4))
    w.reshape(-1)[: len(wg)] = wg
    nibbles = (w * _NIBBLE_BITS).sum(-1)  # (ceil(G / 8), 2, 16): the low and high 4 rows
    tables = (nibbles[:, 1, :, None] + nibbles[:, 0, None, :]).reshape(len(codes), 256)
    scores, part = np.zeros(m), np.empty(m)
    code = np.empty(m, np.intp)  # take() is ~5x faster on intp indices with mode="clip"
    for table, byte in zip(tables, codes, strict=True):
        code[:] = byte
        scores += table.take(code, out=part, mode="clip")  # codes are < 256: nothing clips
    return scores


def _ap_of_scores(
    scores: np.ndarray, label: np.ndarray, ordered: np.ndarray | None = None
) -> float:
    """Step-wise AP of (M,) scores against (M,) bool labels (or the positives' positions),
    compared to 12 decimals (as in `ap_from_counts`): only the distinct positive scores are
    thresholds, and the scenes at or above each are counted in one sort of the scores (no
    argsort); `ordered`: the rounded scores already sorted (then `scores` must be rounded
    too)."""
    if ordered is None:
        scores = np.round(scores, 12)
        ordered = np.sort(scores)
    thresholds, pos_at = np.unique(scores[label], return_counts=True)  # ascending
    if len(thresholds) == 0:
        return float("nan")
    n_ge = len(scores) - np.searchsorted(ordered, thresholds, side="left")
    tp_ge = np.cumsum(pos_at[::-1])[::-1]
    return float(np.sum(pos_at * tp_ge / n_ge) / pos_at.sum())


def random_average_precision(rng: np.random.Generator, n_pos: int, m: int) -> float:
    """AP of uniform random scores on `m` scenes of which `n_pos` are positive, simulated
    exactly: the positives' ranks are a uniform random `n_pos`-subset of the `m` ranks."""
    ranks = np.sort(rng.choice(m, size=n_pos, replace=False)) + 1
    return float(np.mean(np.arange(1, n_pos + 1) / ranks))


def roc_auc(scores: ArrayLike, labels: ArrayLike) -> float | np.ndarray:
    """Area under the ROC curve of `scores` for binary `labels` along the last axis: the
    probability that a random positive scores above a random negative, ties counting one half
    (Mann-Whitney U from average ranks). One row gives a float, (..., M) arrays an array of
    (...); NaN for a row without both classes."""
    from scipy import stats  # imported on first use: commands check their config first

    s = np.asarray(scores, np.float64)
    y = np.asarray(labels).astype(bool)
    n1 = y.sum(-1)
    n0 = y.shape[-1] - n1
    ranks = stats.rankdata(s, axis=-1)  # average ranks for ties
    u = np.where(y, ranks, 0.0).sum(-1) - n1 * (n1 + 1) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = u / (n1 * n0)
    return float(auc) if auc.ndim == 0 else auc

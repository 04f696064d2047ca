"""Tests of curi.oracles.metrics: AP against a brute-force enumeration of thresholds (ties
included), class-balanced accuracy per episode and pooled, batched against per-row, and the
oracles' AP on the evaluation set from packed rows against plain AP."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curi.bits import unpack_rows
from curi.episodes import EpisodeSampler
from curi.oracles import metrics
from curi.oracles.eval_set import EvalSet
from curi.oracles.metrics import (
    ap_from_counts,
    average_precision,
    average_precision_batch,
    class_balanced_accuracy,
    class_balanced_accuracy_batch,
    oracle_average_precision,
    pooled_class_balanced_accuracy,
    random_average_precision,
)
from curi.oracles.oracle import Oracle
from curi.splits import make_split


def brute_ap(scores: list[float], labels: list[int]) -> float:
    """AP by walking the distinct thresholds from the highest down, in plain Python."""
    n_pos = sum(labels)
    if n_pos == 0:
        return math.nan
    ap, prev_recall = 0.0, 0.0
    for t in sorted(set(scores), reverse=True):
        kept = [y for s, y in zip(scores, labels, strict=True) if s >= t]
        precision, recall = sum(kept) / len(kept), sum(kept) / n_pos
        ap += (recall - prev_recall) * precision
        prev_recall = recall
    return ap


def brute_cba(scores: list[float], labels: list[int], threshold: float = 0.5) -> float:
    pos = [s > threshold for s, y in zip(scores, labels, strict=True) if y]
    neg = [s <= threshold for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return math.nan
    return 0.5 * (sum(pos) / len(pos) + sum(neg) / len(neg))


# A few values so that ties are common; negatives, both zeros and infinities exercise both
# sorting paths.
TIED = st.sampled_from(
    [0.0, -0.0, 0.25, 0.5, 0.5000000000000001, 1.0, 3.0, -1.0, math.inf, -math.inf]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.one_of(TIED, st.floats(-5, 5)), st.booleans()), min_size=1, max_size=40)
)
def test_ap_matches_brute_force(pairs):
    scores = [s for s, _ in pairs]
    labels = [int(y) for _, y in pairs]
    expected = brute_ap(scores, labels)
    got = average_precision(scores, labels)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("offset", [0.0, -0.5])  # non-negative (integer-key) and general paths
@pytest.mark.parametrize("levels", [2, 7, None])  # heavy ties, some ties, continuous
def test_ap_batch_equals_rows_and_brute_force(offset, levels):
    rng = np.random.default_rng(3)
    scores = rng.random((37, 61))
    if levels is not None:
        scores = np.round(scores * levels) / levels
    scores += offset
    labels = rng.random((37, 61)) < rng.random((37, 1))  # positive rates vary by row
    labels[0] = False  # a row without positives
    labels[1] = True  # a row of positives only
    expected = np.array(
        [brute_ap(s.tolist(), y.astype(int).tolist()) for s, y in zip(scores, labels, strict=True)]
    )
    for max_elements in (1, 100, 61 * 5, 10**6):  # chunk edges inside and across rows
        got = average_precision_batch(scores, labels, max_elements=max_elements)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12, equal_nan=True)
    rows = [average_precision(s, y) for s, y in zip(scores, labels, strict=True)]
    np.testing.assert_allclose(average_precision_batch(scores, labels), rows, equal_nan=True)
    assert np.isnan(expected[0]) and expected[1] == 1.0


def test_ap_agrees_with_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(5)
    scores = np.round(rng.random((20, 300)) * 10) / 10
    labels = rng.random((20, 300)) < 0.2
    expected = [metrics.average_precision_score(y, s) for s, y in zip(scores, labels, strict=True)]
    np.testing.assert_allclose(average_precision_batch(scores, labels), expected, atol=1e-12)


@pytest.mark.parametrize("value", [0.0, 0.3, 1.0, -2.0])
def test_ap_of_equal_scores_is_the_positive_rate(value):
    labels = np.array([1, 0, 0, 1, 0, 0, 0, 1, 0, 0])
    assert average_precision(np.full(10, value), labels) == pytest.approx(0.3)
    batch = average_precision_batch(np.full((3, 10), value), np.stack([labels, 1 - labels, labels]))
    np.testing.assert_allclose(batch, [0.3, 0.7, 0.3])


def test_ap_perfect_ranking_is_one_and_worst_is_known():
    labels = np.array([0, 1, 0, 1, 1, 0])
    perfect = np.where(labels == 1, 0.9, 0.1)  # ties only inside each class
    assert average_precision(perfect, labels) == 1.0
    # positives last: precision at the 3 positive thresholds is 1/4, 2/5, 3/6
    worst = np.array([0.6, 0.3, 0.5, 0.2, 0.1, 0.4])
    assert average_precision(worst, labels) == pytest.approx((1 / 4 + 2 / 5 + 3 / 6) / 3)


def test_ap_zeros_of_both_signs_tie_and_dtypes_are_accepted():
    assert average_precision([0.0, -0.0], [0, 1]) == 0.5
    assert average_precision(np.array([3, 1, 2], dtype=np.int64), [True, False, False]) == 1.0
    s32 = np.array([0.1, 0.7, 0.7, 0.2], dtype=np.float32)
    assert average_precision(s32, [0, 1, 0, 0]) == pytest.approx(0.5)


def test_ap_without_positives_is_nan_and_empty_batch_is_empty():
    assert math.isnan(average_precision([0.2, 0.9], [0, 0]))
    assert average_precision_batch(np.zeros((0, 5)), np.zeros((0, 5), dtype=bool)).shape == (0,)


@pytest.mark.parametrize(
    ("scores", "labels", "match"),
    [
        ([[0.1, float("nan")]], [[1, 0]], "NaN"),
        ([[0.1, 0.2]], [[2, 0]], "0/1"),
        ([[0.1, 0.2]], [[1, 0, 0]], "same shape"),
        ([0.1, 0.2], [1, 0], "2-D"),
        (np.zeros((2, 0)), np.zeros((2, 0)), "at least one"),
    ],
)
def test_ap_batch_rejects_bad_input(scores, labels, match):
    with pytest.raises(ValueError, match=match):
        average_precision_batch(scores, labels)


def test_ap_rejects_bad_max_elements_and_2d_single():
    with pytest.raises(ValueError, match="max_elements"):
        average_precision_batch([[0.1]], [[1]], max_elements=0)
    with pytest.raises(ValueError, match="1-D"):
        average_precision([[0.1]], [[1]])


def test_cba_of_all_zero_scores_is_half():
    labels = np.array([[1, 1, 1, 1, 1] + [0] * 20] * 4)
    np.testing.assert_array_equal(class_balanced_accuracy_batch(np.zeros((4, 25)), labels), 0.5)
    assert pooled_class_balanced_accuracy(np.zeros((4, 25)), labels) == 0.5
    assert class_balanced_accuracy(np.zeros(25), labels[0]) == 0.5


def test_cba_hand_examples_and_strict_threshold():
    # positives 0.9, 0.7 right; negatives 0.6 wrong, 0.1 and 0.3 right -> (1 + 2/3) / 2
    assert class_balanced_accuracy([0.9, 0.7, 0.6, 0.1, 0.3], [1, 1, 0, 0, 0]) == pytest.approx(
        5 / 6
    )
    assert class_balanced_accuracy([0.5, 0.5], [1, 0]) == 0.5  # 0.5 is not > 0.5
    assert class_balanced_accuracy([0.5, 0.5], [1, 0], threshold=0.4) == 0.5
    assert class_balanced_accuracy([0.5, 0.2], [1, 0], threshold=0.4) == 1.0


def test_cba_batch_equals_rows_and_brute_force():
    rng = np.random.default_rng(11)
    scores = np.round(rng.random((50, 25)) * 4) / 4  # many exact 0.5s
    labels = rng.random((50, 25)) < 0.3
    labels[0] = False  # no positives -> NaN
    expected = [brute_cba(s.tolist(), y.tolist()) for s, y in zip(scores, labels, strict=True)]
    got = class_balanced_accuracy_batch(scores, labels)
    np.testing.assert_allclose(got, expected, equal_nan=True)
    rows = [class_balanced_accuracy(s, y) for s, y in zip(scores, labels, strict=True)]
    np.testing.assert_allclose(got, rows, equal_nan=True)


def test_pooled_cba_pools_classes_over_episodes():
    # episode 1: 1 positive (right), 3 negatives (all right) -> 1.0
    # episode 2: 3 positives (1 right), 1 negative (wrong) -> (1/3 + 0) / 2
    scores = np.array([[0.9, 0.1, 0.1, 0.1], [0.9, 0.1, 0.1, 0.9]])
    labels = np.array([[1, 0, 0, 0], [1, 1, 1, 0]])
    np.testing.assert_allclose(class_balanced_accuracy_batch(scores, labels), [1.0, 1 / 6])
    # pooled: positives 2 of 4 right, negatives 3 of 4 right
    assert pooled_class_balanced_accuracy(scores, labels) == pytest.approx((2 / 4 + 3 / 4) / 2)
    assert math.isnan(pooled_class_balanced_accuracy(scores, np.zeros((2, 4), dtype=int)))


def test_cba_rejects_nan_scores():
    with pytest.raises(ValueError, match="NaN"):
        class_balanced_accuracy_batch([[float("nan"), 0.1]], [[1, 0]])


# --- AP of an oracle on the evaluation set ----------------------------------------------------
@pytest.fixture(scope="module")
def evalset(tiny_bank):
    return EvalSet.from_bank(tiny_bank)


@pytest.mark.parametrize("max_cells", [64, 0])  # 0: per-scene scores only
def test_grouped_ap_equals_plain_ap(tiny_bank, evalset, monkeypatch, max_cells):
    monkeypatch.setattr(metrics, "_MAX_CELLS", max_cells)
    m = len(evalset)
    dense = unpack_rows(evalset.rows, m)
    split = make_split(tiny_bank, "concept_iid")
    groups = np.asarray(tiny_bank.groups)
    sizes = set()
    for negatives, hypotheses in [(n, h) for n in ("hard", "easy") for h in (None, split.train)]:
        oracle = Oracle(tiny_bank, hypotheses, negatives=negatives)
        sampler = EpisodeSampler(tiny_bank, split, "test", negatives, seed=2, size=80)
        for i in range(len(sampler)):
            e = sampler[i]
            idx, w = oracle.posterior(e.support_ids, e.support_labels)
            label = dense[e.concept]
            scores = np.round(w @ dense[idx], 12) if len(idx) else np.zeros(m)
            want = average_precision(scores, label)
            got = oracle_average_precision(evalset, label, idx, w, groups)
            assert got == pytest.approx(want, abs=1e-12)
            n_groups = len(np.unique(groups[idx]))
            sizes.add(0 if n_groups == 0 else 1 if n_groups <= 8 else 2 if n_groups <= 16 else 3)
    assert sizes == {0, 1, 2, 3}  # none, one block of byte codes (or cells), two, more


def test_ap_from_counts_all_equal_scores_is_positive_rate():
    assert ap_from_counts(np.array([0.3]), np.array([7]), np.array([100])) == pytest.approx(0.07)


def test_random_ap_matches_uniform_scores_in_expectation():
    rng = np.random.default_rng(0)
    sim = np.mean([random_average_precision(rng, 5, 200) for _ in range(3000)])
    labels = np.zeros(200, bool)
    labels[:5] = True
    ref = np.mean([average_precision(rng.random(200), labels) for _ in range(3000)])
    assert sim == pytest.approx(ref, abs=0.01)


def test_ap_of_scores_matches_plain_ap_with_ties_and_zeros():
    rng = np.random.default_rng(0)
    for _ in range(300):
        m = int(rng.integers(1, 80))
        scores = rng.choice([0.0, 1e-14, 0.1, 0.25, 0.5, 0.9], size=m) * rng.integers(1, 3, size=m)
        labels = rng.random(m) < 0.3
        if not labels.any():
            assert np.isnan(metrics._ap_of_scores(scores, labels))
            continue
        want = average_precision(np.round(scores, 12), labels)
        assert metrics._ap_of_scores(scores, labels) == pytest.approx(want, abs=1e-12)

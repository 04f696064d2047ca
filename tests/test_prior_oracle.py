"""The prior-only oracle (`Oracle.prior_only`): the prior predictive against brute force (the
scalar reference interpreter, one hypothesis at a time), its AP and class-balanced accuracy on
episodes against a plain re-computation, and the strong oracle with an empty support set."""

import math

import numpy as np
import pytest
from reference import reference_eval

from curi.bits import unpack_rows
from curi.episodes import EpisodeSampler, EpisodeSpec
from curi.oracles import Oracle
from curi.oracles.eval_set import EvalSet
from curi.oracles.gap import score_split
from curi.prior import PRIORS
from curi.splits import make_split


def _prior(bank, prior: str) -> list[float]:
    """The normalised prior of every concept, one at a time."""
    logp = bank.log_prior if prior == "log_linear" else bank.pcfg_logprob
    top = max(float(x) for x in logp)
    p = [math.exp(float(x) - top) for x in logp]
    total = sum(p)
    return [x / total for x in p]


def _plain_ap(scores: np.ndarray, labels: np.ndarray) -> float:
    """Step-wise AP, from the highest score down; scores equal to 12 decimals are one
    threshold (as the oracles' AP compares them)."""
    at: dict[float, list[int]] = {}  # threshold -> [scenes, positives]
    for x, y in zip(scores.tolist(), labels.tolist(), strict=True):
        cell = at.setdefault(round(x, 12), [0, 0])
        cell[0], cell[1] = cell[0] + 1, cell[1] + int(y)
    total = int(labels.sum())
    ap, seen, tp = 0.0, 0, 0
    for t in sorted(at, reverse=True):
        seen, tp = seen + at[t][0], tp + at[t][1]
        ap += at[t][1] / total * tp / seen
    return ap


@pytest.mark.parametrize("prior", PRIORS)
def test_prior_predictive_against_brute_force(tiny_bank, prior):
    oracle = Oracle.prior_only(tiny_bank, prior=prior)
    w = _prior(tiny_bank, prior)
    ids = np.random.default_rng(3).choice(tiny_bank.num_scenes, 6, replace=False)
    want = []
    for rec in tiny_bank.scene_records(ids):  # every hypothesis on every scene, by hand
        want.append(sum(w[h] for h, c in enumerate(tiny_bank.concepts) if reference_eval(c, rec)))
    assert max(want) > 0 and min(want) < max(want)  # the scenes tell hypotheses apart
    np.testing.assert_allclose(oracle.predictive(ids), want, rtol=1e-12, atol=1e-15)
    # cached scenes come back the same, in any order and with repeats
    again = np.r_[ids[::-1], ids[:2]]
    np.testing.assert_allclose(oracle.predictive(again), np.r_[want[::-1], want[:2]], rtol=1e-12)


def test_support_is_ignored_and_equals_the_strong_oracle_without_support(tiny_bank):
    """The prior predictive is the strong oracle's posterior predictive given no support."""
    split = make_split(tiny_bank, "binding_color")
    strong = Oracle.strong(tiny_bank)
    none = np.zeros(0, np.int64)
    idx0, w0 = strong.posterior(none, none)
    prior_only = Oracle.prior_only(tiny_bank, negatives="easy", likelihood="consistent")
    assert isinstance(prior_only, Oracle)
    for e in (
        EpisodeSampler(tiny_bank, split, "test", "hard", seed=1, size=4)[i] for i in range(4)
    ):
        idx, w = prior_only.posterior(e.support_ids, e.support_labels)
        np.testing.assert_array_equal(idx, idx0)
        np.testing.assert_allclose(w, w0, rtol=1e-12)
        got = prior_only.predict(e.support_ids, e.support_labels, e.query_ids)
        np.testing.assert_allclose(got, strong.predict(none, none, e.query_ids), rtol=1e-12)


def test_ap_and_cba_on_episodes_equal_a_plain_recomputation(tiny_bank):
    split = make_split(tiny_bank, "counting")
    ev = EvalSet.from_bank(tiny_bank)
    n = 12
    spec = EpisodeSpec(split, "test", "hard", seed=4, size=n)
    row = score_split(
        tiny_bank, spec, ev, prior="log_linear", likelihood="size_principle", per_episode=True
    )
    # the prior predictive of every evaluation scene: one concept-major row at a time
    w = _prior(tiny_bank, "log_linear")
    truth = unpack_rows(ev.rows, len(ev))  # (H, M)
    eval_scores = np.zeros(len(ev))
    for h in range(len(tiny_bank)):
        eval_scores += w[h] * truth[h]
    by_scene = dict(zip(ev.ids.tolist(), eval_scores, strict=True))
    sampler = EpisodeSampler(tiny_bank, split, "test", "hard", seed=4, size=n)
    aps, cbas, tp, n_pos, tn, n_neg = [], [], 0, 0, 0, 0
    for i in range(n):
        e = sampler[i]
        aps.append(_plain_ap(eval_scores, truth[e.concept]))
        q = Oracle.prior_only(tiny_bank).predictive(e.query_ids)
        for j, sid in enumerate(e.query_ids.tolist()):  # queries in the evaluation set agree
            if sid in by_scene:
                assert q[j] == pytest.approx(by_scene[sid], rel=1e-12)
        y = e.query_labels.astype(bool)
        pred = q > 0.5
        cbas.append(0.5 * ((pred & y).sum() / y.sum() + (~pred & ~y).sum() / (~y).sum()))
        tp, n_pos = tp + (pred & y).sum(), n_pos + y.sum()
        tn, n_neg = tn + (~pred & ~y).sum(), n_neg + (~y).sum()
    np.testing.assert_allclose(row["episode_ap"]["prior"], aps, rtol=1e-12)
    assert row["map_prior"] == pytest.approx(np.mean(aps), rel=1e-12)
    assert row["cba_prior"] == pytest.approx(np.mean(cbas))
    assert row["cba_pooled_prior"] == pytest.approx(0.5 * (tp / n_pos + tn / n_neg))
    assert 0 < row["map_prior"] < row["map_strong"]

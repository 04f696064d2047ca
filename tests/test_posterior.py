"""The posterior over hypotheses against brute-force enumeration of every hypothesis on a tiny
bank, and the consistent set against the episodes' alternates."""

import math

import numpy as np
import pytest

from curi.bits import pack_rows, unpack_rows
from curi.episodes import EpisodeSampler
from curi.posterior import Posterior, consistent_words, posterior_predictive
from curi.splits import make_split


@pytest.fixture(scope="module")
def dense(tiny_bank):
    return unpack_rows(np.asarray(tiny_bank.truth_words), tiny_bank.num_scenes)  # (H, N)


def brute_force(bank, dense, hyps, ids, labels, scenes, prior, likelihood, negatives):
    """Enumerate every hypothesis, exactly as the CURI paper (section 3) writes the posterior."""
    n, n_pos = bank.num_scenes, int(labels.sum())
    weights = {}
    for h in hyps:
        if not all(dense[h, s] == bool(y) for s, y in zip(ids, labels, strict=True)):
            continue
        lp = bank.log_prior[h] if prior == "log_linear" else bank.pcfg_logprob[h]
        if likelihood == "size_principle":
            size = dense[h].sum()
            lp += -n_pos * math.log(size)
            if negatives == "hard":
                lp += -(len(labels) - n_pos) * math.log(n - size)
        weights[h] = math.exp(lp)
    z = sum(weights.values())
    return np.array(
        [sum(w for h, w in weights.items() if dense[h, u]) / z if z else 0.0 for u in scenes]
    )


@pytest.mark.parametrize("prior", ["log_linear", "pcfg"])
@pytest.mark.parametrize("likelihood", ["size_principle", "consistent"])
@pytest.mark.parametrize("negatives", ["hard", "easy"])
def test_strong_and_weak_match_brute_force(tiny_bank, dense, prior, likelihood, negatives):
    split = make_split(tiny_bank, "binding_shape")
    sampler = EpisodeSampler(tiny_bank, split, "test", negatives, seed=1, size=6)
    for hyps, name in ((np.arange(len(tiny_bank)), "strong"), (split.train, "weak")):
        oracle = Posterior(
            tiny_bank,
            None if name == "strong" else hyps,
            prior=prior,
            likelihood=likelihood,
            negatives=negatives,
        )
        for i in range(len(sampler)):
            e = sampler[i]
            scenes = np.r_[e.query_ids, tiny_bank.eval_ids[:200]]
            got = oracle.predict(e.support_ids, e.support_labels, scenes)
            want = brute_force(
                tiny_bank,
                dense,
                hyps,
                e.support_ids,
                e.support_labels,
                scenes,
                prior,
                likelihood,
                negatives,
            )
            np.testing.assert_allclose(got, want, atol=1e-12, err_msg=f"{name} episode {i}")


def test_strong_oracle_always_contains_the_true_concept(tiny_bank):
    sampler = EpisodeSampler(tiny_bank, "concept_iid", "test", "hard", seed=0, size=30)
    oracle = Posterior(tiny_bank)
    for i in range(30):
        e = sampler[i]
        idx, w = oracle.posterior(e.support_ids, e.support_labels)
        assert e.concept in idx
        assert w.sum() == pytest.approx(1.0)
        assert (
            oracle.predict(e.support_ids, e.support_labels, e.support_ids[e.support_labels == 1])
            > 0.99
        ).all()


def test_no_consistent_hypothesis_gives_zero_scores(tiny_bank):
    e = EpisodeSampler(tiny_bank, "binding_color", "test", "hard", seed=0, size=1)[0]
    scores = posterior_predictive(tiny_bank, e, np.array([], np.int64), e.query_ids)
    assert (scores == 0).all()


def test_bad_options(tiny_bank):
    with pytest.raises(ValueError, match="prior"):
        Posterior(tiny_bank, prior="flat")
    with pytest.raises(ValueError, match="likelihood"):
        Posterior(tiny_bank, likelihood="fuzzy")


@pytest.mark.parametrize("n_pos, n_neg", [(5, 20), (3, 0), (0, 4), (0, 0)])
@pytest.mark.parametrize("masked", [False, True])
def test_consistent_words_match_brute_force(tiny_bank, dense, n_pos, n_neg, masked):
    rng = np.random.default_rng(n_pos * 10 + n_neg)
    n_hyp = len(tiny_bank)
    mask_bits = rng.random(n_hyp) < 0.5 if masked else np.ones(n_hyp, bool)
    mask = pack_rows(mask_bits) if masked else None
    for _ in range(20):
        h = int(rng.integers(n_hyp))
        pos = rng.choice(np.flatnonzero(dense[h]), n_pos, replace=False)
        neg = rng.choice(np.flatnonzero(~dense[h]), n_neg, replace=False)
        ids = np.r_[pos, neg].astype(np.int64)
        labels = np.r_[np.ones(n_pos, np.int8), np.zeros(n_neg, np.int8)]
        words = consistent_words(tiny_bank, ids, labels, mask)
        want = mask_bits & dense[:, pos].all(1) & ~dense[:, neg].any(1)
        assert words.shape == (-(-n_hyp // 64),) and words.dtype == np.uint64
        np.testing.assert_array_equal(unpack_rows(words, n_hyp), want)
        assert not (unpack_rows(words, 64 * len(words))[n_hyp:]).any()  # padding stays clear


def test_episode_alternates_are_the_consistent_set_of_the_positives(tiny_bank):
    sampler = EpisodeSampler(tiny_bank, "concept_iid", "test", "hard", seed=4, size=20)
    for i in range(len(sampler)):
        e = sampler[i]
        for ids, labels, alternates in (
            (e.support_ids, e.support_labels, e.support_alternates),
            (e.query_ids, e.query_labels, e.query_alternates),
        ):
            positives = ids[labels == 1]
            idx = Posterior(tiny_bank).consistent(positives, np.ones(5, np.int8))
            np.testing.assert_array_equal(alternates, idx[idx != e.concept])


@pytest.mark.parametrize("likelihood", ["size_principle", "consistent"])
@pytest.mark.parametrize("negatives", ["hard", "easy"])
def test_batched_posteriors_equal_one_by_one_to_the_bits(tiny_bank, likelihood, negatives):
    # the gap report scores a chunk of episodes at once: the same weights and query scores,
    # not merely close ones (a score of 0.5 decides a class-balanced accuracy)
    split = make_split(tiny_bank, "concept_iid")
    sampler = EpisodeSampler(tiny_bank, split, "test", negatives, seed=4, size=120)
    eps = [sampler[i] for i in range(len(sampler))]
    ids, labels = (
        np.stack([getattr(e, k) for e in eps]) for k in ("support_ids", "support_labels")
    )
    queries = np.stack([e.query_ids for e in eps])
    kinds = set()
    for hyps in (None, split.train):
        post = Posterior(tiny_bank, hyps, likelihood=likelihood, negatives=negatives)
        batch = post.posteriors(ids, labels)
        scores = batch.predictive(tiny_bank, queries)
        for j, e in enumerate(eps):
            idx, w = post.posterior(e.support_ids, e.support_labels)
            got_idx, got_w = batch[j]
            np.testing.assert_array_equal(got_idx, idx)
            assert got_w.tobytes() == w.tobytes()
            assert scores[j].tobytes() == post.predict(ids[j], labels[j], queries[j]).tobytes()
            kinds.add(min(len(idx), 2))
        picked = batch.select(np.array([5, 0, 5]))
        for j, k in enumerate([5, 0, 5]):
            np.testing.assert_array_equal(picked[j][1], batch[k][1])
    assert kinds == {0, 1, 2}  # no consistent hypothesis, one, several

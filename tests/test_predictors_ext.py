"""The extension predictors (curi.extension_predictors, CURI extensions of `curi difficulty`)
against a plain re-implementation (Python loops over concepts and scenes) on the tiny bank,
their registration in `curi.predictors`, and their bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from curi import make_split
from curi.errors import OptionError
from curi.extension_predictors import (
    NUM_NEGATIVES,
    NUM_POSITIVES,
    ExtensionIndex,
    extension_easiness,
    leave_group_out,
    support_draws,
)
from curi.predictors import EXTENSIONS, predictor_scores

DRAWS = 2


@pytest.fixture(scope="module")
def index(tiny_bank):
    return ExtensionIndex.from_bank(tiny_bank, sample_scenes=300)


@pytest.fixture(scope="module")
def truth(tiny_bank):
    """Each concept's scenes, as a Python list of booleans (the plain side reads nothing else)."""
    return [tiny_bank.truth(i).tolist() for i in range(len(tiny_bank))]


def _agreement(truth, eval_ids, h, g) -> float:
    both = sum(1 for s in eval_ids if truth[h][s] and truth[g][s])
    size_h = sum(1 for s in eval_ids if truth[h][s])
    size_g = sum(1 for s in eval_ids if truth[g][s])
    return both * both / (size_h * size_g) if size_h and size_g else 0.0


def _plain(bank, truth, index, train, h, *, seed):
    """(ext-nn, ext-pos, ext-left, ext-neg) of concept h, loop by loop."""
    eval_ids = np.asarray(bank.eval_ids).tolist()
    sample = index.sample.tolist()
    n = bank.num_scenes
    nn = max(_agreement(truth, eval_ids, h, g) for g in train)
    pos = left = neg = 0.0
    for ids in support_draws(bank, h, seed=seed, draws=DRAWS).tolist():
        cons = [g for g in train if all(truth[g][s] for s in ids)]
        if not cons:
            continue
        agree = {g: _agreement(truth, eval_ids, h, g) for g in cons}
        w = {g: math.exp(bank.log_prior[g]) * float(bank.counts[g]) ** -NUM_POSITIVES for g in cons}
        pos += sum(w[g] * agree[g] for g in cons) / sum(w.values())
        alternates = [
            a for a in range(len(bank)) if a != h and all(truth[a][s] for s in ids)
        ]  # the whole bank's concepts true on the positives
        pool = [s for s in sample if not truth[h][s] and any(truth[a][s] for a in alternates)]
        if not pool:
            pool = [s for s in sample if not truth[h][s]]
        survive = {
            g: (1 - sum(1 for s in pool if truth[g][s]) / len(pool)) ** NUM_NEGATIVES for g in cons
        }
        gone = 1.0
        for g in cons:
            gone *= 1 - survive[g]
        left += 1 - gone
        w2 = {g: w[g] * float(n - bank.counts[g]) ** -NUM_NEGATIVES * survive[g] for g in cons}
        if sum(w2.values()) > 0:
            neg += (1 - gone) * sum(w2[g] * agree[g] for g in cons) / sum(w2.values())
    return nn, pos / DRAWS, left / DRAWS, neg / DRAWS


def test_each_predictor_matches_a_plain_reimplementation(tiny_bank, truth, index):
    sp = make_split(tiny_bank, "boolean")
    test = sp.test[:3]
    train = sp.train[::4]  # a quarter of the training concepts keeps the loops short
    got = extension_easiness(
        index, train, test, ["ext-nn", "ext-pos", "ext-left", "ext-neg"], seed=5, draws=DRAWS
    )
    for j, h in enumerate(test.tolist()):
        want = _plain(tiny_bank, truth, index, train.tolist(), h, seed=5)
        for k, name in enumerate(["ext-nn", "ext-pos", "ext-left", "ext-neg"]):
            assert got[name][j] == pytest.approx(want[k], rel=1e-6, abs=1e-9), (name, h)
    near = got["nearest"]
    for j, h in enumerate(test.tolist()):  # the nearest training concept attains ext-nn
        eval_ids = np.asarray(tiny_bank.eval_ids).tolist()
        assert _agreement(truth, eval_ids, h, int(near[j])) == pytest.approx(got["ext-nn"][j])


def test_values_range_seed_and_edge_cases(tiny_bank, index):
    sp = make_split(tiny_bank, "extrinsic")
    names = list(EXTENSIONS)
    a = extension_easiness(index, sp.train, sp.test[:5], names, seed=1, draws=DRAWS)
    b = extension_easiness(index, sp.train, sp.test[:5], names, seed=1, draws=DRAWS)
    for name in names:
        assert np.array_equal(a[name], b[name])
        assert ((a[name] >= 0) & (a[name] <= 1 + 1e-12)).all()
    assert (a["ext-neg"] <= a["ext-left"] + 1e-12).all()
    # a concept in its own training set (instance IID): it agrees with itself
    own = extension_easiness(index, sp.test[:3], sp.test[:3], ["ext-nn"])
    assert own["ext-nn"] == pytest.approx(1.0)
    empty = extension_easiness(index, np.array([], int), sp.test[:2], names)
    assert all((empty[n] == 0).all() for n in names)
    with pytest.raises(ValueError, match="unknown extension predictors"):
        extension_easiness(index, sp.train, sp.test[:2], ["ext-nope"])


def test_leave_group_out_is_the_split_score_with_every_other_group(tiny_bank, index):
    scores = leave_group_out(index, "ext-neg", seed=2, draws=DRAWS)
    groups = np.asarray(tiny_bank.groups)
    for g in np.unique(groups)[:3]:
        members = np.flatnonzero(groups == g)
        rest = np.flatnonzero(groups != g)
        one = extension_easiness(index, rest, members[:1], ["ext-neg"], seed=2, draws=DRAWS)
        assert scores[members] == pytest.approx(one["ext-neg"][0])  # one score per group
    with pytest.raises(ValueError, match="name must be one of ext-neg, ext-left, ext-pos, got"):
        leave_group_out(index, "ext-nn")


def test_registered_in_predictor_scores(tiny_bank, index):
    sp = make_split(tiny_bank, "boolean")
    splits = [("boolean", sp.train, sp.test[:4])]
    res = predictor_scores(
        tiny_bank.concepts,
        splits,
        predictors=["2-LS", *EXTENSIONS],
        bank=tiny_bank,
        extensions=index,
    )["boolean"]
    direct = extension_easiness(index, sp.train, sp.test[:4], list(EXTENSIONS))
    for name in EXTENSIONS:
        assert np.array_equal(res[name].easiness, direct[name])
    assert res["ext-nn"].hardest == [tiny_bank.concepts[i] for i in direct["nearest"]]
    plain = predictor_scores(tiny_bank.concepts, splits, predictors=["2-LS"])  # no bank needed
    assert set(plain["boolean"]) == {"2-LS"}
    with pytest.raises(ValueError, match=r"read the bank's extensions: pass bank="):
        predictor_scores(tiny_bank.concepts, splits, predictors=["ext-neg"])
    with pytest.raises(OptionError, match=r"^predictors must be one of .*, got 'ext-nope' \(did"):
        predictor_scores(tiny_bank.concepts, splits, predictors=["ext-nope"], bank=tiny_bank)

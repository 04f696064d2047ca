"""Scoring any model with the benchmark's metrics (`curi.oracles.model_score`): a model that is
the strong (or weak) oracle scores exactly as that oracle, a random model near chance, and the
shuffled order of support and query sets changes no oracle's answer; inputs come from records or
from scene ids."""

import numpy as np
import pytest

from curi import EpisodeSampler, make_split
from curi.errors import ConfigError
from curi.oracles.model_score import score_model
from curi.posterior import Posterior


def _as_model(posterior):
    """A `Predict` callable backed by an oracle (records carry their scene ids)."""

    def predict(support, labels, targets):
        ids = np.array([r["id"] for r in support])
        return posterior.predict(ids, np.asarray(labels), np.array([r["id"] for r in targets]))

    return predict


def test_an_oracle_as_the_model_scores_as_that_oracle(tiny_bank):
    split = make_split(tiny_bank, "binding_color")
    strong = score_model(_as_model(Posterior(tiny_bank)), tiny_bank, split, episodes=20)
    row = strong["splits"][0]
    assert row["map"] == pytest.approx(row["map_strong"]) and row["cba"] == pytest.approx(
        row["cba_strong"]
    )
    weak = score_model(_as_model(Posterior(tiny_bank, split.train)), tiny_bank, split, episodes=20)
    row = weak["splits"][0]
    assert row["map"] == pytest.approx(row["map_weak"], abs=1e-9)
    assert row["map"] < 0.5 < strong["splits"][0]["map"]  # binding: the weak oracle fails
    assert {c["split"] for c in strong["concepts"]} == {"binding_color"}


def test_the_prior_only_oracle_as_the_model_scores_as_that_oracle(tiny_bank):
    """The scoring API reports the prior-only oracle; a model that is it scores the same."""
    from curi.oracles import Oracle

    out = score_model(_as_model(Oracle.prior_only(tiny_bank)), tiny_bank, "counting", episodes=10)
    row = out["splits"][0]
    assert 0 < row["map_prior"] < row["map_strong"]
    assert row["map"] == pytest.approx(row["map_prior"], abs=1e-9)
    assert row["cba"] == pytest.approx(row["cba_prior"])
    assert row["cba_pooled"] == pytest.approx(row["cba_pooled_prior"])


def test_a_random_model_scores_near_chance(tiny_bank):
    rng = np.random.default_rng(0)
    out = score_model(lambda s, y, t: rng.random(len(t)), tiny_bank, "concept_iid", episodes=20)
    row = out["splits"][0]
    assert abs(row["map"] - row["map_random"]) < 0.05 and abs(row["cba"] - 0.5) < 0.1


def test_shuffled_sets_change_no_oracle_answer(tiny_bank):
    """Support and query sets come in a seeded random order; the oracles are order-invariant, so
    their answers are the same as on the positives-first order, permuted alongside."""
    kw = {"negatives": "hard", "seed": 2, "size": 40}
    shuffled = EpisodeSampler(tiny_bank, "concept_iid", "test", shuffle=True, **kw)
    ordered = EpisodeSampler(tiny_bank, "concept_iid", "test", shuffle=False, **kw)
    oracle = Posterior(tiny_bank)
    moved = 0
    for i in range(40):
        a, b = shuffled[i], ordered[i]
        assert a.concept == b.concept
        moved += not np.array_equal(a.query_labels, b.query_labels)
        pa = oracle.predict(a.support_ids, a.support_labels, a.query_ids)
        pb = oracle.predict(b.support_ids, b.support_labels, b.query_ids)
        order_a, order_b = np.argsort(a.query_ids), np.argsort(b.query_ids)
        np.testing.assert_array_equal(a.query_ids[order_a], b.query_ids[order_b])
        np.testing.assert_allclose(pa[order_a], pb[order_b])
    assert moved > 30  # the shuffle really moves the labels


def test_score_file_scores_a_saved_predictions_file_as_score_arrays(tiny_bank, tmp_path):
    """The README's file route: `model_predictions` saved with ``np.savez`` and read back by
    `score_file` gives the same metrics as scoring the arrays directly; a file without one of
    the two arrays, or no file, is one clear error."""
    from curi.errors import ConfigError
    from curi.oracles.model_score import model_predictions, score_arrays, score_file

    rng = np.random.default_rng(1)
    pred = model_predictions(
        lambda s, y, t: rng.random(len(t)), tiny_bank, "concept_iid", episodes=12
    )
    np.savez(tmp_path / "scores.npz", **pred)
    from_file = score_file(tmp_path / "scores.npz", tiny_bank, "concept_iid", threshold=0.5)
    direct = score_arrays(
        tiny_bank,
        "concept_iid",
        query_scores=pred["query_scores"],
        eval_scores=pred["eval_scores"],
        threshold=0.5,
    )
    assert from_file == direct and from_file["split"][0]["episodes"] == 12
    np.savez(tmp_path / "half.npz", query_scores=pred["query_scores"])
    with pytest.raises(ConfigError, match="lacks eval_scores;"):
        score_file(tmp_path / "half.npz", tiny_bank, "concept_iid")
    with pytest.raises(ConfigError, match="does not exist"):
        score_file(tmp_path / "missing.npz", tiny_bank, "concept_iid")
    np.save(tmp_path / "plain.npy", pred["query_scores"])
    with pytest.raises(ConfigError, match="cannot read the scores file"):
        score_file(tmp_path / "plain.npy", tiny_bank, "concept_iid")


def test_render_ids_gives_the_inputs_of_scene_ids(tiny_bank):
    """`render_ids` (ids -> inputs) sees the ids whose records the default passes; giving it
    with `render` as well is an error."""
    kw = {"episodes": 3, "oracles": False}
    by_records = score_model(_as_model(Posterior(tiny_bank)), tiny_bank, "concept_iid", **kw)
    oracle = Posterior(tiny_bank)
    by_ids = score_model(
        lambda s, y, t: oracle.predict(s, np.asarray(y), t),
        tiny_bank,
        "concept_iid",
        render_ids=lambda ids: ids,
        **kw,
    )
    assert by_ids == by_records
    with pytest.raises(ConfigError, match="render_ids"):
        score_model(_as_model(oracle), tiny_bank, "concept_iid", render=list, render_ids=list)


# --- bad arguments: one clear error, never a silent result ------------------------------------


def _zeros(support, labels, targets):
    return np.zeros(len(targets))


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), "abc", None, True])
def test_a_threshold_that_is_not_a_finite_number_is_refused_before_the_model_runs(
    tiny_bank, threshold
):
    """NaN predicted no scene positive (a CBA of 0.5 with no word); "abc" was a raw
    ValueError or TypeError once the model had run."""

    def predict(*_):
        raise AssertionError("the model ran")

    with pytest.raises(ConfigError, match=r"^threshold must be a number .*, got "):
        score_model(predict, tiny_bank, "concept_iid", episodes=2, threshold=threshold)


def test_complex_scores_are_refused_not_cast(tiny_bank, tmp_path):
    from curi.oracles.model_score import model_predictions, score_file

    complex_model = lambda s, y, t: np.full(len(t), 0.5 + 1j)  # noqa: E731
    with pytest.raises(ConfigError, match="for query scenes must be real numbers, .*complex128"):
        model_predictions(complex_model, tiny_bank, "concept_iid", episodes=2)
    pred = model_predictions(_zeros, tiny_bank, "concept_iid", episodes=2)
    np.savez(tmp_path / "s.npz", **{**pred, "eval_scores": pred["eval_scores"] + 1j})
    with pytest.raises(ConfigError, match="eval_scores must be real numbers, got .*complex128"):
        score_file(tmp_path / "s.npz", tiny_bank, "concept_iid")


def test_no_split_is_refused_not_an_empty_result(tiny_bank):
    with pytest.raises(ConfigError, match="splits must name at least one split"):
        score_model(_zeros, tiny_bank, [], episodes=2)

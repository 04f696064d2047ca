"""Scoring on a modality (`curi.models.scoring`): the model sees exactly the tensors of
`episode_dataset`, the embedding path scores as the per-episode path while embedding the
evaluation set once, and the threshold and the way the model is given are checked; the schema
mask as a 21st feature (``mask_channel``) in the dataset, in scoring and in curi's own model."""

import json

import numpy as np
import pytest
import torch

from curi.errors import ConfigError
from curi.models import RunConfig, TrainSettings, score_in_modality
from curi.models.data import EvalSceneDataset, episode_dataset
from curi.models.scoring import model_predictions
from curi.models.train import train

IMAGE = {"name": "image", "width": 24, "height": 16}
SCHEMA_MC = {"name": "schema", "mask_channel": True}
MODALITIES = pytest.mark.parametrize(
    "modality", ["schema", SCHEMA_MC, IMAGE], ids=["schema", "schema-mask-channel", "image"]
)
EPISODES = 3


def _flat(inputs) -> torch.Tensor:
    """(N, F) float features of inputs as the dataset gives them (a mask folded in)."""
    if isinstance(inputs, tuple):
        x, mask = inputs
        return torch.cat([x.flatten(1).float(), mask.flatten(1).float()], 1)
    return inputs.flatten(1).float()


@MODALITIES
def test_predict_sees_the_datasets_tensors(tiny_bank, modality):
    seen = []

    def predict(support, labels, targets):
        seen.append((support, labels, targets))
        n = len(targets[0] if isinstance(targets, tuple) else targets)
        return np.zeros(n)

    model_predictions(predict, tiny_bank, "concept_iid", modality=modality, episodes=EPISODES)
    ds = episode_dataset(tiny_bank, "concept_iid", "test", modality=modality)
    ev = EvalSceneDataset(tiny_bank, {"name": modality} if isinstance(modality, str) else modality)
    chunks = [ev[c] for c in range(len(ev))]
    eval_x = torch.cat([c["x"] for c in chunks])
    for i in range(EPISODES):
        item = ds[i]
        (support, labels, query), (support2, _, targets) = seen[2 * i], seen[2 * i + 1]
        np.testing.assert_array_equal(labels, item["support_labels"].numpy())
        if modality == "schema":
            for got, key in ((support, "support"), (query, "query"), (support2, "support")):
                x, mask = got
                assert torch.equal(x, item[key]) and torch.equal(mask, item[f"{key}_mask"])
            assert torch.equal(targets[0], eval_x)
            assert torch.equal(targets[1], torch.cat([c["mask"] for c in chunks]))
        else:  # one tensor per scene set, as the dataset gives it
            assert isinstance(support, torch.Tensor) and isinstance(targets, torch.Tensor)
            assert torch.equal(support, item["support"]) and torch.equal(query, item["query"])
            assert torch.equal(support2, item["support"])
            assert torch.equal(targets, eval_x)


def _linear_embed(dim: int, calls: list[int]):
    gen = torch.Generator().manual_seed(0)
    weights: dict[int, torch.Tensor] = {}

    def embed(inputs) -> torch.Tensor:
        x = _flat(inputs)
        calls.append(len(x))
        if x.shape[1] not in weights:
            weights[x.shape[1]] = torch.randn(x.shape[1], dim, generator=gen, dtype=torch.float64)
        return x.double() @ weights[x.shape[1]]

    return embed


def compare(support, labels, targets) -> torch.Tensor:
    """Prototypical log-odds: squared distance to the negative prototype minus the positive's."""
    labels = torch.as_tensor(labels, dtype=torch.bool)
    pos, neg = support[labels].mean(0), support[~labels].mean(0)
    return ((targets - neg) ** 2).sum(1) - ((targets - pos) ** 2).sum(1)


@MODALITIES
def test_the_embedding_path_scores_as_predict_and_embeds_the_eval_set_once(tiny_bank, modality):
    calls: list[int] = []
    embed = _linear_embed(8, calls)
    kw = {"modality": modality, "episodes": EPISODES, "chunk": 1000}

    def predict(support, labels, targets):
        return compare(embed(support), labels, embed(targets))

    slow = model_predictions(predict, tiny_bank, "concept_iid", **kw)
    calls.clear()
    fast = model_predictions(None, tiny_bank, "concept_iid", embed=embed, compare=compare, **kw)
    m = len(tiny_bank.eval_ids)
    per_episode = 50  # 25 support and 25 query scenes
    # the evaluation set once, in chunks of 1000; the support and query sets per episode
    assert sum(calls) == m + EPISODES * per_episode
    assert sorted(calls, reverse=True)[: -(-m // 1000)] == [1000] * (m // 1000) + [m % 1000]
    for key in ("query_scores", "eval_scores"):
        np.testing.assert_allclose(fast[key], slow[key], rtol=1e-9, atol=1e-9)
    common = {"modality": modality, "episodes": EPISODES, "threshold": 0.0, "oracles": False}
    by_predict = score_in_modality(predict, tiny_bank, "concept_iid", **common)
    by_embed = score_in_modality(
        None, tiny_bank, "concept_iid", embed=embed, compare=compare, **common
    )
    assert by_embed == by_predict


def test_the_threshold_is_required(tiny_bank):
    with pytest.raises(ConfigError, match="threshold"):
        score_in_modality(lambda s, y, t: np.zeros(len(t[0])), tiny_bank, "concept_iid", episodes=1)


@pytest.mark.parametrize("threshold", [float("nan"), "abc"])
def test_a_threshold_that_is_not_a_finite_number_is_one_clear_error(tiny_bank, threshold):
    """A threshold of "abc" was a raw ValueError of float(); NaN was accepted."""
    with pytest.raises(ConfigError, match=r"^threshold must be a number .*, got "):
        score_in_modality(
            lambda s, y, t: np.zeros(len(t[0])),
            tiny_bank,
            "concept_iid",
            episodes=1,
            threshold=threshold,
        )


@pytest.mark.parametrize(
    "given",
    [{}, {"embed": _flat}, {"compare": compare}, {"predict": True, "embed": _flat}],
    ids=["neither", "embed-only", "compare-only", "both"],
)
def test_predict_or_embed_and_compare(tiny_bank, given):
    given = dict(given)
    predict = (lambda s, y, t: np.zeros(len(t[0]))) if given.pop("predict", False) else None
    with pytest.raises(ConfigError, match="predict|embed"):
        score_in_modality(predict, tiny_bank, "concept_iid", threshold=0.5, episodes=1, **given)


def test_mask_channel_is_the_mask_as_a_21st_feature(tiny_bank):
    pair = episode_dataset(tiny_bank, "concept_iid", "test", modality="schema")
    one = episode_dataset(tiny_bank, "concept_iid", "test", modality=SCHEMA_MC)
    for a, b in ((pair[0], one[0]), (pair.batch([1, 2]), one.batch([1, 2]))):
        assert set(b) == set(a) - {"support_mask", "query_mask"}
        for key in ("support", "query"):
            assert b[key].shape[-2:] == (5, 21) and b[key].dtype == torch.float32
            assert torch.equal(b[key], torch.cat([a[key], a[f"{key}_mask"][..., None]], -1))
            assert not a[f"{key}_mask"].all()  # some padding: the channel is not all ones
        for key in set(b) - {"support", "query"}:
            assert torch.equal(b[key], a[key])
    ev, ev_mc = (
        EvalSceneDataset(tiny_bank, {"name": "schema"}),
        EvalSceneDataset(tiny_bank, SCHEMA_MC),
    )
    assert set(ev_mc[0]) == {"x"}
    assert torch.equal(ev_mc[0]["x"], torch.cat([ev[0]["x"], ev[0]["mask"][..., None]], -1))
    with pytest.raises(ConfigError, match="mask_channel"):
        episode_dataset(tiny_bank, "concept_iid", modality={**SCHEMA_MC, "mask_channel": "yes"})


def _tiny_run(modality) -> RunConfig:
    settings = TrainSettings(
        steps=3,
        batch_size=4,
        train_episodes=8,
        log_every=1,
        eval_every=3,
        checkpoint_every=3,
        val_episodes=4,
        num_workers=0,
    )
    return RunConfig(bank={"name": "tiny"}, modality=modality, train=settings, device="cpu")


def test_curis_own_model_trains_the_same_with_the_mask_as_a_feature(tiny_bank, tmp_path):
    """`curi train modality.mask_channel=true`: the schema encoder reads the mask from the
    last feature, so the run (losses, validation metrics) is the default run's."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = {
            name: train(_tiny_run(m), run_dir=tmp_path / name, bank=tiny_bank, progress=False)
            for name, m in (("pair", {"name": "schema"}), ("channel", SCHEMA_MC))
        }
    finally:
        torch.set_num_threads(before)
    logs = {
        name: [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        for name in runs
    }
    train_rows = [[r for r in logs[n] if r["tag"] == "train"] for n in runs]
    assert len(train_rows[0]) == 3
    for a, b in zip(*train_rows, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, abs=1e-6)
    val = [runs[n]["val"] for n in runs]
    assert val[1]["map"] == pytest.approx(val[0]["map"], rel=1e-5)

"""Scoring on a modality (`curi.models.scoring`): the model sees exactly the tensors of
`episode_dataset`, the embedding path scores as the per-episode path while embedding the
evaluation set once, and the threshold and the way the model is given are checked."""

import numpy as np
import pytest
import torch

from curi.errors import ConfigError
from curi.models import score_model
from curi.models.data import EvalSceneDataset, episode_dataset
from curi.models.scoring import model_predictions

IMAGE = {"name": "image", "width": 24, "height": 16}
EPISODES = 3


def _flat(inputs) -> torch.Tensor:
    """(N, F) float features of inputs as the dataset gives them (a mask folded in)."""
    if isinstance(inputs, tuple):
        x, mask = inputs
        return torch.cat([x.flatten(1).float(), mask.flatten(1).float()], 1)
    return inputs.flatten(1).float()


@pytest.mark.parametrize("modality", ["schema", IMAGE], ids=["schema", "image"])
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
        else:
            assert torch.equal(support, item["support"]) and torch.equal(query, item["query"])
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


@pytest.mark.parametrize("modality", ["schema", IMAGE], ids=["schema", "image"])
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
    by_predict = score_model(predict, tiny_bank, "concept_iid", **common)
    by_embed = score_model(None, tiny_bank, "concept_iid", embed=embed, compare=compare, **common)
    assert by_embed == by_predict


def test_the_threshold_is_required(tiny_bank):
    with pytest.raises(ConfigError, match="threshold"):
        score_model(lambda s, y, t: np.zeros(len(t[0])), tiny_bank, "concept_iid", episodes=1)


@pytest.mark.parametrize(
    "given",
    [{}, {"embed": _flat}, {"compare": compare}, {"predict": True, "embed": _flat}],
    ids=["neither", "embed-only", "compare-only", "both"],
)
def test_predict_or_embed_and_compare(tiny_bank, given):
    given = dict(given)
    predict = (lambda s, y, t: np.zeros(len(t[0]))) if given.pop("predict", False) else None
    with pytest.raises(ConfigError, match="predict|embed"):
        score_model(predict, tiny_bank, "concept_iid", threshold=0.5, episodes=1, **given)

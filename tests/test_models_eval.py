"""Tests of the evaluation's per-concept results (CPU, tiny bank, untrained small models):
per-concept AP against the split's mAP and a per-episode recomputation, the oracle columns and
NaN handling of `concept_table`, the parquet file, and `curi eval` writing it beside
metrics.json."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from hydra import compose, initialize_config_module

import curi
from curi.errors import BankError, ConfigError
from curi.models import RunConfig, build_model, make_renderer
from curi.models import cli as models_cli
from curi.models.checkpoint import (
    CHECKPOINT_FORMAT,
    load_checkpoint,
    save_checkpoint,
    state_digest,
)
from curi.models.data import concept_max_len
from curi.models.evaluate import (
    concept_table,
    evaluate_checkpoint,
    evaluate_episodes,
    write_concepts,
    write_metrics,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _checkpoint(bank, path, *, bank_config=None):
    """An untrained small avg-pool model saved as a `curi train` checkpoint of step 0."""
    run = RunConfig(bank=dict(bank.config), pooling={"name": "avg", "hidden": [16]}, embed_dim=8)
    model = build_model(run, make_renderer(run.modality))
    config = run.to_dict()
    if bank_config is not None:
        config["bank"] = bank_config
    save_checkpoint(
        {
            "format": CHECKPOINT_FORMAT,
            "step": 0,
            "model": model.state_dict(),
            "config": config,
            "bank_path": str(bank.path),
            "max_len": concept_max_len(bank),
        },
        path,
    )
    return path


def test_per_concept_ap_averages_to_the_split_map(tiny_bank, tmp_path):
    ckpt = _checkpoint(tiny_bank, tmp_path / "m.pt")
    got = evaluate_checkpoint(ckpt, bank=tiny_bank, episodes=40, batch_size=8, oracles=False)
    rows = got["per_concept"]
    n = np.array([r["episodes"] for r in rows])
    ap = np.array([r["model_ap"] for r in rows])
    assert n.sum() == 40 and len(rows) > 1 and (n >= 1).all()
    # the episode-weighted mean of per-concept AP is the reported split mAP
    assert np.isclose((n * ap).sum() / n.sum(), got["model"]["map"], rtol=0, atol=1e-12)
    split = curi.make_split(tiny_bank, "concept_iid")
    ids = [r["concept_id"] for r in rows]
    assert ids == sorted(ids) and set(ids) <= set(np.asarray(split.test).tolist())
    for r in rows:
        assert r["concept"] == tiny_bank.concepts[r["concept_id"]]
        assert r["group"] == tiny_bank.group(r["concept_id"]) and r["split"] == "concept_iid"
        assert 0 <= r["model_ap"] <= 1 and r["model_ap_std"] >= 0

    # the same episodes scored one by one: each concept's AP is the mean over its episodes
    run = RunConfig.from_mapping(torch.load(ckpt, weights_only=False)["config"])
    model = build_model(run, make_renderer(run.modality))
    model.load_state_dict(torch.load(ckpt, weights_only=False)["model"])
    sampler = curi.EpisodeSampler(tiny_bank, split, "test", "hard", seed=0, size=40)
    ep = evaluate_episodes(
        model,
        sampler,
        run.modality,
        device=torch.device("cpu"),
        batch_size=8,
        keep_episodes=True,
        max_len=concept_max_len(tiny_bank),
    )
    assert ep["episode_concepts"].tolist() == [sampler[i].concept for i in range(40)]
    for r in rows:
        mine = ep["episode_ap"][ep["episode_concepts"] == r["concept_id"]]
        assert len(mine) == r["episodes"] and np.isclose(mine.mean(), r["model_ap"])
        assert np.isclose(mine.std(), r["model_ap_std"], atol=1e-9)


def test_concept_table_oracle_columns_and_nan_episodes(tiny_bank):
    concepts = np.array([7, 2, 7, 7, 2])
    model = np.array([0.5, 0.2, np.nan, 0.7, 0.4])
    strong = np.array([1.0, 0.9, 0.8, 0.6, 0.7])
    rows = concept_table(tiny_bank, concepts, model, split="s", oracle_ap={"strong": strong})
    assert [r["concept_id"] for r in rows] == [2, 7]
    assert [r["episodes"] for r in rows] == [2, 3]  # NaN episodes are counted, not averaged
    assert np.isclose(rows[0]["model_ap"], 0.3) and np.isclose(rows[1]["model_ap"], 0.6)
    assert np.isclose(rows[0]["oracle_ap_strong"], 0.8)
    assert np.isclose(rows[1]["oracle_ap_strong"], 0.8)
    with pytest.raises(ConfigError, match="one AP per episode"):
        concept_table(tiny_bank, concepts, model, split="s", oracle_ap={"weak": strong[:3]})


def test_concepts_parquet_round_trips_and_metrics_json_leaves_them_out(tiny_bank, tmp_path):
    rows = concept_table(tiny_bank, np.array([3, 3, 5]), np.array([0.25, 0.75, 1.0]), split="x")
    path = write_concepts(rows, tmp_path / "c" / "concepts.parquet")
    assert pq.read_table(path).to_pylist() == rows
    m = write_metrics({"model": {"map": 0.5}, "per_concept": rows}, tmp_path / "metrics.json")
    assert json.loads(m.read_text()) == {"model": {"map": 0.5}}


def test_eval_refuses_a_bank_other_than_the_checkpoints(tiny_bank, tmp_path):
    other = {**tiny_bank.config, "name": "other", "seed": 5}
    ckpt = _checkpoint(tiny_bank, tmp_path / "m.pt", bank_config=other)
    with pytest.raises(ConfigError, match="trained on bank 'other'"):
        evaluate_checkpoint(ckpt, bank=tiny_bank, episodes=2, oracles=False)


def test_curi_eval_writes_concepts_beside_metrics(tiny_bank, tiny_bank_dir, tmp_path):
    ckpt = _checkpoint(tiny_bank, tmp_path / "m.pt")
    out = tmp_path / "eval"
    with initialize_config_module(config_module="curi.conf", version_base="1.3"):
        cfg = compose(
            "eval",
            [
                f"checkpoint={ckpt}",
                "episodes=12",
                "num_workers=0",
                "batch_size=6",
                f"data_dir={tiny_bank_dir.parent}",
                f"output_dir={out}",
                "progress=false",
            ],
        )
    models_cli.evaluate(cfg)
    metrics = json.loads((out / "metrics.json").read_text())
    assert "per_concept" not in metrics and metrics["oracles"]["episodes"] == 12
    assert 0 < metrics["oracles"]["map_prior"] <= 1  # the prior-only oracle beside the others
    rows = pq.read_table(out / "concepts.parquet").to_pylist()
    assert {"oracle_ap_strong", "oracle_ap_prior"} <= set(rows[0])
    n = np.array([r["episodes"] for r in rows])
    ap = np.array([r["model_ap"] for r in rows])
    assert n.sum() == 12
    assert np.isclose((n * ap).sum() / n.sum(), metrics["model"]["map"], atol=1e-12)


def _edit(path, edit, *, digest: bool = False):
    """The checkpoint at `path` changed by `edit(payload)` and saved again: with `digest` as a
    run that wrote such weights would (the digest recomputed), else with the old digest."""
    payload = torch.load(path, weights_only=True)
    edit(payload)
    if digest:
        save_checkpoint(payload, path)
    else:
        torch.save(payload, path)
    return path


def _nan(payload):
    next(iter(payload["model"].values()))[0] = float("nan")


def _other_pooling(payload):
    payload["config"]["pooling"] = {"name": "transformer", "d_model": 16, "num_layers": 1}


def _other_width(payload):
    payload["config"]["embed_dim"] = 12


@pytest.mark.parametrize(
    ("edit", "digest", "message"),
    [
        (_other_pooling, True, r"holds weights of another model .*\(\d+ problems, e\.g\. "),
        (_other_width, True, r"weights of another model .* of shape \(8, "),
        (_nan, True, r"weights that are NaN or infinite \(1 tensors, e\.g\. encoder\."),
        (_nan, False, r"is damaged: its weights differ from the digest"),  # edited, not saved
    ],
    ids=["pooling", "shapes", "nan", "tampered"],
)
def test_eval_refuses_weights_that_do_not_fit_in_one_line(
    tiny_bank, tmp_path, edit, digest, message
):
    ckpt = _checkpoint(tiny_bank, tmp_path / "m.pt")
    _edit(ckpt, edit, digest=digest)
    with pytest.raises(ConfigError, match=message) as e:
        evaluate_checkpoint(ckpt, bank=tiny_bank, episodes=4, oracles=False)
    assert "\n" not in str(e.value)


def test_a_byte_flipped_in_the_weights_is_refused_and_an_old_checkpoint_warns(
    tiny_bank, tmp_path, caplog
):
    ckpt = _checkpoint(tiny_bank, tmp_path / "m.pt")
    payload = torch.load(ckpt, weights_only=True)
    weight = max(payload["model"].values(), key=lambda t: t.numel())
    data = bytearray(ckpt.read_bytes())
    at = data.find(weight.numpy().tobytes()[:64])  # the tensor's bytes, stored as they are
    assert at > 0
    data[at + 3] ^= 0x40
    ckpt.write_bytes(bytes(data))
    assert state_digest(torch.load(ckpt, weights_only=True)["model"]) != payload["model_sha256"]
    with pytest.raises(ConfigError, match=r"m\.pt is damaged: its weights differ from the digest"):
        load_checkpoint(ckpt)
    # written before digests were stored: it loads, with one line of warning
    payload.pop("model_sha256")
    torch.save(payload, ckpt)
    with caplog.at_level("WARNING", logger="curi.models.checkpoint"):
        assert load_checkpoint(ckpt)[0]["step"] == 0
    (line,) = [r.getMessage() for r in caplog.records if r.name == "curi.models.checkpoint"]
    assert line.endswith("m.pt has no digest of its weights (an older curi wrote it): not checked")


def test_a_checkpoint_of_another_bank_config_never_advises_force(
    tiny_bank, tiny_bank_dir, tmp_path
):
    # the data_dir holds a bank of the same name built otherwise: force=true would replace it
    other = {**tiny_bank.config, "seed": 5}
    ckpt = _checkpoint(tiny_bank, tmp_path / "m.pt", bank_config=other)
    with pytest.raises(BankError) as e:
        evaluate_checkpoint(ckpt, data_dir=tiny_bank_dir.parent, episodes=2, oracles=False)
    assert str(e.value).startswith(f"checkpoint {ckpt} was trained on another bank than the one")
    assert "differ in ['seed']" in str(e.value) and "force" not in str(e.value)

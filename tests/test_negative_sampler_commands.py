"""``negative_sampler`` reaches `curi train` and `curi eval` (issue 45 item 3): a run draws
matched negatives and records it, a checkpoint evaluates with its own sampler or another, and
runs recorded before the key existed (no key: ``paper``) load and keep their records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_module

from curi.errors import ConfigError
from curi.models import cli as models_cli
from curi.models.checkpoint import load_checkpoint
from curi.models.config import RunConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _compose(name: str, overrides: list[str]):
    with initialize_config_module(config_module="curi.conf", version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


def _train(bank_dir: Path, out: Path, *over: str) -> Path:
    cfg = _compose(
        "train",
        [
            "bank=tiny",
            "train=tiny",
            "train.steps=2",
            "train.eval_every=2",
            "train.checkpoint_every=2",
            "train.val_episodes=3",
            "pooling=avg",
            f"data_dir={bank_dir.parent}",
            f"output_dir={out}",
            "progress=false",
            "device=cpu",
            *over,
        ],
    )
    models_cli.train(cfg)
    return out / "checkpoints" / "last.pt"


def _eval(bank_dir: Path, ckpt: Path, out: Path, *over: str) -> dict:
    cfg = _compose(
        "eval",
        [
            f"checkpoint={ckpt}",
            f"output_dir={out}",
            "out=eval.json",
            "episodes=3",
            "oracles=false",
            "progress=false",
            "device=cpu",
            f"data_dir={bank_dir.parent}",
            *over,
        ],
    )
    models_cli.evaluate(cfg)
    return json.loads((out / "eval.json").read_text())


def test_train_and_eval_with_matched_negatives(tiny_bank_dir, tmp_path, monkeypatch):
    """`curi train negative_sampler=matched` draws its training and validation episodes with
    the matched sampler and records it; `curi eval` uses the checkpoint's unless told."""
    from curi.episodes import EpisodeSampler

    made = []
    from_spec = EpisodeSampler.from_spec.__func__

    def spy(cls, bank, spec):
        made.append((spec.subset, spec.negative_sampler))
        return from_spec(cls, bank, spec)

    monkeypatch.setattr(EpisodeSampler, "from_spec", classmethod(spy))
    ckpt = _train(tiny_bank_dir, tmp_path / "run", "negative_sampler=matched")
    assert ("train", "matched") in made and ("val", "matched") in made
    assert load_checkpoint(ckpt)[0]["config"]["negative_sampler"] == "matched"
    made.clear()
    got = _eval(tiny_bank_dir, ckpt, tmp_path / "ev")
    assert got["negative_sampler"] == "matched" and made == [("test", "matched")]
    made.clear()
    got = _eval(tiny_bank_dir, ckpt, tmp_path / "ev2", "negative_sampler=paper")
    assert "negative_sampler" not in got and made == [("test", "paper")]


def test_eval_of_a_paper_run_with_matched_negatives(tiny_bank_dir, tmp_path):
    """A run without the key (today's records) trains and evaluates as before; `curi eval
    negative_sampler=matched` scores it on matched episodes (other negatives, the same
    positives)."""
    ckpt = _train(tiny_bank_dir, tmp_path / "run")
    assert "negative_sampler" not in load_checkpoint(ckpt)[0]["config"]
    paper = _eval(tiny_bank_dir, ckpt, tmp_path / "a")
    matched = _eval(tiny_bank_dir, ckpt, tmp_path / "b", "negative_sampler=matched")
    assert "negative_sampler" not in paper and matched["negative_sampler"] == "matched"
    assert np.isfinite(matched["model"]["map"])


def test_old_run_configs_mean_the_paper_sampler_and_keep_their_records():
    old = {"bank": {"name": "tiny"}, "split": "concept_iid", "negatives": "easy", "seed": 3}
    run = RunConfig.from_mapping(old)
    assert run.negative_sampler == "paper"
    assert "negative_sampler" not in run.to_dict()  # a sweep's run key is what it was
    matched = RunConfig.from_mapping({**old, "negative_sampler": "matched"})
    assert matched.to_dict()["negative_sampler"] == "matched"
    assert RunConfig.from_mapping(matched.to_dict()) == matched
    spec = matched.episodes("concept_iid", "val", size=4)
    assert (spec.negatives, spec.negative_sampler, spec.seed, spec.size) == (
        "easy",
        "matched",
        3,
        4,
    )
    with pytest.raises(ConfigError, match="negative_sampler must be one of paper, matched"):
        RunConfig.from_mapping({**old, "negative_sampler": "matchd"})


@pytest.mark.parametrize("command", ["train", "eval", "difficulty", "lm_export"])
def test_a_bad_negative_sampler_is_the_librarys_line_before_any_work(command):
    """Each command has the option, and refuses a bad value from its config (before a bank or
    checkpoint is opened) with the library's own line (`EpisodeSpec`)."""
    from omegaconf import OmegaConf

    from curi.episodes import EpisodeSpec
    from curi.options import check_config, load_options

    with pytest.raises(ConfigError) as lib:
        EpisodeSpec("concept_iid", "test", negative_sampler="matchd")
    cfg = OmegaConf.to_container(_compose(command, ["negative_sampler=matchd"]), resolve=False)
    with pytest.raises(ConfigError) as cli:
        check_config(cfg, load_options(command))
    want = str(lib.value)
    if command == "eval":  # null (the checkpoint's) is valid there too
        want = want.replace("matched, got", "matched or null, got")
    assert str(cli.value) == want
    assert "negative_sampler must be one of paper, matched" in str(lib.value)
    good = OmegaConf.to_container(_compose(command, ["negative_sampler=matched"]), resolve=False)
    check_config(good, load_options(command))

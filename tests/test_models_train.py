"""Tests of the episode Dataset, training and evaluation (CPU, small): determinism across
DataLoader workers, the step-seeded episode stream, exact resume, the concept loss, evaluation
against a brute-force AP, the `curi train` / `curi eval` commands and their config errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_curi, start_ddp_ranks
from hydra import compose, initialize_config_module
from torch.utils.data import DataLoader

import curi
from curi.episodes import EpisodeSpec
from curi.errors import ConfigError
from curi.models import (
    ConceptTokenizer,
    EpisodeDataset,
    EvalSceneDataset,
    RunConfig,
    StepBatchSampler,
    TrainSettings,
    build_model,
    collate_episodes,
    evaluate_episodes,
    list_poolers,
    load_checkpoint,
    make_renderer,
    resolve_device,
    start_runtime,
)
from curi.models import cli as models_cli
from curi.models.checkpoint import save_checkpoint
from curi.models.device_sampler import DeviceEpisodeSampler
from curi.models.schedule import lr_at
from curi.models.train import train
from curi.oracles.metrics import average_precision, class_balanced_accuracy
from curi.renderers import list_renderers

SCHEMA = {"name": "schema"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _compose(name: str, overrides: list[str]):
    with initialize_config_module(config_module="curi.conf", version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


def _train_cfg(bank_dir: Path, out: Path, *overrides: str):
    """A composed `curi train` config: tiny bank (the session's), tiny schedule, no bars."""
    base = [
        "bank=tiny",
        "train=tiny",
        f"data_dir={bank_dir.parent}",
        f"output_dir={out}",
        "progress=false",
    ]
    return _compose("train", base + list(overrides))


def _curi(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from curi.cli import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _log(run_dir: Path, tag: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["tag"] == tag]


# --- data ------------------------------------------------------------------------------------
def test_dataset_is_deterministic_across_worker_counts_and_renders_the_episode(tiny_bank):
    sampler = curi.EpisodeSampler(tiny_bank, "concept_iid", "train", "hard", seed=3, size=64)
    ds = EpisodeDataset(sampler, SCHEMA)
    batches = {}
    for workers in (0, 2):
        loader = DataLoader(
            ds,
            batch_sampler=StepBatchSampler(64, 4, seed=1, start=0, stop=3),
            collate_fn=collate_episodes,
            num_workers=workers,
        )
        batches[workers] = list(loader)
    assert len(batches[0]) == 3
    for a, b in zip(batches[0], batches[2], strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k
    batch = batches[0][1]
    assert batch["support"].shape == (4, 25, 5, 20) and batch["query"].shape == (4, 25, 5, 20)
    assert batch["support_mask"].shape == (4, 25, 5) and batch["support_mask"].dtype == torch.bool
    assert (batch["support_labels"].sum(1) == 5).all() and (batch["query_labels"].sum(1) == 5).all()
    assert batch["concept_tokens"].shape == (4, ds.max_len)
    # Each row is its episode, rendered independently of the batch it came in.
    renderer = make_renderer(SCHEMA)
    tok = ConceptTokenizer()
    for row, i in enumerate(batch["index"].tolist()):
        e = sampler[i]
        ref = renderer.render(tiny_bank.scene_records(e.query_ids))
        assert torch.equal(batch["query"][row], ref.data)
        assert torch.equal(batch["query_mask"][row], ref.mask)
        assert torch.equal(batch["support_labels"][row], torch.from_numpy(e.support_labels).long())
        assert tok.decode(batch["concept_tokens"][row]) == e.concept_text
        alone = ds[i]
        assert torch.equal(alone["support"], batch["support"][row])


def test_step_stream_is_a_function_of_the_step_and_covers_the_pool():
    full = StepBatchSampler(40, 8, seed=0, start=0, stop=12)
    steps = list(full)
    later = list(StepBatchSampler(40, 8, seed=0, start=7, stop=12))
    assert later == steps[7:]  # a resumed run sees the uninterrupted run's batches
    for epoch in range(2):  # each epoch (5 steps) is a permutation of the pool
        seen = sorted(i for s in steps[5 * epoch : 5 * epoch + 5] for i in s)
        assert seen == list(range(40))
    assert steps[:5] != steps[5:10]  # a fresh order each epoch
    ranks = [StepBatchSampler(40, 4, seed=0, start=0, stop=5, rank=r, world=2) for r in (0, 1)]
    for a, b in zip(*ranks, strict=True):
        assert not set(a) & set(b)  # DDP processes take disjoint episodes
    assert list(StepBatchSampler(40, 8, seed=1, start=0, stop=1)) != steps[:1]


def test_eval_set_chunks_render_every_evaluation_scene_once(tiny_bank):
    ds = EvalSceneDataset(tiny_bank, SCHEMA, chunk=1000)
    chunks = [ds[c] for c in range(len(ds))]
    assert len(ds) == -(-len(tiny_bank.eval_ids) // 1000)
    ref = make_renderer(SCHEMA).render(tiny_bank.scene_records(tiny_bank.eval_ids))
    assert torch.equal(torch.cat([c["x"] for c in chunks]), ref.data)
    assert torch.equal(torch.cat([c["mask"] for c in chunks]), ref.mask)


# --- evaluation ------------------------------------------------------------------------------
def test_evaluation_matches_brute_force_average_precision(tiny_bank):
    run = RunConfig(bank=tiny_bank.config, pooling={"name": "avg"})
    renderer = make_renderer(SCHEMA)
    model = build_model(run, renderer).eval()
    sampler = curi.EpisodeSampler(tiny_bank, "concept_iid", "val", "hard", seed=0, size=6)
    got = evaluate_episodes(model, sampler, SCHEMA, device=torch.device("cpu"), batch_size=4)
    ev = renderer.render(tiny_bank.scene_records(tiny_bank.eval_ids))
    aps, cbas = [], []
    with torch.no_grad():
        emb = model.embed(ev.data, ev.mask).double()  # (M, E)
        for i in range(len(sampler)):
            e = sampler[i]
            sup = renderer.render(tiny_bank.scene_records(e.support_ids))
            qry = renderer.render(tiny_bank.scene_records(e.query_ids))
            s_emb = model.embed(sup.data, sup.mask).double()
            lab = torch.from_numpy(e.support_labels.astype(bool))
            c_pos, c_neg = s_emb[lab].mean(0), s_emb[~lab].mean(0)

            def p_pos(x, c_pos=c_pos, c_neg=c_neg):  # explicit softmax over -distance^2
                d = torch.stack([(x - c_neg).square().sum(1), (x - c_pos).square().sum(1)], 1)
                return torch.softmax(-d, 1)[:, 1]

            truth = tiny_bank.truth(e.concept)[tiny_bank.eval_ids]
            aps.append(average_precision(p_pos(emb).numpy(), truth))
            q = p_pos(model.embed(qry.data, qry.mask).double()).numpy()
            cbas.append(class_balanced_accuracy(q, e.query_labels))
    assert got["episodes"] == 6 and got["eval_scenes"] == len(tiny_bank.eval_ids)
    assert got["map"] == pytest.approx(np.mean(aps), abs=1e-4)
    assert got["cba"] == pytest.approx(np.mean(cbas), abs=1e-9)
    assert 0 <= got["map"] <= 1 and got["concept_loss"] is None


# --- training --------------------------------------------------------------------------------
def test_resume_continues_exactly_like_an_uninterrupted_run(tiny_bank_dir, tmp_path):
    # The transformer pooler has dropout: the resumed steps must draw the same masks too.
    over = [
        "pooling=transformer",
        "train.steps=6",
        "train.checkpoint_every=3",
        "train.eval_every=100",
        "train.val_episodes=4",
    ]
    full = tmp_path / "full"
    models_cli.train(_train_cfg(tiny_bank_dir, full, *over))
    ckpt_dir = full / "checkpoints"
    assert {p.name for p in ckpt_dir.glob("*.pt")} == {
        "step_0000003.pt",
        "step_0000006.pt",
        "last.pt",
        "best.pt",
    }
    ckpt, _ = load_checkpoint(ckpt_dir / "step_0000003.pt")
    assert ckpt["step"] == 3 and ckpt["optimizer"]["state"]
    assert ckpt["config"]["pooling"]["name"] == "transformer"
    assert ckpt["config"]["train"]["steps"] == 6 and ckpt["config"]["bank"]["name"] == "tiny"
    resumed = tmp_path / "resumed"
    cfg = _train_cfg(tiny_bank_dir, resumed, *over, f"resume={ckpt_dir / 'step_0000003.pt'}")
    models_cli.train(cfg)
    a = {r["step"]: r["loss"] for r in _log(full, "train")}
    b = {r["step"]: r["loss"] for r in _log(resumed, "train")}
    assert sorted(b) == [4, 5, 6]
    assert [b[s] for s in (4, 5, 6)] == [a[s] for s in (4, 5, 6)]
    assert a[4] != a[5]  # the steps really differ (the comparison is not vacuous)
    end_a, _ = load_checkpoint(ckpt_dir / "last.pt")
    end_b, _ = load_checkpoint(resumed / "checkpoints" / "last.pt")
    assert end_b["step"] == 6
    for k, v in end_a["model"].items():
        assert torch.equal(v, end_b["model"][k]), k
    # A checkpoint made by another config is refused, naming what differs.
    other = _train_cfg(tiny_bank_dir, tmp_path / "x", *over, "train.lr=0.01", f"resume={full}")
    with pytest.raises(ConfigError, match=r"different config \(train.lr\)"):
        models_cli.train(other)


def test_device_sampler_with_a_cosine_rate_resumes_exactly(tiny_bank_dir, tmp_path):
    """`curi train device=cpu train.sampler=device` trains; its episodes and the schedule are
    functions of the step, so a run resumed at step 3 ends with the uninterrupted one's
    weights; the logged rate is the schedule's; another number of steps is another schedule."""
    over = [
        "device=cpu",
        "train.sampler=device",
        "train.lr_schedule=cosine",
        "train.warmup_steps=2",
        "pooling=transformer",
        "train.steps=6",
        "train.checkpoint_every=3",
        "train.eval_every=6",
        "train.val_episodes=4",
    ]
    full = tmp_path / "full"
    models_cli.train(_train_cfg(tiny_bank_dir, full, *over))
    summary = json.loads((full / "summary.json").read_text())
    assert summary["sampler"] == "device" and summary["step_mode"] == "eager"
    rates = {r["step"]: r["lr"] for r in _log(full, "train")}
    want = [lr_at(t - 1, lr=1e-3, schedule="cosine", warmup=2, steps=6) for t in range(1, 7)]
    assert [rates[t] for t in range(1, 7)] == pytest.approx(want)
    ckpt = full / "checkpoints" / "step_0000003.pt"
    resumed = tmp_path / "resumed"
    models_cli.train(_train_cfg(tiny_bank_dir, resumed, *over, f"resume={ckpt}"))
    a, b = ({r["step"]: r["loss"] for r in _log(d, "train")} for d in (full, resumed))
    assert [b[t] for t in (4, 5, 6)] == [a[t] for t in (4, 5, 6)] and a[4] != a[5]
    end_a, _ = load_checkpoint(full / "checkpoints" / "last.pt")
    end_b, _ = load_checkpoint(resumed / "checkpoints" / "last.pt")
    assert all(torch.equal(v, end_b["model"][k]) for k, v in end_a["model"].items())
    assert end_a["sampler"] == "device"
    longer = _train_cfg(
        tiny_bank_dir, tmp_path / "x", *over[:-3], "train.steps=8", f"resume={ckpt}"
    )
    with pytest.raises(ConfigError, match=r"different config \(train.steps\)"):
        models_cli.train(longer)
    other = _train_cfg(
        tiny_bank_dir, tmp_path / "y", *over[:1], "train.sampler=loader", f"resume={ckpt}"
    )
    with pytest.raises(ConfigError, match="train.sampler"):
        models_cli.train(other)


def test_device_sampler_feeds_image_scenes_too(tiny_bank):
    """The device stream renders image scenes from the drawn ids, as the loader does."""
    from curi.models.train_batches import train_loader

    s = TrainSettings(steps=2, batch_size=2, num_workers=0, sampler="device")
    run = RunConfig(bank=tiny_bank.config, modality={"name": "image"}, train=s, device="cpu")
    renderer = make_renderer(run.modality)
    split = curi.make_split(tiny_bank, "concept_iid")
    rt = start_runtime("cpu")
    kw = {"start": 1, "renderer": renderer, "max_len": 30, "sampler": "device"}
    (batch,) = list(train_loader(run, rt, tiny_bank, split, 2, **kw))
    assert batch["support"].shape == (2, 25, 3, 160, 240) and batch["query"].shape[1] == 25
    spec = EpisodeSpec(split, "train", "hard", 0)
    drawn = DeviceEpisodeSampler(tiny_bank, spec).sample(1, 2)
    first = drawn["ids"][0, :1].numpy()
    want = renderer.to_input(renderer.render(tiny_bank.scene_records(first)).data)
    torch.testing.assert_close(batch["support"][0, :1], want, atol=1e-5, rtol=0)
    assert torch.equal(batch["support_labels"], drawn["support_labels"])


def test_concept_loss_falls_on_a_tiny_set(tiny_bank, tmp_path):
    run = RunConfig(
        bank=tiny_bank.config,
        pooling={"name": "avg"},
        train=TrainSettings(
            steps=40,
            batch_size=8,
            train_episodes=8,
            alpha=1.0,
            lr=3e-3,
            log_every=5,
            eval_every=40,
            checkpoint_every=40,
            val_episodes=4,
            num_workers=0,
        ),
        device="cpu",
    )
    summary = train(run, run_dir=tmp_path, bank=tiny_bank, progress=False)
    rows = _log(tmp_path, "train")
    first, last = rows[0]["concept_loss"], rows[-1]["concept_loss"]
    assert last < 0.2 * first, (first, last)
    assert rows[-1]["loss"] == pytest.approx(rows[-1]["query_loss"] + last, rel=1e-5)
    assert summary["val"]["concept_loss"] is not None and summary["steps"] == 40


@pytest.mark.parametrize("pooling", list_poolers())
@pytest.mark.parametrize("modality", list_renderers())
def test_every_config_option_builds_its_model(tiny_bank_dir, tmp_path, modality, pooling):
    cfg = _train_cfg(tiny_bank_dir, tmp_path, f"modality={modality}", f"pooling={pooling}")
    run = models_cli.run_config(cfg)
    model = build_model(run, make_renderer(run.modality))
    assert model.encoder.out_dim > 0 and model.pooler.out_dim == 256
    assert run.train.batch_for(modality) == 4
    for name in ("tiny", "default", "paper"):
        s = models_cli.run_config(_train_cfg(tiny_bank_dir, tmp_path, f"train={name}")).train
        assert s.lr_for(modality) == {"schema": 1e-3, "image": 1e-4, "sound": 5e-4}[modality]


def test_bad_configs_are_clear_errors(tiny_bank_dir, tmp_path):
    with pytest.raises(ConfigError, match="unknown pooler 'bogus'"):
        models_cli.train(_train_cfg(tiny_bank_dir, tmp_path, "pooling.name=bogus"))
    with pytest.raises(ConfigError, match=r"bad option for pooler .*\['width'\]; valid: "):
        models_cli.train(_train_cfg(tiny_bank_dir, tmp_path, "+pooling.width=3"))
    with pytest.raises(ConfigError, match="unknown train option"):
        TrainSettings.from_mapping({"stpes": 3})
    with pytest.raises(ConfigError, match=r"train.steps must be an integer in \[1, "):
        models_cli.train(_train_cfg(tiny_bank_dir, tmp_path, "train.steps=0"))
    with pytest.raises(ConfigError, match="checkpoint=<run dir"):
        models_cli.evaluate.check(_compose("eval", [f"output_dir={tmp_path}"]))  # as curi.cli
    with pytest.raises(ConfigError, match="checkpoint not found"):
        models_cli.evaluate.check(
            _compose("eval", [f"checkpoint={tmp_path}", f"output_dir={tmp_path}"])
        )
    with pytest.raises(ConfigError, match="unknown device"):
        resolve_device("tpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():  # asking for a GPU that is not there
        with pytest.raises(ConfigError, match="device=cuda was asked for but CUDA is not"):
            models_cli.train(_train_cfg(tiny_bank_dir, tmp_path, "device=cuda"))
        with pytest.raises(ConfigError, match="modality.device=cuda"):
            models_cli.train(_train_cfg(tiny_bank_dir, tmp_path, "modality.device=cuda"))


# --- the commands, end to end ----------------------------------------------------------------
def test_curi_train_then_eval_write_checkpoints_and_metrics(tiny_bank_dir, tmp_path):
    data = f"data_dir={tiny_bank_dir.parent}"
    run = tmp_path / "run"
    out = _curi(
        "train",
        "bank=tiny",
        "train=tiny",
        data,
        f"output_dir={run}",
        "progress=false",
        "train.steps=4",
        "train.eval_every=4",
        "train.checkpoint_every=2",
        "train.val_episodes=8",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout[out.stdout.index("{") :])
    assert summary["steps"] == 4 and summary["parameters"]["total"] > 0
    names = {p.name for p in (run / "checkpoints").glob("*.pt")}
    assert names == {"step_0000002.pt", "step_0000004.pt", "last.pt", "best.pt"}
    assert len(_log(run, "train")) == 4 and [r["step"] for r in _log(run, "val")] == [4]
    assert (run / ".hydra" / "config.yaml").is_file() and (run / "train.log").is_file()
    assert not (tmp_path / "outputs").exists()  # config and log in output_dir, nothing elsewhere

    ev = tmp_path / "eval"
    out = _curi(
        "eval",
        f"checkpoint={run}",
        "episodes=20",
        "num_workers=0",
        f"output_dir={ev}",
        "progress=false",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    metrics = json.loads((ev / "metrics.json").read_text())
    assert metrics["subset"] == "test" and metrics["episodes"] == 20
    assert metrics["split"] == "concept_iid" and metrics["negatives"] == "hard"
    for k in ("map", "cba", "cba_pooled"):
        assert 0 <= metrics["model"][k] <= 1
    oracles = metrics["oracles"]
    assert oracles["episodes"] == 20
    assert oracles["map_strong"] >= oracles["map_weak"] > oracles["map_random"] > 0
    assert {"cba_strong", "cba_weak", "cba_random", "cba_pooled_strong"} <= set(oracles)


# --- the runtime: device, DDP, AMP -----------------------------------------------------------
def test_runtime_of_a_single_cpu_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    rt = start_runtime("cpu", settings=TrainSettings(amp=True, amp_dtype="float16"))
    assert (rt.device, rt.rank, rt.world_size, rt.is_main) == (torch.device("cpu"), 0, 1, True)
    assert rt.amp_dtype is None and not rt.grad_scaler().is_enabled()  # AMP is CUDA-only
    model = torch.nn.Linear(3, 2)
    assert rt.wrap(model) is model
    with rt.autocast():
        assert model(torch.ones(1, 3)).dtype == torch.float32
    with rt.main_first():  # alone: no barrier to wait at
        rt.broadcast_buffers(torch.nn.BatchNorm1d(2))
    rt.close()
    with pytest.raises(ConfigError, match="unknown device"):
        start_runtime("tpu")


_DDP_CHILD = """
import json, sys, torch
torch.set_num_threads(1)
from curi import load_bank
from curi.models import RunConfig, TrainSettings
from curi.models.device_sampler import DeviceEpisodeSampler
from curi.models.schedule import lr_at
from curi.models.train import train
bank = load_bank(sys.argv[1])
s = TrainSettings(steps=2, batch_size=2, train_episodes=16, log_every=1, eval_every=2,
                  checkpoint_every=2, val_episodes=2, num_workers=0)
run = RunConfig(bank=bank.config, pooling={"name": "avg"}, train=s, device="cpu")
print(json.dumps(train(run, run_dir=sys.argv[2], bank=bank, progress=False)))
"""


def test_two_processes_train_with_ddp_and_rank_0_writes(tiny_bank_dir, tmp_path):
    run_dir = tmp_path / "run"
    procs = start_ddp_ranks(_DDP_CHILD, str(tiny_bank_dir), str(run_dir), cwd=tmp_path)
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:  # a rank that failed leaves the other waiting at a collective
            p.kill()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    s0, s1 = (json.loads(out.splitlines()[-1]) for out, _ in outs)
    assert s0["world_size"] == s1["world_size"] == 2 and s0["steps"] == s1["steps"] == 2
    assert s0["val"]["map"] == s1["val"]["map"]  # every process validated rank 0's model
    names = {p.name for p in (run_dir / "checkpoints").glob("*.pt")}
    assert names == {"step_0000002.pt", "last.pt", "best.pt"}
    assert [r["step"] for r in _log(run_dir, "train")] == [1, 2]  # one writer: no duplicates


def test_resumed_run_logs_each_step_once(tiny_bank_dir, tmp_path):
    # A run killed after its checkpoint at step 3 logged steps 4..5; resuming it in the same
    # directory replays them: metrics.jsonl must hold each (tag, step) once, the replayed value.
    over = [
        "train.steps=5",
        "train.checkpoint_every=3",
        "train.eval_every=3",
        "train.val_episodes=4",
    ]
    run = tmp_path / "run"
    models_cli.train(_train_cfg(tiny_bank_dir, run, *over))
    first = _log(run, "train")
    resume = f"resume={run / 'checkpoints' / 'step_0000003.pt'}"
    models_cli.train(_train_cfg(tiny_bank_dir, run, *over, resume))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    keys = [(r["tag"], r["step"]) for r in rows]
    assert len(keys) == len(set(keys)), sorted(keys)
    assert [r["step"] for r in _log(run, "train")] == [1, 2, 3, 4, 5]
    assert [r["loss"] for r in _log(run, "train")] == [r["loss"] for r in first]
    assert {r["step"] for r in _log(run, "val")} == {3, 5}


def _keys(run_dir: Path) -> list[tuple[str, int]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [(r["tag"], r["step"]) for r in map(json.loads, lines)]


def _events(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "tb").glob("events.out.tfevents.*"))


def test_rerun_into_a_run_folder_keeps_each_step_once(tiny_bank_dir, tmp_path, caplog):
    # A run folder holds one run: a rerun of a finished run reports it and trains nothing, a
    # rerun of one killed after a checkpoint resumes it, one killed before starts clean.
    over = [
        "train.steps=4",
        "train.checkpoint_every=2",
        "train.eval_every=2",
        "train.val_episodes=4",
    ]
    run = tmp_path / "run"
    models_cli.train(_train_cfg(tiny_bank_dir, run, *over))
    keys, metrics, first = _keys(run), (run / "metrics.jsonl").read_text(), _log(run, "train")
    summary = json.loads((run / "summary.json").read_text())
    assert len(keys) == len(set(keys)) == 1 + 4 + 2 and keys.count(("params", 0)) == 1
    events = _events(run)
    assert len(events) == 1 or not events  # (no events without tensorboard)

    with caplog.at_level("INFO", logger="curi.models.train"):  # finished: nothing retrained
        models_cli.train(_train_cfg(tiny_bank_dir, run, *over))
    assert (run / "metrics.jsonl").read_text() == metrics and _events(run) == events
    assert "the run is finished (step 4, train.steps=4); nothing to train" in caplog.text
    assert json.loads((run / "summary.json").read_text()) == summary

    # Killed after the checkpoint of step 2, having logged steps 3 and 4: a rerun resumes.
    last = run / "checkpoints" / "last.pt"
    last.unlink()
    os.link(run / "checkpoints" / "step_0000002.pt", last)
    models_cli.train(_train_cfg(tiny_bank_dir, run, *over))
    assert sorted(_keys(run)) == sorted(keys)  # each (tag, step) once, one params row
    assert [r["loss"] for r in _log(run, "train")] == [r["loss"] for r in first]
    assert load_checkpoint(last)[0]["step"] == 4
    # ... a resume with more steps also logs its parameter counts once.
    models_cli.train(_train_cfg(tiny_bank_dir, run, *over, "train.steps=5", f"resume={run}"))
    assert _keys(run).count(("params", 0)) == 1 and ("train", 5) in _keys(run)
    assert len(_keys(run)) == len(set(_keys(run))) == 1 + 5 + 3

    # The run of another config is refused, saying how to start a new one.
    with pytest.raises(ConfigError, match=r"already holds a run: .*\(train.lr\).* another outp"):
        models_cli.train(_train_cfg(tiny_bank_dir, run, *over, "train.lr=0.01"))

    # Killed before its first checkpoint: a rerun starts clean and keeps the user's files.
    shutil.rmtree(run / "checkpoints")
    (run / "notes.txt").write_text("mine")
    models_cli.train(_train_cfg(tiny_bank_dir, run, *over))
    assert sorted(_keys(run)) == sorted(keys) and (run / "notes.txt").read_text() == "mine"
    assert len(_events(run)) == len(events)  # the killed attempt's events files are gone


def test_checkpoint_that_needs_unsafe_globals_is_refused_cleanly(tmp_path):
    # A crafted checkpoint whose unpickling would call open(): refused before anything runs,
    # with curi's message, not torch's advice to load with weights_only=False.
    marker = tmp_path / "ran"

    class Crafted:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    bad = tmp_path / "crafted.pt"
    torch.save({"format": 1, "step": 3, "model": Crafted()}, bad)
    with pytest.raises(ConfigError) as err:
        load_checkpoint(bad)
    msg = str(err.value)
    assert "weights_only" not in msg and "open" in msg and str(bad) in msg
    assert len(msg) < 400 and not marker.exists()
    # Not a pickle at all: torch's advice must not reach the user either.
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x80\x02not a checkpoint" * 20)
    with pytest.raises(ConfigError) as err:
        load_checkpoint(garbage)
    assert "weights_only" not in str(err.value)


def test_resume_refuses_a_checkpoint_with_weights_that_are_not_finite(tiny_bank_dir, tmp_path):
    over = ["train.steps=2", "train.checkpoint_every=1", "train.eval_every=100"]
    run = tmp_path / "run"
    models_cli.train(_train_cfg(tiny_bank_dir, run, *over, "train.val_episodes=4"))
    step1 = run / "checkpoints" / "step_0000001.pt"
    payload, _ = load_checkpoint(step1)
    next(iter(payload["model"].values())).view(-1)[0] = float("inf")
    save_checkpoint(payload, step1)  # as a run that diverged writes it, with its digest
    again = tmp_path / "again"
    cfg = _train_cfg(tiny_bank_dir, again, *over, "train.val_episodes=4", f"resume={step1}")
    with pytest.raises(ConfigError, match=r"step_0000001\.pt holds weights that are NaN or inf"):
        models_cli.train(cfg)  # was resumed, training on from infinite weights
    assert not (again / "checkpoints").exists()


def test_a_second_run_into_a_run_folder_fails_at_once(tiny_bank_dir, tmp_path):
    run = tmp_path / "run"
    base = ["train", "bank=tiny", "train=tiny", f"data_dir={tiny_bank_dir.parent}"]
    base += [f"output_dir={run}", "progress=false", "device=cpu"]
    first = subprocess.Popen(
        [sys.executable, "-c", "from curi.cli import main; main()", *base, "train.steps=100000"],
        cwd=tmp_path,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not (run / "metrics.jsonl").is_file():  # written under the run's lock
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first run did not start"
            time.sleep(0.1)
        second = run_curi(*base, "train.steps=2", cwd=tmp_path, timeout=300)
        assert first.poll() is None  # still training, alone
    finally:
        first.kill()
        first.communicate()
    assert second.returncode == 2, second.stderr[-3000:]  # both trained into one folder
    (line,) = second.stderr.splitlines()
    assert line == (
        f"curi train: error: output_dir={run} (a training run) is being written by another "
        f"process (pid {first.pid}, holding the lock {run / '.run.lock'}); wait for it to "
        "finish, or write elsewhere"
    )

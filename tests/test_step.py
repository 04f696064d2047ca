"""The training step (`curi.models.step`): the default eager step is the plain loop bit for
bit; compiled (whole: model, clipping, Adam) and CUDA-graph steps equal eager ones, and
their loss curves over a few hundred steps follow the eager one, as does that of bfloat16
element-wise work; the step's learning rate follows the schedule, and the RNG of the caller
is left as it was."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from curi.models.config import RunConfig, TrainSettings
from curi.models.protonet import build_protonet
from curi.models.runtime import start_runtime
from curi.models.step import StepRunner, step_seed

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _batch(gen: torch.Generator, b: int = 3, device: str = "cpu") -> dict:
    """A random schema batch: b episodes of 5 + 5 support and 4 + 4 query scenes."""
    mask = torch.rand(b, 18, 5, generator=gen) < 0.7
    mask[..., 0] = True  # every scene has an object
    x = torch.randn(b, 18, 5, 20, generator=gen) * mask[..., None]
    labels = torch.tensor([1] * 5 + [0] * 5 + [1] * 4 + [0] * 4).expand(b, 18)
    out = {
        "support": x[:, :10],
        "support_mask": mask[:, :10],
        "support_labels": labels[:, :10],
        "query": x[:, 10:],
        "query_mask": mask[:, 10:],
        "query_labels": labels[:, 10:],
    }
    return {k: v.to(device) for k, v in out.items()}


def _model(pooler: str = "relation_net", device: str = "cpu", **pooler_kw) -> torch.nn.Module:
    torch.manual_seed(0)
    small = {"relation_net": {"g_dim": 16, "f_hidden": (16,)}, "transformer": {"d_model": 16}}
    return build_protonet(
        encoder="schema", pooler=pooler, embed_dim=8, pooler_kw={**small[pooler], **pooler_kw}
    ).to(device)


def _runner(
    mode: str, *, device: str = "cpu", pooler: str = "relation_net", pooler_kw=None, **kw
) -> StepRunner:
    model = _model(pooler, device, **(pooler_kw or {}))
    rt = start_runtime(device, settings=TrainSettings(amp=False))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    return StepRunner(
        model=model,
        net=model,
        opt=opt,
        scaler=rt.grad_scaler(),
        rt=rt,
        seed=0,
        lr=1e-2,
        grad_clip=1.0,
        mode=mode,
        **kw,
    )


def _train(runner: StepRunner, steps: int, device: str = "cpu") -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    runner.net.train()
    with runner.rng():
        losses = [runner(_batch(gen, device=device), t).loss.detach().clone() for t in range(steps)]
    return losses


def _assert_same(a: StepRunner, b: StepRunner, tol: float, *, weights_only: bool = False) -> None:
    """The two models' states agree (`weights_only`: their weight matrices alone)."""
    weights = {n for n, p in a.model.named_parameters() if p.dim() > 1}
    for (name, p), q in zip(
        a.model.state_dict().items(), b.model.state_dict().values(), strict=True
    ):
        if name in weights or not weights_only:
            torch.testing.assert_close(p.float(), q.float(), atol=tol, rtol=tol, msg=name)


def _held_out_loss(a: StepRunner, b: StepRunner, device: str = "cpu") -> None:
    """The two models give a new batch the same loss (within 1e-4; the same dropout)."""
    batch = _batch(torch.Generator().manual_seed(2), device=device)
    held_out = []
    with torch.no_grad(), torch.random.fork_rng(devices=[torch.device(device)] * (device != "cpu")):
        for r in (a, b):
            torch.manual_seed(2)
            held_out.append(r.net(batch).loss)
    torch.testing.assert_close(*held_out, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("pooler", ["relation_net", "transformer"])
def test_default_eager_steps_are_the_plain_loop_bit_for_bit(pooler):
    """The default step (eager, float32, the CPU's indexed pair path) computes exactly what
    the plain loop did before the step could be compiled whole: forward, backward, clipping,
    Adam, the weights and buffers equal to the bit after a few steps."""
    runner = _runner("eager", pooler=pooler)
    model = _model(pooler)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    model.train()
    with torch.random.fork_rng(devices=[]):
        for t in range(4):
            torch.manual_seed(step_seed(0, t))
            out = model(_batch(gen))
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
            opt.step()
    _train(runner, 4)
    for (name, p), q in zip(
        model.state_dict().items(), runner.model.state_dict().values(), strict=True
    ):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("pooler", ["relation_net", "transformer"])
def test_a_compiled_step_equals_the_eager_one(pooler):
    eager, compiled = (
        _runner("eager", pooler=pooler),
        _runner("compile", pooler=pooler, backend="aot_eager"),
    )
    if pooler == "relation_net":  # compiled code takes the masked pair path: the same here
        indexed = _runner("eager", pooler=pooler)
        eager.model.pooler.indexed_on_cpu = False
    a, b = _train(eager, 3), _train(compiled, 3)
    torch.testing.assert_close(torch.stack(a), torch.stack(b), atol=1e-5, rtol=1e-5)
    # The compiled Adam is capturable (a tensor rate, its step counts tensors) and rounds
    # differently; parameters whose true gradient is zero (a bias before a BatchNorm, the
    # attention's key bias, the read-out bias under prototype distances) follow the rounding
    # by lr-sized steps, as in the CUDA-graph test below: the weights and the loss of a new
    # batch are what must agree.
    _assert_same(eager, compiled, 1e-4, weights_only=True)
    _held_out_loss(eager, compiled)
    assert eager.mode == "eager" and compiled.mode == "compile"
    assert all(
        g["capturable"] and isinstance(g["lr"], torch.Tensor) for g in compiled.opt.param_groups
    )
    if pooler == "relation_net":  # the CPU's own path: the same losses
        torch.testing.assert_close(
            torch.stack(_train(indexed, 3)), torch.stack(b), atol=1e-5, rtol=1e-5
        )


def test_the_step_seeds_dropout_and_leaves_the_callers_rng():
    before = torch.random.get_rng_state()
    one, two = _runner("eager", pooler="transformer"), _runner("eager", pooler="transformer")
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    _train(one, 2)
    assert torch.equal(torch.random.get_rng_state(), state)  # untouched by the steps
    torch.manual_seed(7)  # another caller state: the steps draw the same dropout
    _train(two, 2)
    _assert_same(one, two, 0.0)
    torch.random.set_rng_state(before)


def test_the_step_uses_the_schedules_rate():
    r = _runner("eager", schedule="cosine", warmup=2, steps=10)
    rates = [r.lr(t) for t in range(10)]
    assert rates[0] == pytest.approx(5e-3) and rates[1] == pytest.approx(1e-2)
    assert rates[2] == rates[1] and all(a > b for a, b in zip(rates[2:], rates[3:], strict=False))
    out = _train(r, 1)
    assert len(out) == 1 and r.opt.param_groups[0]["lr"] == pytest.approx(5e-3)


def test_a_compiler_that_fails_falls_back_to_eager(caplog):
    def broken(graph, inputs):
        raise RuntimeError("no C++ compiler here")

    eager, fallback = _runner("eager"), _runner("compile", backend=broken)
    with caplog.at_level("WARNING", logger="curi.models.step"):
        a, b = _train(eager, 2), _train(fallback, 2)
    assert fallback.mode == "eager" and "torch.compile failed" in caplog.text
    torch.testing.assert_close(torch.stack(a), torch.stack(b))
    (group,) = fallback.opt.param_groups  # the optimiser as it was made: eager Adam takes it
    assert isinstance(group["lr"], float) and not group["capturable"]
    assert (group["foreach"], group["fused"]) == (None, None)


def test_compile_graph_without_cuda_compiles_the_step(caplog):
    with caplog.at_level("INFO", logger="curi.models.step"):
        r = _runner("compile_graph", backend="aot_eager")
    assert r.mode == "compile" and "CUDA graphs need a CUDA device" in caplog.text
    _train(r, 2)
    assert r._graph is None


def test_an_unknown_step_mode_is_refused():
    with pytest.raises(ValueError, match="step mode must be one of"):
        _runner("fast")


@pytest.mark.parametrize(
    ("compile", "graph", "mode"),
    [(False, "auto", "eager"), (True, "auto", "compile"), (True, True, "compile"),
     (False, True, "eager")],
)  # fmt: skip
def test_the_run_wires_its_step_mode(tiny_bank, compile, graph, mode):
    """On the CPU: train.compile compiles the whole step; a CUDA graph asked for falls back."""
    from curi.models.config import build_model
    from curi.models.data import make_renderer
    from curi.models.train import _step_runner

    run = RunConfig.from_mapping(
        {
            "bank": tiny_bank.config,
            "device": "cpu",
            "train": {"compile": compile, "cuda_graph": graph},
        }
    )
    renderer = make_renderer(run.modality)
    model = build_model(run, renderer)
    rt = start_runtime("cpu", settings=run.train)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    r = _step_runner(run, rt, renderer, model, model, opt, rt.grad_scaler(), 1e-3)
    assert r.mode == mode


def test_a_capture_that_fails_falls_back_to_eager(caplog):
    r = _runner("eager")
    r.mode = "graph"  # as on a GPU, where capturing this step failed
    with caplog.at_level("WARNING", logger="curi.models.step"):
        assert r._capture(_batch(torch.Generator().manual_seed(0))) is None
    assert r.mode == "eager" and "capturing a CUDA graph failed" in caplog.text


def test_graph_mode_without_cuda_falls_back_to_eager():
    assert _runner("graph").mode == "eager"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_a_step_replayed_from_a_cuda_graph_equals_the_eager_one():
    eager, graph = _runner("eager", device="cuda"), _runner("graph", device="cuda")
    a, b = _train(eager, 8, "cuda"), _train(graph, 8, "cuda")  # 3 eager, then 5 replays
    assert graph.mode == "graph" and graph._graph is not None
    torch.testing.assert_close(torch.stack(a), torch.stack(b), atol=1e-4, rtol=1e-4)
    # A bias that feeds BatchNorm has a gradient of zero but for rounding (about 1e-7), which
    # Adam scales up to steps of about lr: such biases follow the rounding of the kernels, and
    # an H200 run (CUDA graph against eager) ended them apart. BatchNorm cancels them, so the
    # weights and the loss of a new batch are what must agree.
    _assert_same(eager, graph, 1e-4, weights_only=True)
    _held_out_loss(eager, graph, "cuda")
    assert copy.deepcopy(graph.model.state_dict()).keys() == eager.model.state_dict().keys()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_a_compiled_step_replayed_from_a_cuda_graph_equals_the_eager_one():
    """``compile_graph``: the Inductor-compiled step (model, clipping, Adam) captured after 3
    compiled warmup steps and replayed; it follows the eager step as the graph step does."""
    eager, fused = _runner("eager", device="cuda"), _runner("compile_graph", device="cuda")
    a, b = _train(eager, 8, "cuda"), _train(fused, 8, "cuda")
    assert fused.mode == "compile_graph" and fused._graph is not None
    torch.testing.assert_close(torch.stack(a), torch.stack(b), atol=1e-4, rtol=1e-4)
    _assert_same(eager, fused, 1e-4, weights_only=True)
    _held_out_loss(eager, fused, "cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("mode", ["graph", "compile_graph"])
def test_a_chunked_pair_step_is_captured_on_cuda(mode):
    """The chunked pair path (every chunk of scenes in turn: what batch 1,024 took on an
    H200, whose capture then failed) is captured too, and equals the eager step."""
    eager = _runner("eager", device="cuda", pooler_kw={"pair_chunk": 1})
    graph = _runner(mode, device="cuda", pooler_kw={"pair_chunk": 1})
    a, b = _train(eager, 6, "cuda"), _train(graph, 6, "cuda")
    assert graph.mode == mode and graph._graph is not None
    torch.testing.assert_close(torch.stack(a), torch.stack(b), atol=1e-4, rtol=1e-4)


def test_elementwise_dtype_is_a_checked_option_of_the_model(tiny_bank, tmp_path):
    """``train.elementwise_dtype``: a closed set, given to the relation net by `build_model`
    (so training, validation and `curi eval` compute the same function), and part of what a
    step computes: a run is not resumed with another."""
    from curi.errors import ConfigError
    from curi.models.config import build_model, check_resumable
    from curi.models.data import make_renderer

    with pytest.raises(ConfigError, match="train.elementwise_dtype"):
        TrainSettings.from_mapping({"elementwise_dtype": "float16"})
    runs = [
        RunConfig.from_mapping({"bank": tiny_bank.config, "train": {"elementwise_dtype": d}})
        for d in ("float32", "bfloat16")
    ]
    models = [build_model(run, make_renderer(run.modality)) for run in runs]
    assert [m.pooler.elementwise_dtype for m in models] == [None, torch.bfloat16]
    with pytest.raises(ConfigError, match="train.elementwise_dtype"):
        check_resumable(runs[0], runs[1], tmp_path / "last.pt")


# --- loss curves of the fused paths against the eager one, through `train` (tiny bank) -------
CURVE_STEPS, CURVE_WINDOW = 300, 25


def _loss_curve(tiny_bank_dir, tmp_path, **train) -> list[float]:
    """Training losses of a small relation net on the tiny bank (4 episodes a step), the mean
    of every `CURVE_WINDOW` steps, through `curi.models.train.train`."""
    from curi import load_bank
    from curi.models.train import train as train_run

    settings = {"steps": CURVE_STEPS, "batch_size": 4, "log_every": CURVE_WINDOW,
                "eval_every": CURVE_STEPS, "checkpoint_every": CURVE_STEPS, "val_episodes": 8,
                "num_workers": 0, "train_episodes": 2000, **train}  # fmt: skip
    run = RunConfig.from_mapping(
        {"bank": {"name": "tiny"}, "device": "cpu", "data_dir": str(tiny_bank_dir.parent),
         "pooling": {"name": "relation_net", "g_dim": 32, "f_hidden": [32]}, "embed_dim": 32,
         "train": settings}
    )  # fmt: skip
    out = tmp_path / "-".join(f"{k}={v}" for k, v in train.items())
    train_run(run, run_dir=out, bank=load_bank(tiny_bank_dir), progress=False)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["tag"] == "train"]


def _follows(got: list[float], want: list[float], *, most: float, mean: float) -> None:
    """`got` follows the loss curve `want`: it learns (the last window is well below the
    first), every window mean within `most` of eager's, their mean difference within `mean`."""
    assert len(got) == len(want) == CURVE_STEPS // CURVE_WINDOW
    assert want[-1] < want[0] - 0.2 and got[-1] < got[0] - 0.2  # both learn
    diffs = [abs(a - b) for a, b in zip(got, want, strict=True)]
    assert all(math.isfinite(d) for d in diffs)
    assert max(diffs) <= most, diffs
    assert sum(diffs) / len(diffs) <= mean, diffs


@pytest.fixture(scope="module")
def eager_curve(tiny_bank_dir, tmp_path_factory):
    return _loss_curve(tiny_bank_dir, tmp_path_factory.mktemp("eager"))


def test_bfloat16_elementwise_work_follows_the_eager_loss_curve(
    tiny_bank_dir, tmp_path, eager_curve
):
    """300 steps with ``train.elementwise_dtype=bfloat16`` (the masked BatchNorms' rows in
    bfloat16, on the CPU's masked path) against the float32 eager run: 25-step window means
    within 0.04 of each other, 0.015 on average (measured: 0.015 and 0.005)."""
    got = _loss_curve(tiny_bank_dir, tmp_path, elementwise_dtype="bfloat16")
    _follows(got, eager_curve, most=0.04, mean=0.015)


@pytest.mark.slow
def test_the_inductor_compiled_step_follows_the_eager_loss_curve(
    tiny_bank_dir, tmp_path, eager_curve
):
    """300 steps with ``train.compile=true`` (Inductor's CPU kernels for the model, clipping
    and Adam) against the eager run: window means within 0.04, 0.015 on average (measured:
    0.008 and 0.003). Slow: compiling takes 1.5 minutes on a loaded 2-core machine."""
    got = _loss_curve(tiny_bank_dir, tmp_path, compile=True)
    _follows(got, eager_curve, most=0.04, mean=0.015)

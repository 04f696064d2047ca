"""The training step (`curi.models.step`): compiled and CUDA-graph steps equal eager ones, the
step's learning rate follows the schedule, and the RNG of the caller is left as it was."""

from __future__ import annotations

import copy

import pytest
import torch

from curi.models.config import TrainSettings
from curi.models.protonet import build_protonet
from curi.models.runtime import start_runtime
from curi.models.step import StepRunner

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


def _runner(mode: str, *, device: str = "cpu", pooler: str = "relation_net", **kw) -> StepRunner:
    torch.manual_seed(0)
    small = {"relation_net": {"g_dim": 16, "f_hidden": (16,)}, "transformer": {"d_model": 16}}
    model = build_protonet(
        encoder="schema", pooler=pooler, embed_dim=8, pooler_kw=small[pooler]
    ).to(device)
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
    _assert_same(eager, compiled, 1e-5)
    assert eager.mode == "eager" and compiled.mode == "compile"
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
    batch = _batch(torch.Generator().manual_seed(2), device="cuda")
    with torch.no_grad():
        held_out = [r.net(batch).loss for r in (eager, graph)]
    torch.testing.assert_close(*held_out, atol=1e-4, rtol=1e-4)
    assert copy.deepcopy(graph.model.state_dict()).keys() == eager.model.state_dict().keys()

"""Kernels a schema relation-net training step launches, counted on the CPU, before and after
the step was compiled whole: the eager step, the model alone compiled (`torch.compile`,
Inductor's CPU backend; clipping and Adam eager: the step before), and the whole step compiled
as ``train.compile=true`` runs it (`curi.models.step.StepRunner`: forward, backward, clipping
and Adam), with float32 and with bfloat16 element-wise work (``train.elementwise_dtype``).

    python benchmarks/kernel_count.py [--batch 8] [--bank tiny] [--no-compile] [--no-write]

Each row profiles one step (the third: compilation and Adam's first step are behind it) with
`torch.profiler`, Inductor's generated kernels recorded one event a launch
(``cpp.enable_kernel_profile``), and counts the launches:

- aten kernels: the outermost aten operation of each call that has a kernel of its own (a
  composite such as ``linear`` counts as what it calls, ``addmm``; a ``_foreach`` operation
  once, as one launch on a GPU, not the per-tensor loop the CPU runs under it), views,
  allocations and type queries apart;
- host reads (``_local_scalar_dense``: a non-capturable Adam reads every parameter's step
  count), apart: a CUDA graph cannot hold them;
- Inductor kernels: launches of kernels Inductor generated; and how many it generated in all
  when compiling (``torch._inductor.metrics.generated_kernel_count``).

The eager row also gives the count of a dispatch mode (`OpCounter`: every operation that
reaches the dispatcher from Python, views apart), the count this script gave first.

Each launch of a GPU kernel costs a few microseconds and a trip through memory for its inputs
and outputs, so the count bounds what a CUDA graph (launch cost) and fusion (traffic,
docs/benchmarks.md "The limit of a schema training step") can win.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import tempfile
from collections import Counter

import torch
from _report import machine, write_section
from flops_roofline import episode_batch, masked_pairs, schema_model
from torch.utils._python_dispatch import TorchDispatchMode

# aten operations that launch no kernel: allocations, aliases and type queries
NO_KERNEL = {
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "resolve_conj",
    "resolve_neg", "lift_fresh", "_unsafe_view", "result_type", "promote_types", "detach",
}  # fmt: skip
HOST_READ = "_local_scalar_dense"


class OpCounter(TorchDispatchMode):
    """Aten operations dispatched by phase; views (which launch no kernel) apart."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()
        self._phase = "other"

    @contextlib.contextmanager
    def phase(self, name: str):
        self._phase = name
        with self:
            yield

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[self._phase, "view" if func.is_view else "compute"] += 1
        return func(*args, **(kwargs or {}))


@functools.cache
def _kind(name: str) -> str | None:
    """What a profiler event is: ``generated`` (an Inductor kernel), ``read`` (a host read),
    ``aten`` (an operation with a kernel of its own), ``composite`` (an operation made of
    others, counted through them) or None (no kernel: a view, an allocation, not aten)."""
    if "cpp_fused" in name or name.startswith("triton_"):
        return "generated"
    if not name.startswith("aten::"):
        return None
    op = name.removeprefix("aten::")
    if op == HOST_READ:
        return "read"
    packet = getattr(torch.ops.aten, op, None)
    if op in NO_KERNEL or packet is None:
        return None
    overloads = [getattr(packet, o) for o in packet.overloads()]
    if overloads and all(o.is_view for o in overloads):
        return None
    return "composite" if all(_implicit(o.name()) for o in overloads) else "aten"


def _implicit(qualified: str) -> bool:
    """Whether the overload has only a composite kernel (`qualified`: ``aten::op.overload``)."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(
            qualified, "CompositeImplicitAutograd"
        )
    except RuntimeError:  # not a registered operator (a Python-only overload)
        return True


def launches(events) -> Counter:
    """Kernel launches of profiled `events` by kind (`_kind`): an operation with a kernel
    counts once, whatever it runs inside; other events count what they hold."""

    def walk(event) -> Counter:
        kind = _kind(event.name)
        if kind in ("aten", "generated", "read"):
            return Counter({kind: 1})
        out = Counter()
        for child in event.cpu_children:
            out += walk(child)
        return out

    total = Counter()
    for event in events:
        if event.cpu_parent is None:
            total += walk(event)
    return total


def _profiled(step) -> Counter:
    """Launches of one call of `step` (after two unprofiled ones)."""
    step()
    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    return launches(prof.events())


def _runner(model, mode: str):
    from curi.models.runtime import start_runtime
    from curi.models.step import StepRunner

    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)  # CUDA's default
    rt = start_runtime("cpu")
    return StepRunner(model=model, net=model, opt=opt, scaler=rt.grad_scaler(), rt=rt, seed=0,
                      lr=1e-3, grad_clip=5.0, mode=mode)  # fmt: skip


def eager_ops(bank, batch) -> dict:
    """Aten operations of one eager step by dispatch mode (after a first step: Adam's state
    exists), by phase: ``model`` (forward and backward) and ``update`` (clipping and Adam)."""
    model = schema_model(bank, "relation_net")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)

    def step(counter=None):
        opt.zero_grad(set_to_none=True)
        with counter.phase("model") if counter else contextlib.nullcontext():
            model(batch).loss.backward()
        with counter.phase("update") if counter else contextlib.nullcontext():
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0, foreach=True)
            opt.step()

    with masked_pairs():
        step()
        counter = OpCounter()
        step(counter)
    return dict(counter.ops)


def model_compiled(bank, batch) -> Counter:
    """The step before: `torch.compile` of the model alone, clipping and Adam eager."""
    model = schema_model(bank, "relation_net")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    net = torch.compile(model)

    def step():
        opt.zero_grad(set_to_none=True)
        net(batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0, foreach=True)
        opt.step()

    return _profiled(step)


def runner_step(bank, batch, mode: str, dtype: torch.dtype | None = None) -> Counter:
    """A step of `StepRunner` in `mode` (with `dtype` element-wise work)."""
    from curi.models.poolers import set_elementwise_dtype

    model = schema_model(bank, "relation_net")
    set_elementwise_dtype(model, dtype)
    runner = _runner(model, mode)
    steps = iter(range(10))
    with runner.rng():
        return _profiled(lambda: runner(batch, next(steps)))


def bn_relu_layer(*, compiled: bool, rows: int = 1600, channels: int = 256) -> Counter:
    """One masked BatchNorm + ReLU of g (`masked_batch_norm`, a random (rows, channels) input,
    about half its rows kept), forward and backward: eager, or compiled by Inductor."""
    from curi.models.relation_pairs import masked_batch_norm

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, channels, generator=gen, requires_grad=True)
    keep = torch.rand(rows, generator=gen) < 0.5
    bn = torch.nn.BatchNorm1d(channels)

    def layer(x, keep):
        return torch.relu(masked_batch_norm(x, keep, bn)).sum()

    fn = torch.compile(layer) if compiled else layer
    return _profiled(lambda: fn(x, keep).backward())


def count_all(bank, batch, *, compile: bool = True) -> dict[str, Counter]:
    """Every row's launches, with Inductor's generated kernels (``generated_at_compile``)."""
    from torch._inductor import config, metrics

    rows = {"eager": runner_step(bank, batch, "eager")}
    if not compile:
        return rows
    with config.patch({"cpp.enable_kernel_profile": True}):
        rows["layer"] = bn_relu_layer(compiled=False)
        rows["layer compiled"] = bn_relu_layer(compiled=True)
        for name, fn in (
            ("model compiled", lambda: model_compiled(bank, batch)),
            ("step compiled", lambda: runner_step(bank, batch, "compile")),
            ("step compiled, bf16", lambda: runner_step(bank, batch, "compile", torch.bfloat16)),
        ):
            torch._dynamo.reset()
            metrics.reset()
            rows[name] = fn()
            rows[name]["generated_at_compile"] = metrics.generated_kernel_count
    return rows


ROWS = {
    "eager": "eager (before)",
    "model compiled": "`torch.compile` of the model, clipping and Adam eager (before)",
    "step compiled": "the whole step compiled, `train.compile=true` (after)",
    "step compiled, bf16": "the same, `train.elementwise_dtype=bfloat16` (after)",
}


def table(rows: dict[str, Counter], eager_dispatch: dict, batch: int) -> str:
    lines = [
        f"Kernels of one schema relation-net training step (`benchmarks/kernel_count.py`, batch "
        f"{batch}, masked pair path, CPU backend; {machine()}):",
        "",
        "| step | aten kernels | Inductor kernels (generated when compiling) | launches in all "
        "| fewer than eager | host reads |",
        "|---|---|---|---|---|---|",
    ]
    base = rows["eager"]["aten"] + rows["eager"]["generated"]
    for name, c in rows.items():
        if name.startswith("layer"):
            continue
        total = c["aten"] + c["generated"]
        gen = f"{c['generated']:,} ({c['generated_at_compile']:,})" if "compiled" in name else "0"
        lines.append(
            f"| {ROWS[name]} | {c['aten']:,} | {gen} | {total:,} | {base / max(total, 1):.1f}x "
            f"| {c['read']:,} |"
        )
    model = eager_dispatch.get(("model", "compute"), 0)
    update = eager_dispatch.get(("update", "compute"), 0)
    lines += [
        "",
        f"A dispatch mode counts the eager step as {model + update:,} aten operations ({model:,} "
        f"forward and backward, {update:,} clipping and Adam; views apart: "
        f"{eager_dispatch.get(('model', 'view'), 0):,}), the host reads among them.",
    ]
    if "layer" in rows:
        eager, fused = rows["layer"], rows["layer compiled"]
        lines.append(
            f"One masked BatchNorm + ReLU of g, forward and backward: {eager['aten']:,} aten "
            f"kernels eager; compiled, {fused['generated']:,} Inductor kernels and "
            f"{fused['aten']:,} aten kernels."
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--bank", default="tiny")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    from curi.bank import open_bank

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        bank = open_bank(args.bank, args.data_dir or tmp, progress=False, build=True)
        batch = episode_batch(bank, args.batch)
        dispatch = eager_ops(bank, batch)
        with masked_pairs():
            rows = count_all(bank, batch, compile=not args.no_compile)
    body = table(rows, dispatch, args.batch)
    if args.no_write:
        print(body)
    else:
        write_section("kernel-count", body)


if __name__ == "__main__":
    main()

"""Kernels a schema relation-net training step launches, counted on the CPU: the eager step's
aten operations (forward, backward, gradient clipping and Adam, under a dispatch counter, the
masked pair path the GPU runs), and, with `torch.compile` (Inductor, CPU backend), the kernels
Inductor generates for the model's forward and backward graphs plus the aten operations left
outside them (clipping and the optimizer).

    python benchmarks/kernel_count.py [--batch 8] [--bank tiny] [--no-compile] [--no-write]

Each launch of a GPU kernel costs a few microseconds of launch and a trip through memory for its
inputs and outputs, so the count bounds what a CUDA graph (launch cost) and fusion (traffic,
docs/benchmarks.md "The limit of a schema training step") can win.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections import Counter

import torch
from _report import machine, write_section
from flops_roofline import episode_batch, masked_pairs, schema_model
from torch.utils._python_dispatch import TorchDispatchMode


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


def _step(net, model, opt, batch, counter: OpCounter | None = None) -> None:
    """One step; with `counter`, its operations counted by phase (``model``: forward and
    backward; ``update``: clipping and Adam)."""
    opt.zero_grad(set_to_none=True)
    with counter.phase("model") if counter else contextlib.nullcontext():
        net(batch).loss.backward()
    with counter.phase("update") if counter else contextlib.nullcontext():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0, foreach=True)
        opt.step()


def eager_ops(bank, batch) -> dict:
    """Aten operations of one eager step (after a first step: Adam's state exists)."""
    model = schema_model(bank, "relation_net")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)  # CUDA's default
    with masked_pairs():
        _step(model, model, opt, batch)
        counter = OpCounter()
        _step(model, model, opt, batch, counter)
    return dict(counter.ops)


def compiled_kernels(bank, batch) -> dict:
    """Inductor's generated kernels for the compiled model (forward and backward), and the
    aten operations of the step outside it, at the second step."""
    from torch._inductor import metrics

    model = schema_model(bank, "relation_net")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    net = torch.compile(model)
    metrics.reset()
    _step(net, model, opt, batch)  # compiles forward and backward
    generated = metrics.generated_kernel_count
    counter = OpCounter()
    _step(net, model, opt, batch, counter)
    ops = counter.ops
    return {
        "generated": generated,
        "model": ops["model", "compute"],
        "update": ops["update", "compute"],
    }


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
        eager = eager_ops(bank, batch)
        comp = None if args.no_compile else compiled_kernels(bank, batch)
    lines = [
        f"Kernels of one schema relation-net training step (`benchmarks/kernel_count.py`, batch "
        f"{args.batch}, masked pair path; torch {torch.__version__}; {machine()}):",
        "",
        "| step | forward + backward | clipping + Adam (foreach) | in all |",
        "|---|---|---|---|",
    ]
    e_model, e_update = eager.get(("model", "compute"), 0), eager.get(("update", "compute"), 0)
    lines.append(
        f"| eager: aten operations (views apart: {eager.get(('model', 'view'), 0):,}) "
        f"| {e_model:,} | {e_update:,} | {e_model + e_update:,} |"
    )
    if comp is not None:
        total = comp["generated"] + comp["model"] + comp["update"]
        lines.append(
            f"| `torch.compile` of the model (Inductor, CPU): generated kernels (+ aten "
            f"operations outside its graph) | {comp['generated']:,} (+ {comp['model']:,}) "
            f"| {comp['update']:,} | {total:,} ({(e_model + e_update) / max(total, 1):.1f}x "
            "fewer) |"
        )
    body = "\n".join(lines)
    if args.no_write:
        print(body)
    else:
        write_section("kernel-count", body)


if __name__ == "__main__":
    main()

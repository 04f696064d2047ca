"""The launch counter of `benchmarks/kernel_count.py` on small profiled calls: a composite
operation counts as the kernel it calls, a foreach operation once (one launch on a GPU, not
the per-tensor loop the CPU runs), views and allocations not at all, host reads apart."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def kernel_count():
    sys.path.insert(0, str(BENCH))
    try:
        import kernel_count

        yield kernel_count
    finally:
        sys.path.remove(str(BENCH))


def _launches(kernel_count, fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return dict(kernel_count.launches(prof.events()))


def test_composites_count_what_they_call_and_views_nothing(kernel_count):
    x, w, b = torch.randn(4, 3), torch.randn(5, 3), torch.randn(5)
    got = _launches(kernel_count, lambda: torch.nn.functional.linear(x, w, b).t().unsqueeze(0))
    assert got == {"aten": 1}  # addmm; the transpose and the unsqueeze are views
    assert _launches(kernel_count, lambda: torch.empty(3).view(3, 1)) == {}


def test_a_foreach_operation_is_one_launch_and_a_host_read_is_apart(kernel_count):
    ts = [torch.zeros(2) for _ in range(6)]
    assert _launches(kernel_count, lambda: torch._foreach_add_(ts, 1.0)) == {"aten": 1}
    got = _launches(kernel_count, lambda: (ts[0].sum() + 1).item())
    assert got == {"aten": 2, "read": 1}

"""Learning-rate schedules (`curi.models.schedule`)."""

from __future__ import annotations

import math

import pytest

from curi.models.schedule import SCHEDULES, lr_at, scaled_lr


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_schedules_warm_up_then_hold_or_decay_to_zero(schedule):
    rates = [lr_at(t, lr=1.0, schedule=schedule, warmup=10, steps=110) for t in range(110)]
    assert rates[:10] == pytest.approx([(t + 1) / 10 for t in range(10)])
    assert rates[10] == 1.0
    if schedule == "constant":
        assert set(rates[10:]) == {1.0}
        return
    tail = rates[10:]
    assert all(a > b > 0 for a, b in zip(tail, tail[1:], strict=False))
    end = lr_at(110, lr=1.0, schedule=schedule, warmup=10, steps=110)
    assert end == pytest.approx(0.0, abs=1e-12)
    mid = 0.5 if schedule == "linear" else 0.5 * (1 + math.cos(math.pi / 2))
    assert rates[60] == pytest.approx(mid)


def test_no_warmup_starts_at_the_rate():
    assert lr_at(0, lr=3e-4, schedule="cosine", warmup=0, steps=100) == pytest.approx(3e-4)


def test_square_root_scaling_for_larger_batches():
    assert scaled_lr(1e-3, 256, 64) == pytest.approx(2e-3)
    assert scaled_lr(1e-3, 64, 64) == pytest.approx(1e-3)

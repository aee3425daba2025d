"""The Amdahl arithmetic that decides what the optimizer works on."""

from __future__ import annotations

import math

import pytest

from autokernel.engine.amdahl import end_to_end_bound, kernel_speedup, rank, time_saved_fraction


def test_textbook_values():
    # half the time, made twice as fast: 1 / (0.5 + 0.25) = 4/3
    assert end_to_end_bound(0.5, 2.0) == pytest.approx(4 / 3)
    assert end_to_end_bound(0.9, 10.0) == pytest.approx(1 / (0.1 + 0.09))
    assert end_to_end_bound(1.0, 5.0) == pytest.approx(5.0)


def test_no_share_no_gain():
    assert end_to_end_bound(0.0, 100.0) == 1.0
    assert end_to_end_bound(0.0, math.inf) == 1.0


def test_speedup_below_one_clamps_to_one():
    assert end_to_end_bound(0.7, 0.5) == 1.0
    assert kernel_speedup(1.0, 2.0) == 1.0  # measured faster than the "floor": no gain claimed


def test_infinite_speedup_is_bounded_by_the_rest():
    assert end_to_end_bound(0.75, math.inf) == pytest.approx(4.0)
    assert end_to_end_bound(1.0, math.inf) == math.inf
    assert kernel_speedup(3.0, 0.0) == math.inf
    assert kernel_speedup(0.0, 0.0) == 1.0


def test_share_outside_unit_interval_is_clamped():
    assert end_to_end_bound(1.5, 2.0) == pytest.approx(2.0)
    assert end_to_end_bound(-0.1, 2.0) == 1.0
    with pytest.raises(ValueError):
        end_to_end_bound(float("nan"), 2.0)


def test_rank_orders_by_time_that_can_be_saved():
    rows = [
        {"name": "small share, huge s", "share": 0.05, "kernel_speedup": 1000.0},
        {"name": "big share, near floor", "share": 0.6, "kernel_speedup": 1.1},
        {"name": "middle", "share": 0.3, "kernel_speedup": 4.0},
    ]
    ranked = [r["name"] for r in rank(rows)]
    saved = {r["name"]: time_saved_fraction(r["share"], r["kernel_speedup"]) for r in rows}
    assert ranked == sorted(saved, key=saved.get, reverse=True)
    assert ranked == ["middle", "big share, near floor", "small share, huge s"]

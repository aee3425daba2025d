"""Interleaved forward timing and per-site timing (CPU: the host clock; the same code records CUDA events).

The host clock is a virtual one that the modules and functions advance, so every time is exact whatever
else the machine is doing."""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn

from autokernel.engine import forward_timing
from autokernel.engine.forward_timing import (ForwardTime, SiteTimer, breakdown_text, round_speedups, site_breakdown,
                                              time_interleaved)

CLOCK = {"s": 0.0}


@pytest.fixture(autouse=True)
def virtual_clock(monkeypatch):
    CLOCK["s"] = 0.0
    monkeypatch.setattr(forward_timing, "time", types.SimpleNamespace(perf_counter=lambda: CLOCK["s"]))


def spend(seconds: float) -> None:
    CLOCK["s"] += seconds


class Sleepy(nn.Module):
    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x):
        spend(self.seconds)
        return x + 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.slow = Sleepy(0.03)
        self.fast = Sleepy(0.0)
        self.other = Sleepy(0.01)

    def forward(self, x):
        return self.other(self.fast(self.slow(x)))


def test_rounds_rotate_the_order_so_drift_is_shared():
    calls = []
    fns = {name: (lambda n=name: calls.append(n)) for name in ("a", "b", "c")}
    times = time_interleaved(fns, "cpu", rounds=3)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert set(times) == {"a", "b", "c"} and all(t.rounds == 3 and t.ms >= 0 for t in times.values())


def test_spread_is_the_range_of_round_medians_over_the_median():
    state = {"n": 0}

    def drifting():  # each call slower than the last: what a heating GPU looks like
        state["n"] += 1
        spend(0.005 * state["n"])

    t = time_interleaved({"x": drifting}, "cpu", rounds=3)["x"]
    assert t.per_round == pytest.approx((5.0, 10.0, 15.0))
    assert t.spread == pytest.approx(1.0) and t.ms == pytest.approx(10.0)  # (15 - 5) / 10 ms


def test_round_speedups_pair_each_round_so_a_warming_gpu_cancels_out():
    # Both models slow down 20% over the run (round medians spread 18%), the patched one is 1.3x throughout.
    eager = ForwardTime(ms=36.0, spread=0.18, rounds=3, per_round=(33.0, 36.0, 39.6))
    patched = ForwardTime(ms=27.7, spread=0.18, rounds=3, per_round=(33.0 / 1.3, 36.0 / 1.3, 39.6 / 1.3))
    assert [round(r, 6) for r in round_speedups(eager, patched)] == [1.3, 1.3, 1.3]
    t = time_interleaved({"a": lambda: None, "b": lambda: None}, "cpu", rounds=2)
    assert len(t["a"].per_round) == 2 and len(round_speedups(t["a"], t["b"])) <= 2


def test_site_timer_splits_the_forward_into_the_watched_modules_and_the_rest():
    net = Net()
    timer = SiteTimer(net, [("slow", "norm"), ("fast", "norm"), ("missing", "x")], "cpu")
    before = timer.measure(lambda: net(torch.zeros(1)), forwards=2)
    timer.close()
    assert before["norm"] == pytest.approx(30.0) and before["forward"] == pytest.approx(40.0)
    net.slow.seconds = 0.0  # "the swap": the watched module got faster
    timer = SiteTimer(net, [("slow", "norm"), ("fast", "norm")], "cpu")
    after = timer.measure(lambda: net(torch.zeros(1)), forwards=1)
    timer.close()
    rows = {r["site"]: r for r in site_breakdown(before, after)}
    assert rows["norm"]["before_ms"] == pytest.approx(30.0) and rows["norm"]["after_ms"] == pytest.approx(0.0)
    assert rows["rest"]["before_ms"] == pytest.approx(10.0) and rows["rest"]["after_ms"] == pytest.approx(10.0)
    assert "norm modules" in breakdown_text(list(rows.values()))
    assert not net.slow._forward_hooks and not net.slow._forward_pre_hooks  # close() removed its hooks

"""The worker's guards in-process (engine/guards.py), and the timer's side of them: a clock replaced by a
candidate never reaches the timer, and a time under the roofline floor is refused, not recorded."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from autokernel.engine import guards, timing
from autokernel.engine.roofline import Ceilings
from autokernel.kernels import get_spec


class _Subclass(torch.Tensor):
    pass


def test_only_plain_tensors_with_storage_are_outputs():
    plain = torch.ones(4, 3)
    assert guards.output_refusal(plain) == ""
    assert guards.output_refusal(plain.t()) == "" and guards.output_refusal(plain[:, 1]) == ""
    assert guards.output_refusal(torch.empty(0)) == ""
    assert "torch.Tensor subclass" in guards.output_refusal(plain.as_subclass(_Subclass))
    assert "torch.Tensor subclass" in guards.output_refusal(torch.nn.Parameter(plain))
    assert "meta tensor" in guards.output_refusal(torch.empty(4, device="meta"))
    assert guards.output_refusal("not a tensor") == ""  # the comparison names that, with the output's position


def test_a_thread_still_running_is_named_and_a_finished_one_is_not():
    before = guards.thread_snapshot()
    done = threading.Event()
    t = threading.Thread(target=done.wait, name="filler", daemon=True)
    t.start()
    try:
        why = guards.threads_left(before)
        assert "left 1 thread(s) running (filler) after the call returns" in why
    finally:
        done.set()
        t.join()
    assert guards.threads_left(before) == ""


def test_a_replaced_attribute_is_named_and_the_original_put_back_is_fine(monkeypatch):
    with guards.untouched():
        assert guards.replaced() == []
        monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
        monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.0)
        assert {"time.perf_counter", "torch.cuda.Event.elapsed_time"} <= set(guards.replaced())
        monkeypatch.undo()
        assert guards.replaced() == []
    assert guards.replaced() == []  # outside a watch: nothing is watched


def test_the_timer_reads_the_clock_taken_before_any_candidate(monkeypatch):
    seen = []
    real = time.perf_counter

    def slow():
        seen.append(1)
        return real() / 10

    monkeypatch.setattr(time, "perf_counter", slow)  # what patches_clock.py does at import
    x = torch.randn(8, 64)
    ms, out, args = timing.time_calls(lambda a: torch.softmax(a, -1), [(x,)], "cpu")
    assert seen == [] and ms > 0 and out.shape == x.shape


def _gpu_like(bandwidth_gbs: float) -> Ceilings:
    return Ceilings("test gpu", bandwidth_gbs=bandwidth_gbs, matmul_tflops={"fp32": 1e3, "fp16": 1e3, "bf16": 1e3},
                    measured=False, device="cuda")


def test_a_time_under_the_floor_is_refused_by_bench_not_recorded(monkeypatch):
    spec = get_spec("softmax")
    shape = {"rows": 16, "cols": 256}
    fn = lambda x: torch.softmax(x, -1)  # noqa: E731  (the timer judges times, not how they were got)
    # a device that would need a day to move these bytes: any time measured here is under its floor
    monkeypatch.setattr(timing, "device_ceilings", lambda device: _gpu_like(1e-9))
    with pytest.raises(RuntimeError, match="under the floor .* impossible"):
        timing.bench(spec, fn, shape, "fp32", "cpu", with_compile=False)
    # a device far faster than the measurement: the record stands
    monkeypatch.setattr(timing, "device_ceilings", lambda device: _gpu_like(1e6))
    rec = timing.bench(spec, fn, shape, "fp32", "cpu", with_compile=False)
    assert rec.kernel_ms > 0 and rec.speedup_eager > 0


def test_the_l2_set_aside_is_gpu_only_code_that_does_nothing_on_cpu():
    from autokernel.engine import l2

    l2.reset("cpu")
    assert l2.persisting_bytes("cpu") == 0
    assert l2._driver == []  # libcuda never loaded (this machine may have none)

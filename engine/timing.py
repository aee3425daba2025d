"""Honest timing of a kernel against PyTorch eager and torch.compile, in one process and one run.

On a GPU: `triton.testing.do_bench` (warm-up, L2 flushed before every run, median of many), with
inputs rotated among enough sets that together they are several times the L2, and random data.
Each median is cross-checked by a wall-clock time of a batch of calls closed by a whole-device
synchronize: work a kernel leaves on a side stream is invisible to events on the default stream
but not to the wall clock, so when the two disagree the wall-clock figure is the one reported.
After timing, the candidate's output on a timed input is checked again against the reference.
On CPU (Triton's interpreter) the same numbers are taken but marked not meaningful, and
torch.compile is not timed.

Runs inside the worker process (engine/worker.py), never in the engine's.
"""

from __future__ import annotations

import math
import secrets
import statistics
import time
from typing import Any, Callable

import torch

from autokernel.kernels.spec import KernelSpec, dtype_from_name

from .results import BenchRecord
from .roofline import ceilings as device_ceilings

L2_BYTES = 64 * 1024 * 1024  # larger than the H100's 50 MB and the H200's 60 MB
MAX_ROTATION_BYTES = 4 * 1024**3
SIDE_STREAM_SLACK = 1.5

# torch.compile of a reference, per (kernel, shape, dtype), kept for the worker's life: the first
# call of a compiled function costs seconds (measured: ~14 s for a softmax on the H100).
_COMPILED: dict[tuple, Callable[..., Any] | None] = {}
_COMPILE_ERRORS: dict[tuple, str] = {}


def _nbytes(args: tuple) -> int:
    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def input_sets(spec: KernelSpec, shape: dict, dtype: torch.dtype, device: str) -> list[tuple]:
    """Enough independent random input sets that cycling through them never hits a warm L2."""
    first = tuple(spec.make_inputs(shape, dtype, device, torch.Generator().manual_seed(secrets.randbits(62)), "normal"))
    if device != "cuda":
        return [first]
    per_set = max(_nbytes(first), 1)
    n = min(max(1, math.ceil(3 * L2_BYTES / per_set)), max(1, MAX_ROTATION_BYTES // per_set), 16)
    sets = [first]
    for _ in range(n - 1):
        sets.append(tuple(spec.make_inputs(shape, dtype, device, torch.Generator().manual_seed(secrets.randbits(62)), "normal")))
    return sets


def _rotating(fn: Callable[..., Any], sets: list[tuple]) -> Callable[[], Any]:
    state = {"i": 0}

    def call():
        args = sets[state["i"] % len(sets)]
        state["i"] += 1
        return fn(*args)

    return call


def time_ms(fn: Callable[..., Any], sets: list[tuple], device: str) -> tuple[float, str]:
    """Median ms of one call, and a note when the wall clock had to overrule the device events."""
    call = _rotating(fn, sets)
    if device != "cuda":
        call()  # warm-up (and the interpreter's first-call work)
        samples = []
        budget = time.perf_counter() + 2.0
        while len(samples) < 3 or (time.perf_counter() < budget and len(samples) < 20):
            t0 = time.perf_counter()
            call()
            samples.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(samples), ""
    from triton.testing import do_bench

    event_ms = float(do_bench(call, warmup=25, rep=100, return_mode="median"))
    # Wall clock over a batch closed by a whole-device synchronize: catches side-stream work.
    n = max(5, min(200, int(50 / max(event_ms, 1e-3))))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3 / n
    if wall_ms > SIDE_STREAM_SLACK * event_ms + 0.05:
        return wall_ms, (f"wall-clock {wall_ms:.4f} ms vs events {event_ms:.4f} ms: work escapes the timed stream "
                         f"(or launch-bound); the wall-clock time is reported")
    return event_ms, ""


def compiled_reference(spec: KernelSpec, shape: dict, dtype: torch.dtype, sample: tuple) -> tuple[Callable | None, str, float]:
    """torch.compile(reference), compiled once per shape and dtype; (None, why) when it can't be."""
    key = (spec.name, tuple(sorted(shape.items())), dtype)
    if key in _COMPILED:
        return _COMPILED[key], _COMPILE_ERRORS.get(key, ""), 0.0
    t0 = time.perf_counter()
    try:
        fn = torch.compile(spec.reference, dynamic=False)
        fn(*sample)
        if sample and isinstance(sample[0], torch.Tensor) and sample[0].is_cuda:
            torch.cuda.synchronize()
        _COMPILED[key] = fn
    except Exception as e:  # no compiler, an unsupported op...: say so, never crash the bench
        _COMPILED[key] = None
        _COMPILE_ERRORS[key] = f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return _COMPILED[key], _COMPILE_ERRORS.get(key, ""), time.perf_counter() - t0


def _achieved(spec: KernelSpec, shape: dict, dtype: torch.dtype, ms: float) -> float:
    if ms <= 0:
        return 0.0
    if spec.metric == "TFLOP/s":
        return spec.flops(shape, dtype) / (ms * 1e-3) / 1e12
    return spec.bytes_moved(shape, dtype) / (ms * 1e-3) / 1e9


def _check_timed_output(spec: KernelSpec, fn: Callable, args: tuple, dtype: torch.dtype) -> None:
    """The timed runs must have computed the right thing (not a cached or side-stream shortcut)."""
    out = fn(*args)
    if out is not None and isinstance(out, torch.Tensor) and out.is_cuda:
        torch.cuda.synchronize()
    ref = spec.reference(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
    atol, rtol = spec.tolerance(dtype)
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or not torch.allclose(out.double(), ref, atol=atol, rtol=rtol):
        raise RuntimeError("the output of a timed call is wrong: the kernel does not compute the same thing when timed")


def bench(spec: KernelSpec, kernel_fn: Callable[..., Any], shape: dict, dtype_name: str, device: str,
          backend: str = "triton", with_compile: bool | None = None) -> BenchRecord:
    """Time the candidate, eager and torch.compile at one shape and dtype, in this process."""
    dtype = dtype_from_name(dtype_name)
    ceil = device_ceilings(device)
    sets = input_sets(spec, shape, dtype, device)
    kernel_fn(*sets[0])  # compile / autotune outside the timing
    kernel_ms, note = time_ms(kernel_fn, sets, device)
    _check_timed_output(spec, kernel_fn, sets[-1], dtype)
    eager_ms, _ = time_ms(spec.reference, sets, device)
    with_compile = (device == "cuda") if with_compile is None else with_compile
    compile_ms, why = None, ""
    if with_compile:
        fn, why, _ = compiled_reference(spec, shape, dtype, sets[0])
        if fn is not None:
            compile_ms, _ = time_ms(fn, sets, device)
    else:
        why = "torch.compile is not timed on CPU"
    ceiling = ceil.tflops(dtype) if spec.metric == "TFLOP/s" else ceil.bandwidth_gbs
    achieved = _achieved(spec, shape, dtype, kernel_ms)
    return BenchRecord(
        kernel=spec.name, backend=backend, shape=dict(shape), dtype=dtype_name, device_name=ceil.device_name,
        kernel_ms=kernel_ms, eager_ms=eager_ms, compile_ms=compile_ms, metric=spec.metric, achieved=achieved,
        ceiling=ceiling, fraction_of_ceiling=achieved / ceiling if ceiling else 0.0,
        speedup_eager=eager_ms / kernel_ms if kernel_ms else 0.0,
        speedup_compile=(compile_ms / kernel_ms) if (compile_ms and kernel_ms) else None,
        meaningful=device == "cuda",
        eager_achieved=_achieved(spec, shape, dtype, eager_ms),
        compile_achieved=_achieved(spec, shape, dtype, compile_ms) if compile_ms else None,
        note="; ".join(n for n in (note, why) if n),
    )

"""Honest timing of a kernel against PyTorch eager and torch.compile, in one process and one run.

On a GPU: CUDA events on the default stream around each call, warm-up first, the median of many
calls; before every timed call (outside the timed region) the first data input is negated in place and the
L2 is flushed (then a short GPU spin, so the host is ahead of the start event), and the inputs rotate among
enough sets that together they are several times the L2.
The negation keeps the tensor objects, addresses and version counters, so a kernel that caches
results by anything but the data itself is timed on stale answers, and the last timed call's
output is checked against the reference for the values its inputs held. Each median is
cross-checked by a wall-clock time of a batch of calls closed by a whole-device synchronize: work
a kernel leaves on a side stream is invisible to events on the default stream but not to the wall
clock, so when the two disagree the wall clock decides, for all three functions alike (a launch-bound
candidate is compared with eager's wall clock, not its events: `fair_timing`). The candidate, eager and
torch.compile are each timed in two rounds and the lower median counts (see `bench`).
On CPU (Triton's interpreter) the same numbers are taken but marked not meaningful, and
torch.compile is not timed.

Runs inside the worker process (engine/worker.py), never in the engine's.
"""

from __future__ import annotations

import math
import secrets
import statistics
from typing import Any, Callable

import torch

from autokernel.kernels.spec import KernelSpec, dtype_from_name

from .guards import output_refusal, perf_counter, thread_snapshot, threads_left
from . import l2
from .harness import TrialFailure, judge_output, launch_tracker
from .outputs import as_list
from .results import BenchRecord
from .fair_timing import (NAMES, WALL, WALL_LOOKS, Times, WallLook, batch_size, combine, fastest, speedup,
                          timing_line)
from .roofline import ceilings as device_ceilings, copy_gbs_at, impossible_time

L2_BYTES = 64 * 1024 * 1024  # larger than the H100's 50 MB and the H200's 60 MB
MAX_ROTATION_BYTES = 4 * 1024**3
WARMUP_MS = 100.0  # device work before the first timed call of each kernel (clocks up, caches and lazy loads done)
REPEAT_MS = 50.0  # the second look at each function (see `bench`)
UNSTEADY = 1.25  # two looks further apart than this are reported in the record's note

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


_FLUSH: dict[str, torch.Tensor] = {}


def _flush_l2(device: str) -> None:
    """Write a buffer larger than the L2, so no input or output of the last call is still cached."""
    if device != "cuda":
        return
    buf = _FLUSH.get(device)
    if buf is None:
        buf = _FLUSH[device] = torch.empty(4 * L2_BYTES, dtype=torch.int8, device=device)
    buf.zero_()


HOST_LEAD_CYCLES = 400_000  # ~0.2 ms at the H100's 1.98 GHz: more than a Python launcher with a few launches takes


def _host_lead(device: str) -> None:
    """Give the GPU a short spin before the start event, so the host is ahead when the event is recorded:
    a launcher that takes longer on the host than the L2 flush takes on the GPU (H100 bench: a
    two-launch cross_entropy at 1024x32000, 34 us of GPU work) otherwise has the GPU wait between the
    start event and its kernel, and the events time the host. Being launch-bound is still caught: the
    wall-clock check in `time_ms` times calls back to back, with no spin."""
    if device == "cuda":
        torch.cuda._sleep(HOST_LEAD_CYCLES)


def _flip(args: tuple, data_args: tuple[int, ...]) -> None:
    """Negate the first floating data input in place (exact, reversible, and the random inputs keep
    their distribution), through `.data` so the tensor objects, addresses and version counters stay
    the same: only a kernel that reads the data can know the values changed, so a cache is useless.
    One input only: negating both operands of a product (matmul) would leave the answer unchanged."""
    for i in data_args:
        if i < len(args) and isinstance(args[i], torch.Tensor) and args[i].is_floating_point():
            args[i].data.neg_()
            return


def time_calls(fn: Callable[..., Any], sets: list[tuple], device: str, data_args: tuple[int, ...] = (0,),
               rep_ms: float = 100.0, warmup_ms: float = WARMUP_MS) -> tuple[float, Any, tuple]:
    """Median ms of one call. Before each timed call, outside the timed region, the inputs get new
    values, the L2 is flushed and the GPU spins briefly (`_host_lead`); each call is timed alone (CUDA events on the default stream; the
    wall clock on CPU). Returns (median, the last call's output, the inputs it was given), so the
    caller can check that what was timed computed the right thing."""
    state = {"i": 0}

    def one() -> tuple[float, Any, tuple, Any]:
        args = sets[state["i"] % len(sets)]
        state["i"] += 1
        _flip(args, data_args)
        if device == "cuda":
            l2.reset(device)  # lines a kernel asked the L2 to keep would survive the flush
            _flush_l2(device)
            _host_lead(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*args)
            end.record()
            return -1.0, out, args, (start, end)
        t0 = perf_counter()
        out = fn(*args)
        return (perf_counter() - t0) * 1e3, out, args, None

    if device != "cuda":
        one()  # warm-up (and the interpreter's first-call work)
        samples, last = [], None
        budget = perf_counter() + 2.0
        while len(samples) < 3 or (perf_counter() < budget and len(samples) < 20):
            ms, out, args, _ = one()
            samples.append(ms)
            last = (out, args)
        return statistics.median(samples), last[0], last[1]
    # Warm up for WARMUP_MS of device work (not a fixed count: a 30 us kernel's three calls left the GPU
    # at the clocks it idles at after a compile, and the H100 bench's first shape of a kernel came out 2-3x
    # slow), then estimate, then as many timed calls as fit in rep_ms (10 to 1000).
    start, calls = perf_counter(), 0
    while calls < 3 or ((perf_counter() - start) * 1e3 < warmup_ms and calls < 20000):
        one()
        calls += 1
        if calls % 16 == 0:
            torch.cuda.synchronize()  # keep the host from queueing far ahead of what the GPU has done
    torch.cuda.synchronize()
    t0 = perf_counter()
    for _ in range(5):
        one()
    torch.cuda.synchronize()
    per_call = (perf_counter() - t0) * 1e3 / 5
    n = max(10, min(1000, int(rep_ms / max(per_call, 1e-3))))
    pairs, out, args = [], None, ()
    for _ in range(n):
        _, out, args, ev = one()
        pairs.append(ev)
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs), out, args


def wall_clock(fn: Callable[..., Any], sets: list[tuple], n: int) -> WallLook:
    """Per call, over a batch closed by a whole-device synchronize: work that a kernel leaves on a side
    stream is invisible to events on the default stream, but not to this; the host's share (the loop up
    to the last launch returning) tells a launch-bound function from escaping work."""
    call = _rotating(fn, sets)
    l2.reset("cuda")
    torch.cuda.synchronize()
    t0 = perf_counter()
    for _ in range(n):
        call()
    t1 = perf_counter()
    torch.cuda.synchronize()
    t2 = perf_counter()
    return WallLook(wall_ms=(t2 - t0) * 1e3 / n, host_ms=(t1 - t0) * 1e3 / n)


def wall_look(fn: Callable[..., Any], sets: list[tuple], event_ms: float) -> WallLook:
    """The fastest of `WALL_LOOKS` wall-clock batches of `batch_size(event_ms)` calls: the same method for
    the candidate, eager and torch.compile, so that wall clocks compare like with like."""
    n = batch_size(event_ms)
    return fastest([wall_clock(fn, sets, n) for _ in range(WALL_LOOKS)])


def time_ms(fn: Callable[..., Any], sets: list[tuple], device: str, data_args: tuple[int, ...] = (0,),
            again: bool = False) -> tuple[float, WallLook | None, Any, tuple]:
    """Median events ms of one call, its wall-clock look (GPU, first look only), and the last timed
    call's output with its inputs (see `time_calls`). `again`: a second look at a function timed a
    moment ago on a warm GPU (short warm-up and no wall clock: the first look took it). Which of the
    two is reported is `fair_timing.Times`' choice, made over all three functions together."""
    if again:
        event_ms, out, args = time_calls(fn, sets, device, data_args, rep_ms=REPEAT_MS, warmup_ms=0.0)
        return event_ms, None, out, args
    event_ms, out, args = time_calls(fn, sets, device, data_args)
    if device != "cuda":
        return event_ms, None, out, args
    return event_ms, wall_look(fn, sets, event_ms), out, args


def _compile_key(spec: KernelSpec, shape: dict, dtype: torch.dtype) -> tuple:
    # The baseline itself is part of the key: every whole-problem spec is named "problem".
    return (spec.name, spec.eager, tuple(sorted(shape.items())), dtype)


def compiled_baseline(spec: KernelSpec, shape: dict, dtype: torch.dtype, sample: tuple) -> tuple[Callable | None, str, float]:
    """torch.compile(the spec's eager baseline), compiled once per shape and dtype; (None, why) when it can't be."""
    key = _compile_key(spec, shape, dtype)
    if key in _COMPILED:
        return _COMPILED[key], _COMPILE_ERRORS.get(key, ""), 0.0
    t0 = perf_counter()
    try:
        fn = torch.compile(spec.eager, dynamic=False)
        fn(*sample)
        if sample and isinstance(sample[0], torch.Tensor) and sample[0].is_cuda:
            torch.cuda.synchronize()
        _COMPILED[key] = fn
    except Exception as e:  # no compiler, an unsupported op...: say so, never crash the bench
        _COMPILED[key] = None
        _COMPILE_ERRORS[key] = f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return _COMPILED[key], _COMPILE_ERRORS.get(key, ""), perf_counter() - t0


def times_compile(device: str, with_compile: bool | None) -> bool:
    """Whether a bench times torch.compile: asked for, or by default on a GPU."""
    return (device == "cuda") if with_compile is None else with_compile


def compile_ahead(spec: KernelSpec, shape: dict, dtype_name: str, device: str) -> None:
    """Compile the torch.compile baseline of `shape` now, before a candidate is loaded, for `bench` to reuse:
    the threads and pools torch's compiler starts then are the worker's own, not the candidate's."""
    dtype = dtype_from_name(dtype_name)
    if _compile_key(spec, shape, dtype) in _COMPILED:  # compiled for an earlier request: no inputs to make
        return
    sample = tuple(spec.make_inputs(shape, dtype, device, torch.Generator().manual_seed(0), "normal"))
    compiled_baseline(spec, shape, dtype, sample)


def _achieved(spec: KernelSpec, shape: dict, dtype: torch.dtype, ms: float) -> float:
    if ms <= 0:
        return 0.0
    if spec.metric == "TFLOP/s":
        return spec.flops(shape, dtype) / (ms * 1e-3) / 1e12
    return spec.bytes_moved(shape, dtype) / (ms * 1e-3) / 1e9


def check_timed_output(spec: KernelSpec, out: Any, args: tuple, dtype: torch.dtype) -> None:
    """The output of the last timed call must be right for the values its inputs held then (not a
    cached, stale or side-stream shortcut that only the check's calls get right); each of them, for a
    whole problem that returns several. Judged under the stages' memory rule (`harness.judge_output`),
    so a problem at its real size is not upcast whole on the device."""
    on_cuda = any(isinstance(o, torch.Tensor) and o.is_cuda for o in as_list(out))
    if on_cuda:
        torch.cuda.synchronize()
    wrong = "the output of a timed call is wrong: the kernel does not compute the same thing when timed"
    for o in as_list(out):
        if output_refusal(o):
            raise RuntimeError(f"{wrong}: it {output_refusal(o)}")
    try:
        judge_output(spec, out, args, dtype, "cuda" if on_cuda else "cpu")
    except TrialFailure as e:
        raise RuntimeError(f"{wrong} ({e})") from None


def lower_look(first: dict[str, float | None], second: dict[str, float | None]) -> tuple[dict, str]:
    """Per name, the lower of two timings (None: not taken), and a note naming each whose looks were
    more than `UNSTEADY` apart ("" when none were)."""
    final, apart = {}, []
    for name, a in first.items():
        b = second.get(name)
        final[name] = min(a, b) if (a is not None and b is not None) else (a if a is not None else b)
        if a and b and max(a, b) > UNSTEADY * min(a, b):
            apart.append(f"{name} {a:.4g} ms in the first look, {b:.4g} ms in the second")
    return final, ("the GPU was not steady: " + "; ".join(apart) + " (the lower counts)") if apart else ""


def _time_kernel(spec: KernelSpec, kernel_fn: Callable[..., Any], sets: list[tuple], device: str,
                 dtype: torch.dtype, again: bool = False, wall_after: float | None = None) -> tuple[float | None, WallLook | None]:
    """The candidate's events median ms and wall-clock look, watched for side-stream launches and
    leftover threads, with the last timed call's output checked against the reference. `wall_after`
    (events ms of the first look): the second look is a wall-clock one only, as the baselines' are when
    the wall clock decides."""
    tracker = launch_tracker()  # Triton launches on another stream than ours would escape the events
    tracker.off_stream = 0
    if device == "cuda":
        tracker.expected_stream = torch.cuda.current_stream().cuda_stream
    threads_before = thread_snapshot()
    out = None
    try:
        if wall_after is not None:
            kernel_ms, wall = None, wall_look(kernel_fn, sets, wall_after)
        else:
            kernel_ms, wall, out, args = time_ms(kernel_fn, sets, device, spec.data_args, again=again)
    finally:
        tracker.expected_stream = None
    if tracker.off_stream:
        raise RuntimeError("the kernel launched on a side stream when timed: the timer's stream never waits for it")
    threads = threads_left(threads_before, "after the timed calls")
    if threads:
        raise RuntimeError(f"the kernel {threads}")
    if l2.persisting_bytes(device):
        raise RuntimeError("the kernel set aside L2 for persisting accesses when timed: its lines survive the L2 flush")
    if wall_after is None:
        check_timed_output(spec, out, args, dtype)
    return kernel_ms, wall


def _second_look(spec: KernelSpec, kernel_fn: Callable[..., Any], compiled: Callable | None, sets: list[tuple],
                 device: str, dtype: torch.dtype, first: Times) -> Times:
    """The three timed again by the method the first look chose: events (a warm GPU, short), or, once
    the wall clock decides, wall-clock batches for all three (then the events are the first look's)."""
    events = first.events
    fns = {"eager": spec.eager, "torch.compile": compiled}
    if first.method() == WALL:
        second = {"candidate": _time_kernel(spec, kernel_fn, sets, device, dtype, wall_after=events["candidate"])[1]}
        for name, fn in fns.items():
            second[name] = wall_look(fn, sets, events[name]) if fn is not None and events[name] is not None else None
        return Times(events=dict(events), wall=second)
    second_ev = {"candidate": _time_kernel(spec, kernel_fn, sets, device, dtype, again=True)[0]}
    for name, fn in fns.items():
        second_ev[name] = time_ms(fn, sets, device, spec.data_args, again=True)[0] if fn is not None else None
    return Times(events=second_ev, wall={n: None for n in NAMES})


def bench(spec: KernelSpec, kernel_fn: Callable[..., Any], shape: dict, dtype_name: str, device: str,
          backend: str = "triton", with_compile: bool | None = None) -> BenchRecord:
    """Time the candidate, eager and torch.compile at one shape and dtype, in this process.

    On a GPU each of the three is timed twice, in two rounds (candidate, eager, compile; then again),
    and the lower median counts: on the H100 a starter once timed at 0.24 ms in its first look and
    0.05 ms everywhere else (the GPU not yet steady after the checks), which made the next candidate
    look 4.6x faster than it was. A slowdown is never the kernel's gain, so the lower look stands; when
    the looks differ by more than `UNSTEADY`, the note says so. The first round also takes each one's
    wall clock; when it overrules the events (`fair_timing.Times`), all three are compared by wall clock,
    and the record carries both methods' numbers and the reason."""
    dtype = dtype_from_name(dtype_name)
    ceil = device_ceilings(device)
    sets = input_sets(spec, shape, dtype, device)
    kernel_fn(*sets[0])  # compile / autotune outside the timing
    kernel_ms, kernel_wall = _time_kernel(spec, kernel_fn, sets, device, dtype)
    eager_ms, eager_wall, _, _ = time_ms(spec.eager, sets, device, spec.data_args)
    with_compile = times_compile(device, with_compile)
    compile_ms, compile_wall, why, compiled = None, None, "", None
    if with_compile:
        compiled, why, _ = compiled_baseline(spec, shape, dtype, sets[0])
        if compiled is not None:
            compile_ms, compile_wall, _, _ = time_ms(compiled, sets, device, spec.data_args)
    else:
        why = "torch.compile is not timed on CPU"
    note_unsteady, fair = "", {}
    if device == "cuda":
        first = Times(events={"candidate": kernel_ms, "eager": eager_ms, "torch.compile": compile_ms},
                      wall={"candidate": kernel_wall, "eager": eager_wall, "torch.compile": compile_wall})
        second = _second_look(spec, kernel_fn, compiled, sets, device, dtype, first)
        looked = "wall" if first.method() == WALL else "events"
        _, note_unsteady = lower_look(first.ms(looked), second.ms(looked))
        chosen, method, why = combine(first, second)
        fair = chosen.record_fields(method, why)
        kernel_ms, eager_ms, compile_ms = (chosen.reported(method)[n] for n in NAMES)
    impossible = impossible_time(kernel_ms, spec.bytes_moved(shape, dtype), spec.flops(shape, dtype), dtype, ceil)
    if impossible:  # a cheat or a broken timer, never a speedup
        raise RuntimeError(f"refused: {impossible}")
    ceiling = ceil.tflops(dtype) if spec.metric == "TFLOP/s" else ceil.bandwidth_gbs
    achieved = _achieved(spec, shape, dtype, kernel_ms)
    copy_gbs = copy_gbs_at(spec.bytes_moved(shape, dtype)) if spec.metric == "GB/s" and device == "cuda" else None
    rec = BenchRecord(
        kernel=spec.name, backend=backend, shape=dict(shape), dtype=dtype_name, device_name=ceil.device_name,
        kernel_ms=kernel_ms, eager_ms=eager_ms, compile_ms=compile_ms, metric=spec.metric, achieved=achieved,
        ceiling=ceiling, fraction_of_ceiling=achieved / ceiling if ceiling else 0.0,
        speedup_eager=speedup(eager_ms, kernel_ms) or 0.0, speedup_compile=speedup(compile_ms, kernel_ms),
        meaningful=device == "cuda",
        eager_achieved=_achieved(spec, shape, dtype, eager_ms),
        compile_achieved=_achieved(spec, shape, dtype, compile_ms) if compile_ms else None,
        baseline="idiomatic" if spec.baseline is not None else "reference",
        copy_gbs=copy_gbs, **fair,
    )
    rec.note = "; ".join(n for n in (timing_line(rec), why, note_unsteady) if n)
    return rec

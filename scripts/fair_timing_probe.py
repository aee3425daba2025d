"""Issue 19's fair-timing measurement: launch-bound kernels timed the same way as eager and torch.compile.

Checks, then times through the real worker (five stages, then `Worker.bench`):
- an honest softmax that launches one program per row (the form seen reported 0.56x eager at
  4096x4096 bf16 on an H100 when only the kernel was charged host time);
- the softmax and cross-entropy starters at the same launch-bound sizes, as they are and as they were
  at commit BEFORE_COMMIT (their launchers cut down since: one launch for the cross-entropy, a softmax
  wrapper that computes its launch once per shape), so one run shows what the change bought.
It prints, per kernel, which clock decided (events or wall clock, and why), both clocks' numbers for the
kernel, eager and torch.compile, and the speedups; then, for the starters before and after, each one's
events, wall clock and host time per call (the host loop before the closing synchronize, taken in this
process by the timer's own wall-clock batches, `timing.wall_look`) beside eager's and torch.compile's. `-o FILE` writes the records as
JSON.

    python scripts/fair_timing_probe.py --device cuda -o fair.json
    python scripts/fair_timing_probe.py --device cpu --small       (a dry run under the interpreter)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

# One program per row, the whole row in registers: honest, and launch-bound at small sizes.
ONE_ROW_SOFTMAX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _row_softmax(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    e = tl.where(mask, e, 0.0)
    tl.store(y_ptr + row * stride_y + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty_like(x2)
    block = triton.next_power_of_2(x2.shape[-1])
    if x2.shape[0]:
        _row_softmax[(x2.shape[0],)](x2, y, x2.shape[-1], x2.stride(0), y.stride(0), BLOCK=block,
                                     num_warps=4 if block <= 4096 else 8)
    return y.reshape(x.shape)
'''

# The starters' code at BEFORE_COMMIT, kept here (the GPU machine has no git history) so that the lead's run
# times the old launchers beside the new ones. `scripts/launch_cost_bench.py` checks these against `git show`.
BEFORE_COMMIT = "f73dfd6"
# Cross-entropy: a row-loss kernel, then a one-program mean kernel (two launches).
BEFORE_CROSS_ENTROPY = '''
import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@triton.jit
def _row_loss_kernel(logits_ptr, targets_ptr, losses_ptr, counts_ptr, vocab, stride_row,
                     BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    cols = tl.arange(0, BLOCK_V)
    target = tl.load(targets_ptr + row)
    counts = target != -100
    x_t = tl.load(row_ptr + tl.where(counts, target, 0)).to(tl.float32)  # issued before the stream
    m = tl.full((), float("-inf"), tl.float32)  # running max (natural units)
    s = tl.zeros((), tl.float32)  # running sum of exp(x - m)
    for start in range(0, vocab, BLOCK_V):
        idx = start + cols
        x = tl.load(row_ptr + idx, mask=idx < vocab, other=float("-inf"),
                    eviction_policy="evict_first").to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), axis=0)
        m = m_new
    lse = m + tl.log2(s) * 0.6931471805599453
    tl.store(losses_ptr + row, tl.where(counts, lse - x_t, 0.0))
    tl.store(counts_ptr + row, counts.to(tl.float32))


@triton.jit
def _mean_kernel(losses_ptr, counts_ptr, out_ptr, rows, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    n = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, rows, BLOCK):
        idx = start + offs
        acc += tl.load(losses_ptr + idx, mask=idx < rows, other=0.0)
        n += tl.load(counts_ptr + idx, mask=idx < rows, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / tl.sum(n, axis=0))  # no row counted: 0/0 = nan, as PyTorch


MAX_BLOCK_V = 8192
MAX_MEAN_BLOCK = 8192


def _launch_shape(vocab):
    block = min(triton.next_power_of_2(vocab), MAX_BLOCK_V)
    warps = 8 if block >= 4096 else 4 if block >= 1024 else 2
    return block, warps


def kernel_fn(logits, targets):
    vocab = logits.shape[-1]
    logits2d = logits.reshape(-1, vocab)
    if logits2d.stride(-1) != 1:
        logits2d = logits2d.contiguous()
    targets = targets.reshape(-1)
    if targets.dtype != torch.int64 or not targets.is_contiguous():
        targets = targets.to(torch.int64).contiguous()
    rows = logits2d.shape[0]
    losses = torch.empty(2 * rows, dtype=torch.float32, device=logits.device)  # losses, then counts
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    block, warps = _launch_shape(vocab)
    if rows:
        _row_loss_kernel[(rows,)](logits2d, targets, losses, losses[rows:], vocab, logits2d.stride(0),
                                  BLOCK_V=block, num_warps=warps)
    mean_block = min(max(triton.next_power_of_2(rows), 128), MAX_MEAN_BLOCK)
    _mean_kernel[(1,)](losses, losses[rows:], out, rows, BLOCK=mean_block, num_warps=8 if mean_block >= 4096 else 4)
    return out
'''
# Softmax: the kernels are unchanged, the launcher was this (it recomputed the launch on every call);
# appended to the current starter, it replaces today's `kernel_fn`.
BEFORE_SOFTMAX_LAUNCHER = '''
def kernel_fn(x):
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    n_rows = x2d.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0 or n_cols == 0:
        return y.reshape(x.shape)
    if MAX_FUSED_COLS // 2 < n_cols <= MAX_FUSED_COLS:
        _softmax_row_kernel[(n_rows,)](x2d, y, n_cols, x2d.stride(0), y.stride(0), BLOCK_N=MAX_FUSED_COLS, num_warps=32)
    elif n_cols <= MAX_FUSED_COLS:
        block_n = triton.next_power_of_2(n_cols)
        rows = max(1, min(16, 2048 // block_n))
        _softmax_rows_kernel[(triton.cdiv(n_rows, rows),)](
            x2d, y, n_rows, n_cols, x2d.stride(0), y.stride(0),
            ROWS=rows, BLOCK_N=block_n, num_warps=_warps(rows * block_n))
    else:
        programs = _programs(n_rows, x.device)
        _softmax_wide_kernel[(programs,)](x2d, y, n_rows, n_cols, x2d.stride(0), y.stride(0), programs,
                                          BLOCK_N=16384, num_warps=32)
    return y.reshape(x.shape)
'''


def before_source(kind: str) -> str:
    """The starter of `kind` as it was at BEFORE_COMMIT, as a candidate file's text."""
    from autokernel.kernels import get_spec

    if kind == "cross_entropy":
        return BEFORE_CROSS_ENTROPY
    # today's starter imports the old `_warps` rule from kernels/triton_common.py under its shared name
    return get_spec(kind).starters["triton"].read_text() + "\n\n_warps = warps_for_elements\n" + BEFORE_SOFTMAX_LAUNCHER


CASES = [  # (label, kernel type, candidate source, None for the starter or "before", GPU shape, CPU shape)
    ("softmax, one row per program", "softmax", ONE_ROW_SOFTMAX, {"rows": 4096, "cols": 4096}, {"rows": 4, "cols": 256}),
    ("softmax starter", "softmax", None, {"rows": 4096, "cols": 4096}, {"rows": 4, "cols": 256}),
    (f"softmax starter at {BEFORE_COMMIT}", "softmax", "before", {"rows": 4096, "cols": 4096}, {"rows": 4, "cols": 256}),
    ("cross-entropy starter", "cross_entropy", None, {"rows": 1024, "vocab": 32000}, {"rows": 4, "vocab": 512}),
    (f"cross-entropy starter at {BEFORE_COMMIT}", "cross_entropy", "before", {"rows": 1024, "vocab": 32000},
     {"rows": 4, "vocab": 512}),
]


def _row(label: str, rec) -> str:
    def ms(v):
        return f"{v:.4g}" if v is not None else "-"

    compile_part = f", {rec.speedup_compile:.2f}x torch.compile" if rec.speedup_compile else ""
    return (f"{label} {rec.shape} {rec.dtype}: timed by {rec.timed_by or 'the CPU clock'}"
            f"{' (' + rec.timing_reason + ')' if rec.timing_reason else ''}; kernel {ms(rec.kernel_ms)} ms, "
            f"eager {ms(rec.eager_ms)}, compile {ms(rec.compile_ms)}; {rec.speedup_eager:.2f}x eager{compile_part}; "
            f"events kernel/eager/compile {ms(rec.kernel_event_ms)}/{ms(rec.eager_event_ms)}/{ms(rec.compile_event_ms)}, "
            f"wall {ms(rec.kernel_wall_ms)}/{ms(rec.eager_wall_ms)}/{ms(rec.compile_wall_ms)}")


def host_times(path: str, kind: str, shape: dict, dtype: str, events: dict) -> dict:
    """Per function ('candidate', 'eager', 'torch.compile'): its wall clock and host ms per call, taken in this
    process by the worker's own wall-clock batches (`timing.wall_look`, sized by `events`, the record's events
    ms per function). The host ms is the loop of calls before the closing synchronize: a launcher's Python
    and the launches themselves. GPU only."""
    import importlib.util

    import torch

    from autokernel.engine import timing
    from autokernel.kernels import get_spec
    from autokernel.kernels.spec import dtype_from_name

    spec, dt = get_spec(kind), dtype_from_name(dtype)
    sets = timing.input_sets(spec, shape, dt, "cuda")
    loader = importlib.util.spec_from_file_location(f"_probe_{Path(path).stem}_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    compiled, _, _ = timing.compiled_baseline(spec, shape, dt, sets[0])
    out = {}
    for name, fn in (("candidate", module.kernel_fn), ("eager", spec.eager), ("torch.compile", compiled)):
        if fn is None:
            continue
        fn(*sets[0])  # compiled and warm before the batches
        torch.cuda.synchronize()
        look = timing.wall_look(fn, sets, events.get(name) or 0.01)
        out[name] = {"events_ms": events.get(name), "wall_ms": look.wall_ms, "host_ms": look.host_ms}
    return out


def _host_row(label: str, shape: dict, times: dict) -> str:
    def part(name):
        t = times.get(name)
        if t is None:
            return f"{name} not timed"
        ev = f"{t['events_ms']:.4g}" if t["events_ms"] is not None else "-"
        return f"{name} events {ev} / wall {t['wall_ms']:.4g} / host {t['host_ms']:.4g} ms"
    return f"{label} {shape}: " + "; ".join(part(n) for n in ("candidate", "eager", "torch.compile"))


def main(argv: list[str] | None = None) -> int:
    from autokernel.engine.worker import Worker
    from autokernel.kernels import get_spec

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--small", action="store_true", help="the small CPU shapes (a dry run)")
    p.add_argument("-o", "--out", help="write the records as JSON here")
    args = p.parse_args(argv)
    small = args.small or args.device == "cpu"
    out, failed, starters = [], 0, []
    with tempfile.TemporaryDirectory() as work, Worker(device=args.device) as worker:
        for n, (label, kind, source, gpu_shape, cpu_shape) in enumerate(CASES):
            shape = cpu_shape if small else gpu_shape
            if source is None:
                path = str(get_spec(kind).starters["triton"])
            else:
                path = str(Path(work) / f"{kind}_candidate_{n}.py")
                Path(path).write_text(before_source(kind) if source == "before" else source)
            report = worker.check(path, kernel=kind, dtypes=[args.dtype])
            if not report.passed:
                failed += 1
                print(f"{label}: did not pass its check: {report.error or [s.detail for s in report.stages if not s.passed][:1]}", flush=True)
                continue
            for rec in worker.bench(path, kernel=kind, shapes=[shape], dtype=args.dtype):
                print(_row(label, rec), flush=True)
                out.append({"label": label, **rec.to_json()})
                if "starter" in label:
                    events = {"candidate": rec.kernel_event_ms, "eager": rec.eager_event_ms,
                              "torch.compile": rec.compile_event_ms}
                    starters.append((label, path, kind, shape, events, out[-1]))
        # The starters before and after, each beside eager and torch.compile: host time per call.
        if args.device == "cuda":
            print("\nper call, this process (timing.wall_look): events / wall clock / host ms", flush=True)
            for label, path, kind, shape, events, entry in starters:
                entry["host"] = host_times(path, kind, shape, args.dtype, events)
                print(_host_row(label, shape, entry["host"]), flush=True)
        else:
            print("host time per call: on a GPU only (the interpreter's host time is the interpreter's)")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

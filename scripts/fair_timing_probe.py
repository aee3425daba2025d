"""Issue 19's fair-timing measurement: launch-bound kernels timed the same way as eager and torch.compile.

Checks, then times through the real worker (five stages, then `Worker.bench`):
- an honest softmax that launches one program per row (the form seen reported 0.56x eager at
  4096x4096 bf16 on an H100 when only the kernel was charged host time);
- the softmax and cross-entropy starters at the same launch-bound sizes.
It prints, per kernel, which clock decided (events or wall clock, and why), both clocks' numbers for the
kernel, eager and torch.compile, and the speedups; `-o FILE` writes the records as JSON.

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

CASES = [  # (label, kernel type, candidate source or None for the starter, GPU shape, CPU shape)
    ("softmax, one row per program", "softmax", ONE_ROW_SOFTMAX, {"rows": 4096, "cols": 4096}, {"rows": 4, "cols": 256}),
    ("softmax starter", "softmax", None, {"rows": 4096, "cols": 4096}, {"rows": 4, "cols": 256}),
    ("cross-entropy starter", "cross_entropy", None, {"rows": 1024, "vocab": 32000}, {"rows": 4, "vocab": 512}),
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
    out, failed = [], 0
    with tempfile.TemporaryDirectory() as work, Worker(device=args.device) as worker:
        for label, kind, source, gpu_shape, cpu_shape in CASES:
            shape = cpu_shape if small else gpu_shape
            if source is None:
                path = str(get_spec(kind).starters["triton"])
            else:
                path = str(Path(work) / f"{kind}_candidate.py")
                Path(path).write_text(source)
            report = worker.check(path, kernel=kind, dtypes=[args.dtype])
            if not report.passed:
                failed += 1
                print(f"{label}: did not pass its check: {report.error or [s.detail for s in report.stages if not s.passed][:1]}", flush=True)
                continue
            for rec in worker.bench(path, kernel=kind, shapes=[shape], dtype=args.dtype):
                print(_row(label, rec), flush=True)
                out.append({"label": label, **rec.to_json()})
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Reduce: the sum over the last dim, accumulated in fp32, output in x's dtype.

Memory-bound: the floor is one read of x (the output is rows elements).
"""

from __future__ import annotations

import torch

from ..rowwise_spec import FEW_WIDE_ROWS, row_data, rowwise_spec
from ..spec import element_size


def reference(x: torch.Tensor) -> torch.Tensor:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.to(work).sum(-1).to(x.dtype)


def baseline(x: torch.Tensor) -> torch.Tensor:
    """Eager PyTorch as users write it: x.sum(-1) (fp32 accumulation inside)."""
    return x.sum(-1)


FP16_SUM_LIMIT = 3.0e4  # comfortably below fp16's largest finite value, 65504


def make_inputs(shape, dtype, device, gen, mode="normal"):
    x = row_data(shape, dtype, device, gen, mode)
    if dtype == torch.float16:
        # A row whose sum cannot be an fp16 number has no right answer in fp16: scale such rows
        # down (large and constant regimes at wide rows) so every sum is finite.
        bound = x.float().abs().sum(-1, keepdim=True)
        x = (x.float() * (FP16_SUM_LIMIT / bound).clamp(max=1.0)).to(dtype)
    return (x,)


def bytes_moved(shape, dtype) -> int:
    rows, cols = int(shape["rows"]), int(shape["cols"])
    return (rows * cols + rows) * element_size(dtype)


def flops(shape, dtype) -> int:
    return int(shape["rows"]) * int(shape["cols"])


def shape_from_args(x, *rest, **kwargs):
    """{rows, cols} of a call; a 0-dim x (its sum is itself) is one row of one."""
    cols = int(x.shape[-1]) if x.dim() else 1
    return {"rows": int(x.numel() // max(cols, 1)), "cols": cols}


SPEC = rowwise_spec(
    __file__,
    name="reduce",
    order=90,
    signature="kernel_fn(x)",
    summary="x.sum(-1) for x [rows, cols]: fp32 accumulation, output [rows] in x's dtype",
    reference=reference,
    baseline=baseline,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    sweep_shapes=(
        {"rows": 4, "cols": 64},
        {"rows": 37, "cols": 1000},
        {"rows": 128, "cols": 4096},
        {"rows": 3, "cols": 50000},
        {"rows": 4096, "cols": 4096},
        {"rows": 8192, "cols": 8192},
        {"rows": 65536, "cols": 768},
        {"rows": 1000, "cols": 50257},
    ),
    edge_shapes=(
        {"rows": 1, "cols": 1},
        {"rows": 1, "cols": 4099},
        {"rows": 3, "cols": 5},
        {"rows": 1023, "cols": 3},
        {"rows": 2, "cols": 65537},
    ),
    bench_shapes=(
        {"rows": 8192, "cols": 4096},
        {"rows": 8192, "cols": 8192},
        {"rows": 65536, "cols": 1024},
        {"rows": 1024, "cols": 65536},
        *FEW_WIDE_ROWS,
    ),
    # Sums of N(0, 1) rows are O(sqrt(cols)); errors come from the fp32 summation order and, for
    # the halves, the output's own rounding (2**-11 and 2**-8 relative). A sum that cancels to near
    # zero is judged by atol, so it is set for the accumulation error, not the output's size.
    tolerances={
        torch.float32: (1e-4, 1e-5),
        torch.float16: (1e-3, 2e-3),
        torch.bfloat16: (1e-2, 1e-2),
    },
    shape_from_args=shape_from_args,
    forbidden_ops=frozenset({
        "aten::sum", "aten::mean", "aten::nansum", "aten::cumsum", "aten::mm", "aten::mv", "aten::matmul",
        "aten::dot", "aten::einsum", "aten::bmm", "aten::linalg_vector_norm", "aten::norm", "aten::trace",
    }),
    notes=(
        "Output shape is x.shape[:-1] in x's dtype; accumulate in fp32 (a half-precision accumulator "
        "fails the tolerance at wide rows). The floor is one read of x, so the game is bandwidth: "
        "16-byte loads, enough bytes in flight per SM, several rows per program when rows are narrow, "
        "one program per row (or a split row with a fixed-order second pass, never float atomics: "
        "results must be bitwise repeatable) when they are wide and few."
    ),
)

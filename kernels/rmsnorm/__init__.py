"""RMSNorm over the last dim, Llama style: x * rsqrt(mean(x^2) + eps) * weight, fp32 math.

Memory-bound: the floor is one read of x, one write of the output and one read of the weight.
"""

from __future__ import annotations

import torch

from ..rowwise_spec import FEW_WIDE_ROWS, NORM_EDGE_SHAPES, NORM_SWEEP_SHAPES, row_data, rowwise_spec, trained_gain
from ..spec import element_size


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(work)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.to(work)).to(x.dtype)


def make_inputs(shape, dtype, device, gen, mode="normal"):
    x = row_data(shape, dtype, device, gen, mode)
    return x, trained_gain(int(shape["cols"]), dtype, device, gen, centre=1.0), 1e-6


def bytes_moved(shape, dtype) -> int:
    rows, cols = int(shape["rows"]), int(shape["cols"])
    return (2 * rows * cols + cols) * element_size(dtype)


def flops(shape, dtype) -> int:
    # square-and-add, scale, weight: about 4 per element.
    return 4 * int(shape["rows"]) * int(shape["cols"])


SPEC = rowwise_spec(
    __file__,
    name="rmsnorm",
    order=40,
    signature="kernel_fn(x, weight, eps=1e-6)",
    summary="RMSNorm over the last dim of x [rows, cols] with weight [cols], fp32 math, output in x's dtype",
    reference=reference,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    sweep_shapes=NORM_SWEEP_SHAPES,
    edge_shapes=NORM_EDGE_SHAPES,
    bench_shapes=(
        {"rows": 4096, "cols": 4096},
        {"rows": 8192, "cols": 4096},
        {"rows": 16384, "cols": 4096},
        {"rows": 8192, "cols": 8192},
        {"rows": 32768, "cols": 1024},
        *FEW_WIDE_ROWS,
    ),
    tolerances={
        torch.float32: (1e-5, 1e-5),
        torch.float16: (2e-3, 2e-3),
        torch.bfloat16: (1e-2, 1e-2),
    },
    forbidden_ops=frozenset({"aten::rms_norm", "aten::_fused_rms_norm", "aten::rsqrt", "aten::mean",
                             "aten::pow", "aten::norm", "aten::linalg_vector_norm"}),
    notes=(
        "Rows are independent: one row (or several narrow rows) per program, the row kept in "
        "registers when it fits so x is read once. Sum of squares in fp32, rsqrt, multiply by the "
        "weight, cast to x's dtype. The weight is read once per program. For rows too wide for "
        "registers, loop twice over the row (sum of squares, then scale)."
    ),
)

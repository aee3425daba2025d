"""Softmax over the last dim, computed in fp32 and returned in x's dtype.

Memory-bound: the floor is one read of x and one write of the output.
"""

from __future__ import annotations

import torch

from ..rowwise_spec import row_data, rowwise_spec
from ..spec import element_size


def reference(x: torch.Tensor) -> torch.Tensor:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    return torch.softmax(x.to(work), dim=-1).to(x.dtype)


def baseline(x: torch.Tensor) -> torch.Tensor:
    """Eager PyTorch as users write it: torch.softmax in x's dtype (fp32 math inside)."""
    return torch.softmax(x, dim=-1)


def make_inputs(shape, dtype, device, gen, mode="normal"):
    return (row_data(shape, dtype, device, gen, mode),)


def bytes_moved(shape, dtype) -> int:
    return 2 * int(shape["rows"]) * int(shape["cols"]) * element_size(dtype)


def flops(shape, dtype) -> int:
    # max, subtract, exp, sum, divide: about 5 per element.
    return 5 * int(shape["rows"]) * int(shape["cols"])


SPEC = rowwise_spec(
    __file__,
    name="softmax",
    order=20,
    signature="kernel_fn(x)",
    summary="softmax over the last dim of x [rows, cols], fp32 math, output in x's dtype",
    reference=reference,
    baseline=baseline,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    sweep_shapes=(
        {"rows": 4, "cols": 64},
        {"rows": 37, "cols": 1000},
        {"rows": 64, "cols": 100},
        {"rows": 16, "cols": 5000},
        {"rows": 4, "cols": 32000},
        {"rows": 4096, "cols": 4096},
        {"rows": 8192, "cols": 8192},
        {"rows": 1024, "cols": 32000},
        {"rows": 4096, "cols": 50257},
    ),
    edge_shapes=(
        {"rows": 1, "cols": 1},
        {"rows": 1, "cols": 7},
        {"rows": 3, "cols": 5},
        {"rows": 129, "cols": 3},
        {"rows": 2, "cols": 16385},
    ),
    bench_shapes=(
        {"rows": 4096, "cols": 4096},
        {"rows": 8192, "cols": 8192},
        {"rows": 16384, "cols": 4096},
        {"rows": 4096, "cols": 32000},
        {"rows": 1024, "cols": 131072},
    ),
    # Outputs lie in [0, 1]; the halves are bound by the output's own rounding.
    tolerances={
        torch.float32: (1e-6, 1e-5),
        torch.float16: (1e-4, 2e-3),
        torch.bfloat16: (1e-3, 1.6e-2),
    },
    forbidden_ops=frozenset({"aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax",
                             "aten::exp", "aten::special_softmax"}),
    notes=(
        "Rows are independent: one row per program when it fits in registers (one read, one write), "
        "else an online (single-pass max and rescaled sum) loop then a normalising pass; for those wide rows "
        "keep few rows between their two passes (one program per SM looping over rows, first pass "
        "evict_last, second pass backwards) so the re-read hits L2 (H100, 1024x131072: 62% -> 77% of copy "
        "bandwidth). A whole row of 32K elements in one 1-D tile wants 32 warps. Subtract the "
        "row max before exp (large inputs overflow otherwise); exp2 with log2(e) folded into the "
        "scale is cheaper than exp. All math in fp32, output in x's dtype."
    ),
)

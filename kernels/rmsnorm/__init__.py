"""RMSNorm over the last dim, Llama style: x * rsqrt(mean(x^2) + eps) * weight, fp32 math.

Memory-bound: the floor is one read of x, one write of the output and one read of the weight.
"""

from __future__ import annotations

import torch

from ..spec import KernelSpec, random_tensor, starters_beside


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(work)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.to(work)).to(x.dtype)


def make_inputs(shape, dtype, device, gen, mode="normal"):
    rows, cols = int(shape["rows"]), int(shape["cols"])
    x = random_tensor((rows, cols), dtype, device, gen, mode)
    # A trained model's gains: near 1, not the identity, so a kernel that ignores them fails.
    weight = (1.0 + 0.1 * torch.randn(cols, generator=gen)).to(dtype=dtype, device=device)
    return x, weight, 1e-6


def bytes_moved(shape, dtype) -> int:
    rows, cols = int(shape["rows"]), int(shape["cols"])
    return (2 * rows * cols + cols) * torch.empty((), dtype=dtype).element_size()


def flops(shape, dtype) -> int:
    # square-and-add, scale, weight: about 4 per element.
    return 4 * int(shape["rows"]) * int(shape["cols"])


def shape_from_args(x, *rest, **kwargs):
    cols = int(x.shape[-1])
    return {"rows": int(x.numel() // max(cols, 1)), "cols": cols}


SPEC = KernelSpec(
    name="rmsnorm",
    order=40,
    signature="kernel_fn(x, weight, eps=1e-6)",
    summary="RMSNorm over the last dim of x [rows, cols] with weight [cols], fp32 math, output in x's dtype",
    reference=reference,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    metric="GB/s",
    smoke_shape={"rows": 8, "cols": 1024},
    batch_dims=("rows",),
    sweep_shapes=(
        {"rows": 4, "cols": 64},
        {"rows": 37, "cols": 1000},
        {"rows": 128, "cols": 768},
        {"rows": 16, "cols": 5120},
        {"rows": 4, "cols": 20000},
        {"rows": 4096, "cols": 4096},
        {"rows": 8192, "cols": 8192},
        {"rows": 2048, "cols": 12288},
    ),
    edge_shapes=(
        {"rows": 1, "cols": 1},
        {"rows": 1, "cols": 17},
        {"rows": 3, "cols": 5},
        {"rows": 257, "cols": 3},
        {"rows": 2, "cols": 16385},
    ),
    bench_shapes=(
        {"rows": 4096, "cols": 4096},
        {"rows": 8192, "cols": 4096},
        {"rows": 16384, "cols": 4096},
        {"rows": 8192, "cols": 8192},
        {"rows": 32768, "cols": 1024},
        # Few, wide rows (a norm over several trailing dims): the split-row path (tests/test_split_rows.py).
        {"rows": 16, "cols": 4194304},
        {"rows": 64, "cols": 1048576},
    ),
    tolerances={
        torch.float32: (1e-5, 1e-5),
        torch.float16: (2e-3, 2e-3),
        torch.bfloat16: (1e-2, 1e-2),
    },
    shape_from_args=shape_from_args,
    data_args=(0,),
    forbidden_ops=frozenset({"aten::rms_norm", "aten::_fused_rms_norm", "aten::rsqrt", "aten::mean",
                             "aten::pow", "aten::norm", "aten::linalg_vector_norm"}),
    starters=starters_beside(__file__),
    notes=(
        "Rows are independent: one row (or several narrow rows) per program, the row kept in "
        "registers when it fits so x is read once. Sum of squares in fp32, rsqrt, multiply by the "
        "weight, cast to x's dtype. The weight is read once per program. For rows too wide for "
        "registers, loop twice over the row (sum of squares, then scale)."
    ),
)

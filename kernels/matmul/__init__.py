"""Matmul: a [M, K] @ b [K, N] -> [M, N] in a's dtype, fp32 accumulation.

Compute-bound at LLM sizes (2*M*N*K FLOPs over (M*K + K*N + M*N) elements), so the metric is TFLOP/s.
b is drawn with a 1/sqrt(K) scale, as a trained weight is, so outputs stay O(1) at any K.
"""

from __future__ import annotations

import math

import torch

from ..spec import KernelSpec, random_tensor, starters_beside


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    work = torch.float64 if a.dtype == torch.float64 else torch.float32
    return (a.to(work) @ b.to(work)).to(a.dtype)


def baseline(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eager PyTorch as users write it: one cuBLAS matmul in the inputs' dtype."""
    return a @ b


def make_inputs(shape, dtype, device, gen, mode="normal"):
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    # The regime applies to the activations only: a weight in a "large" regime would overflow fp16
    # outputs for every implementation, which tests nothing.
    a = random_tensor((m, k), dtype, device, gen, mode)
    b = (random_tensor((k, n), torch.float32, device, gen, "normal") / math.sqrt(max(k, 1))).to(dtype)
    return a, b


def bytes_moved(shape, dtype) -> int:
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    return (m * k + k * n + m * n) * torch.empty((), dtype=dtype).element_size()


def flops(shape, dtype) -> int:
    return 2 * int(shape["M"]) * int(shape["N"]) * int(shape["K"])


def shape_from_args(a, b, *rest, **kwargs):
    k = int(a.shape[-1])
    return {"M": int(a.numel() // max(k, 1)), "N": int(b.shape[-1]), "K": k}


SPEC = KernelSpec(
    name="matmul",
    order=10,
    signature="kernel_fn(a, b)",
    summary="a @ b for a [M, K], b [K, N]: fp32 accumulation, output [M, N] in a's dtype",
    reference=reference,
    baseline=baseline,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    metric="TFLOP/s",
    smoke_shape={"M": 64, "N": 64, "K": 64},
    sweep_shapes=(
        {"M": 16, "N": 16, "K": 16},
        {"M": 37, "N": 53, "K": 71},
        {"M": 128, "N": 96, "K": 200},
        {"M": 64, "N": 256, "K": 512},
        {"M": 1000, "N": 1000, "K": 1000},
        {"M": 4096, "N": 4096, "K": 4096},
        {"M": 2048, "N": 11008, "K": 4096},
        {"M": 8192, "N": 8192, "K": 8192},
    ),
    edge_shapes=(
        {"M": 1, "N": 1, "K": 1},
        {"M": 1, "N": 128, "K": 64},
        {"M": 3, "N": 5, "K": 7},
        {"M": 129, "N": 1, "K": 33},
        {"M": 17, "N": 257, "K": 31},
    ),
    bench_shapes=(
        {"M": 4096, "N": 4096, "K": 4096},
        {"M": 8192, "N": 8192, "K": 8192},
        {"M": 4096, "N": 11008, "K": 4096},
        {"M": 16384, "N": 4096, "K": 4096},
    ),
    # Both sides multiply the same rounded inputs; the halves differ from float64 by the output's
    # rounding (2**-11, 2**-8 relative) plus fp32 accumulation (~sqrt(K) * 2**-24, negligible).
    # fp32 is held to IEEE fp32: a TF32 dot (10-bit mantissa) misses (1e-4, 1e-4) at K in the
    # thousands, so fp32 candidates must use input_precision="ieee".
    tolerances={
        torch.float32: (1e-4, 1e-4),
        torch.float16: (2e-3, 2e-3),
        torch.bfloat16: (1e-2, 1e-2),
    },
    shape_from_args=shape_from_args,
    data_args=(0, 1),
    forbidden_ops=frozenset({
        "aten::mm", "aten::addmm", "aten::matmul", "aten::bmm", "aten::baddbmm", "aten::addbmm",
        "aten::linear", "aten::mv", "aten::addmv", "aten::dot", "aten::vdot", "aten::einsum",
        "aten::tensordot", "aten::_scaled_mm", "aten::_int_mm", "aten::chain_matmul", "aten::linalg_multi_dot",
    }),
    starters=starters_beside(__file__),
    notes=(
        "Row-major a [M, K] and b [K, N] (b may be a transposed view, e.g. a Linear weight .T: use its "
        "strides). Tiles of BLOCK_M x BLOCK_N with a BLOCK_K loop and grouped (GROUP_M) program "
        "order for L2 reuse; fp32 accumulator, cast once at the store. On H100 bf16/fp16 the good "
        "tiles are 128x256x64 and 128x128x64 with 3-4 stages and 8 warps; persistent kernels and "
        "TMA descriptors are the next steps. fp32 inputs must be multiplied in IEEE fp32 "
        "(tl.dot(..., input_precision='ieee')): TF32 fails the fp32 tolerance. Element offsets are "
        "int32 in the starter unless a tensor spans 2**31 elements (a 16k x 128k logits matrix does): "
        "then the INT64 variant is compiled."
    ),
)

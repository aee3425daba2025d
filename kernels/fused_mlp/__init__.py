"""Fused SwiGLU MLP: (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T, weights in nn.Linear layout.

x [tokens, hidden]; w_gate, w_up [intermediate, hidden]; w_down [hidden, intermediate]. Three
matmuls (compute-bound at LLM sizes, metric TFLOP/s); the gain over eager is computing gate and up
in one pass over x and applying silu(g) * u in that kernel's epilogue, so the [tokens, intermediate]
activations are written once instead of four times.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..spec import KernelSpec, random_tensor, starters_beside

FP16_LARGE_LIMIT = 32.0  # |x| above this overflows silu(g) * u (~x**2) in fp16 for every implementation


def reference(x, w_gate, w_up, w_down) -> torch.Tensor:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    xw = x.to(work)
    h = F.silu(xw @ w_gate.to(work).T) * (xw @ w_up.to(work).T)
    return (h @ w_down.to(work).T).to(x.dtype)


def baseline(x, w_gate, w_up, w_down) -> torch.Tensor:
    """Eager PyTorch as users write it: three nn.Linear-style matmuls and silu, in x's dtype."""
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def _weight(rows, cols, dtype, device, gen):
    return (random_tensor((rows, cols), torch.float32, device, gen, "normal") / math.sqrt(max(cols, 1))).to(dtype)


def make_inputs(shape, dtype, device, gen, mode="normal"):
    t, h, i = int(shape["tokens"]), int(shape["hidden"]), int(shape["intermediate"])
    x = random_tensor((t, h), dtype, device, gen, mode)
    if dtype == torch.float16:
        # silu(g) * u grows like x**2: rows beyond FP16_LARGE_LIMIT ("large", "mixed") would
        # overflow the activations of every implementation, so they are scaled down to it.
        peak = x.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-30)
        x = (x.float() * (FP16_LARGE_LIMIT / peak).clamp(max=1.0)).to(dtype)
    # Weights as a trained layer has them (1/sqrt(fan_in)), so activations stay O(|x|).
    return x, _weight(i, h, dtype, device, gen), _weight(i, h, dtype, device, gen), _weight(h, i, dtype, device, gen)


def bytes_moved(shape, dtype) -> int:
    t, h, i = int(shape["tokens"]), int(shape["hidden"]), int(shape["intermediate"])
    # x and the output once, three weights once; the fused activations never leave the chip in the
    # ideal kernel, so they are not counted.
    return (2 * t * h + 3 * h * i) * torch.empty((), dtype=dtype).element_size()


def flops(shape, dtype) -> int:
    t, h, i = int(shape["tokens"]), int(shape["hidden"]), int(shape["intermediate"])
    return 3 * 2 * t * h * i


def shape_from_args(x, w_gate, *rest, **kwargs):
    h = int(x.shape[-1])
    return {"tokens": int(x.numel() // max(h, 1)), "hidden": h, "intermediate": int(w_gate.shape[0])}


SPEC = KernelSpec(
    name="fused_mlp",
    order=60,
    signature="kernel_fn(x, w_gate, w_up, w_down)",
    summary="SwiGLU MLP (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T, x [tokens, hidden], nn.Linear weights",
    reference=reference,
    baseline=baseline,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    metric="TFLOP/s",
    smoke_shape={"tokens": 32, "hidden": 64, "intermediate": 128},
    sweep_shapes=(
        {"tokens": 8, "hidden": 32, "intermediate": 64},
        {"tokens": 37, "hidden": 96, "intermediate": 200},
        {"tokens": 64, "hidden": 128, "intermediate": 344},
        {"tokens": 512, "hidden": 1024, "intermediate": 2816},
        {"tokens": 2048, "hidden": 4096, "intermediate": 11008},
        {"tokens": 4096, "hidden": 4096, "intermediate": 14336},
        {"tokens": 8192, "hidden": 2048, "intermediate": 5632},
    ),
    edge_shapes=(
        {"tokens": 1, "hidden": 1, "intermediate": 1},
        {"tokens": 1, "hidden": 64, "intermediate": 128},
        {"tokens": 3, "hidden": 5, "intermediate": 7},
        {"tokens": 17, "hidden": 33, "intermediate": 65},
    ),
    bench_shapes=(
        {"tokens": 4096, "hidden": 4096, "intermediate": 11008},
        {"tokens": 8192, "hidden": 4096, "intermediate": 14336},
        {"tokens": 16384, "hidden": 2048, "intermediate": 8192},
        {"tokens": 2048, "hidden": 8192, "intermediate": 28672},
    ),
    # The activations are rounded to the input dtype between the two matmuls (as eager does), so
    # the halves carry that rounding (2**-11, 2**-8 relative) through the down projection on top of
    # the output's own; fp32 is held to IEEE fp32 products (no TF32).
    tolerances={
        torch.float32: (2e-4, 2e-4),
        torch.float16: (5e-3, 5e-3),
        torch.bfloat16: (3e-2, 2e-2),
    },
    shape_from_args=shape_from_args,
    data_args=(0, 1, 2, 3),
    forbidden_ops=frozenset({
        "aten::mm", "aten::addmm", "aten::matmul", "aten::bmm", "aten::baddbmm", "aten::linear",
        "aten::mv", "aten::addmv", "aten::dot", "aten::einsum", "aten::tensordot", "aten::_scaled_mm",
        "aten::silu", "aten::sigmoid", "aten::glu", "aten::swiglu",
    }),
    starters=starters_beside(__file__),
    notes=(
        "Weights are in nn.Linear layout [out, in]: x @ w.T reads w with K contiguous (pass strides "
        "(1, in) for the transposed view, no copy). Fuse gate and up: one kernel with two fp32 "
        "accumulators over the same x tile, epilogue silu(g) * u (silu(g) = g * sigmoid(g), fp32) "
        "stored once in x's dtype; then the down projection as a plain tiled matmul. On Hopper with "
        "16-bit aligned inputs, read all tiles through tensor descriptors ([BLOCK_N, BLOCK_K] weight "
        "tiles, `.T` in the dot) and keep the body in a `tl.range` tile loop even with one program per "
        "tile (both measured: the starter does this and matches the eager cuBLAS SwiGLU); fall back to "
        "pointer loads elsewhere. Further steps: fuse the down projection with a split over the "
        "intermediate dim (needs a deterministic reduction), epilogue subtiling. fp32 inputs "
        "must use input_precision='ieee'. The CPU interpreter's bf16 tl.dot is wrong: widen bf16 tiles "
        "to fp32 there (only when TRITON_INTERPRET=1)."
    ),
)

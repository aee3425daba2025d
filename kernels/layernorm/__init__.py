"""LayerNorm over the last dim: (x - mean) * rsqrt(var + eps) * weight + bias, fp32 math.

Memory-bound: the floor is one read of x, one write of the output and one read of weight and bias.
weight and bias may be None (nn.LayerNorm(elementwise_affine=False) has neither, bias=False no bias): the
stability stage feeds those cases as the regimes NO_AFFINE_MODES, so a kept kernel serves such a norm too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..rowwise_spec import FEW_WIDE_ROWS, NORM_EDGE_SHAPES, NORM_SWEEP_SHAPES, row_data, rowwise_spec, trained_gain
from ..spec import INPUT_MODES, element_size

# Input regimes beyond the numerical ones: normal x with no weight and bias, or a weight and no bias.
NO_AFFINE_MODES = ("no_affine", "no_bias")


def reference(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
              eps: float = 1e-5) -> torch.Tensor:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    w = weight.to(work) if weight is not None else None
    b = bias.to(work) if bias is not None else None
    return F.layer_norm(x.to(work), (x.shape[-1],), w, b, eps).to(x.dtype)


def baseline(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
             eps: float = 1e-5) -> torch.Tensor:
    """Eager PyTorch as users write it: F.layer_norm in x's dtype (fp32 math inside)."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def make_inputs(shape, dtype, device, gen, mode="normal"):
    x = row_data(shape, dtype, device, gen, "normal" if mode in NO_AFFINE_MODES else mode)
    weight = trained_gain(int(shape["cols"]), dtype, device, gen, centre=1.0)
    bias = trained_gain(int(shape["cols"]), dtype, device, gen, centre=0.0)
    if mode == "no_affine":
        return x, None, None, 1e-5
    if mode == "no_bias":
        return x, weight, None, 1e-5
    return x, weight, bias, 1e-5


def bytes_moved(shape, dtype) -> int:
    rows, cols = int(shape["rows"]), int(shape["cols"])
    return (2 * rows * cols + 2 * cols) * element_size(dtype)


def flops(shape, dtype) -> int:
    # mean, centre, square-and-add, scale, weight and bias: about 7 per element.
    return 7 * int(shape["rows"]) * int(shape["cols"])


SPEC = rowwise_spec(
    __file__,
    name="layernorm",
    order=30,
    signature="kernel_fn(x, weight, bias, eps=1e-5)",
    summary="LayerNorm over the last dim of x [rows, cols] with weight and bias [cols] (either may be None), "
            "fp32 math, output in x's dtype",
    reference=reference,
    baseline=baseline,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    sweep_shapes=NORM_SWEEP_SHAPES,
    edge_shapes=NORM_EDGE_SHAPES,
    bench_shapes=(
        {"rows": 4096, "cols": 4096},
        {"rows": 8192, "cols": 4096},
        {"rows": 8192, "cols": 8192},
        {"rows": 32768, "cols": 1024},
        *FEW_WIDE_ROWS,
    ),
    # Outputs are O(1); the halves are dominated by the output's own rounding (2**-11 and 2**-8
    # relative), fp32 by the order of the two row reductions.
    tolerances={
        torch.float32: (1e-4, 1e-4),
        torch.float16: (2e-3, 2e-3),
        torch.bfloat16: (1e-2, 1e-2),
    },
    forbidden_ops=frozenset({
        "aten::layer_norm", "aten::native_layer_norm", "aten::group_norm", "aten::native_group_norm",
        "aten::batch_norm", "aten::instance_norm", "aten::var_mean", "aten::var", "aten::std",
        "aten::mean", "aten::rsqrt",
    }),
    stability_modes=tuple(m for m in INPUT_MODES if m != "normal") + NO_AFFINE_MODES,
    notes=(
        "Rows are independent: one row (or a few narrow rows) per program. Keep the row in registers "
        "when it fits and use the centred variance mean((x - mean)**2) (E[x**2] - mean**2 loses all "
        "precision on large-magnitude inputs). All math in fp32, output in x's dtype. weight and bias "
        "are read once per program, not per element. weight and bias may each be None (nn.LayerNorm with "
        "elementwise_affine=False has neither, bias=False no bias): then the scale is 1 and the shift 0; "
        "tell the kernel with a compile-time flag per argument (a tl.constexpr, a template parameter) rather "
        "than allocating ones and zeros. "
        "For rows too wide for registers, loop over "
        "the row (three reads) or keep a Welford running mean/M2."
    ),
)


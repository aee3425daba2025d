"""Attention forward, softmax(q @ k.T / sqrt(D) [+ causal mask]) @ v, for q, k, v [B, H, S, D].

Compute-bound at long sequences (4*B*H*S*S*D FLOPs, half of that when causal), so the metric is
TFLOP/s; the floor in bytes is one read of q, k, v and one write of the output.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..spec import KernelSpec, random_tensor, starters_beside

LARGE_Q = 100.0  # the scale of q in the "large" regime (see make_inputs)


def reference(q, k, v, causal=False) -> torch.Tensor:
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    qw, kw, vw = q.to(work), k.to(work), v.to(work)
    scores = (qw @ kw.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s_q, s_k = scores.shape[-2], scores.shape[-1]
        hidden = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(hidden, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vw).to(q.dtype)


def baseline(q, k, v, causal=False) -> torch.Tensor:
    """Eager PyTorch as users write it: F.scaled_dot_product_attention (flash/cuDNN kernels on a GPU)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))


def make_inputs(shape, dtype, device, gen, mode="normal"):
    b, h, s, d = (int(shape[k]) for k in ("batch", "heads", "seq", "head_dim"))
    # The regime goes to q (sharp or flat attention) and v (output scale); k stays normal. A "large"
    # q is ~100, not ~1e4: scores of a few hundred already overflow exp() without the running max,
    # while ~1e4 would make fp32 rounding of q.k decide between near-tied keys for any kernel.
    if mode == "large":
        q = (random_tensor((b, h, s, d), torch.float32, device, gen, "normal") * LARGE_Q).to(dtype)
    else:
        q = random_tensor((b, h, s, d), dtype, device, gen, mode)
        if mode == "mixed":  # rows scaled 10^U(-3, 3): cap the sharpest, for the same reason
            peak = q.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-30)
            q = (q.float() * (3 * LARGE_Q / peak).clamp(max=1.0)).to(dtype)
    k = random_tensor((b, h, s, d), dtype, device, gen, "normal")
    v = random_tensor((b, h, s, d), dtype, device, gen, mode)
    return q, k, v, bool(shape.get("causal", False))


def bytes_moved(shape, dtype) -> int:
    b, h, s, d = (int(shape[k]) for k in ("batch", "heads", "seq", "head_dim"))
    return 4 * b * h * s * d * torch.empty((), dtype=dtype).element_size()


def flops(shape, dtype) -> int:
    b, h, s, d = (int(shape[k]) for k in ("batch", "heads", "seq", "head_dim"))
    total = 4 * b * h * s * s * d
    return total // 2 if shape.get("causal") else total


def shape_from_args(q, k=None, v=None, causal=False, *rest, **kwargs):
    causal = bool(kwargs.get("is_causal", kwargs.get("causal", causal)))
    d, s = int(q.shape[-1]), int(q.shape[-2])
    h = int(q.shape[-3]) if q.dim() >= 3 else 1
    return {"batch": int(q.numel() // max(h * s * d, 1)), "heads": h, "seq": s, "head_dim": d, "causal": causal}


def _shape(b, h, s, d, causal):
    return {"batch": b, "heads": h, "seq": s, "head_dim": d, "causal": causal}


SPEC = KernelSpec(
    name="flash_attention",
    order=50,
    signature="kernel_fn(q, k, v, causal=False)",
    summary="softmax(q @ k.T / sqrt(D), causal or not) @ v for q, k, v [batch, heads, seq, head_dim]",
    reference=reference,
    baseline=baseline,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    metric="TFLOP/s",
    smoke_shape=_shape(1, 2, 64, 64, False),
    sweep_shapes=(
        _shape(1, 1, 16, 64, False),
        _shape(1, 2, 37, 64, True),
        _shape(2, 2, 100, 128, False),
        _shape(1, 2, 128, 128, True),
        _shape(8, 12, 1024, 64, False),
        _shape(4, 32, 2048, 128, True),
        _shape(2, 16, 4096, 128, False),
        _shape(1, 32, 4096, 64, True),
    ),
    edge_shapes=(
        _shape(1, 1, 1, 64, True),
        _shape(1, 1, 1, 128, False),
        _shape(1, 1, 3, 16, True),
        _shape(2, 3, 17, 128, False),
        _shape(1, 1, 33, 80, True),
    ),
    bench_shapes=(
        _shape(4, 32, 4096, 128, False),
        _shape(4, 32, 4096, 128, True),
        _shape(8, 32, 2048, 64, False),
        _shape(8, 32, 2048, 64, True),
    ),
    # The output is a convex combination of rows of v (O(|v|)). The halves round the softmax
    # weights to the input dtype before the P @ V product, as FlashAttention does, and round the
    # output; fp32 is held to IEEE fp32 products (no TF32).
    tolerances={
        torch.float32: (1e-4, 1e-4),
        torch.float16: (5e-3, 5e-3),
        torch.bfloat16: (2e-2, 2e-2),
    },
    shape_from_args=shape_from_args,
    data_args=(0, 1, 2),
    forbidden_ops=frozenset({
        "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math",
        "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_flash_attention_forward", "aten::_efficient_attention_forward",
        "aten::softmax", "aten::_softmax", "aten::bmm", "aten::matmul", "aten::mm", "aten::baddbmm",
        "aten::einsum",
    }),
    starters=starters_beside(__file__),
    notes=(
        "q, k, v have the same [B, H, S, D] shape (no GQA, no padding mask); scale 1/sqrt(D); causal means "
        "query i sees keys 0..i. FlashAttention-2 forward: a BLOCK_M tile of queries per program, loop "
        "over BLOCK_N key/value tiles with an online softmax (running max m, running sum l, rescale the "
        "fp32 accumulator by exp2(m_old - m_new)), fold log2(e) into the scale and use exp2. Causal: "
        "skip key tiles above the diagonal and mask only the diagonal tiles; keys past S are masked "
        "in the last tile only. The output is acc / l, in the input dtype. fp32 inputs must use "
        "input_precision='ieee'; the CPU interpreter's bf16 tl.dot is wrong (widen to fp32 there "
        "only). Next steps on H100: BLOCK_M 128 with 8 warps, 2-3 stages, TMA descriptors, "
        "warp specialisation."
    ),
)

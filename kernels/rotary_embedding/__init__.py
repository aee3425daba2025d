"""Rotary position embedding, rotate-half convention: x * cos + rotate_half(x) * sin.

x is [batch, heads, seq, head_dim]; cos and sin are [seq, head_dim] (each half repeats the same
frequencies, as Llama-style models build them), in x's dtype. Memory-bound: the floor is one read
and one write of x plus one read of cos and sin.
"""

from __future__ import annotations

import torch

from ..spec import KernelSpec, random_tensor, starters_beside

ROPE_BASE = 10000.0


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    xw = x.to(work)
    return (xw * cos.to(work) + rotate_half(xw) * sin.to(work)).to(x.dtype)


def baseline(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Eager PyTorch as users write it (HF's apply_rotary_pos_emb): in x's dtype."""
    return x * cos + rotate_half(x) * sin


def rope_tables(seq: int, head_dim: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [seq, head_dim] for positions 0..seq-1, frequencies base**(-2i/head_dim)."""
    inv_freq = ROPE_BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().to(dtype=dtype, device=device), emb.sin().to(dtype=dtype, device=device)


def make_inputs(shape, dtype, device, gen, mode="normal"):
    b, h, s, d = (int(shape[k]) for k in ("batch", "heads", "seq", "head_dim"))
    x = random_tensor((b, h, s, d), dtype, device, gen, mode)
    cos, sin = rope_tables(s, d, dtype, device)
    return x, cos, sin


def bytes_moved(shape, dtype) -> int:
    b, h, s, d = (int(shape[k]) for k in ("batch", "heads", "seq", "head_dim"))
    return (2 * b * h * s * d + 2 * s * d) * torch.empty((), dtype=dtype).element_size()


def flops(shape, dtype) -> int:
    return 3 * int(shape["batch"]) * int(shape["heads"]) * int(shape["seq"]) * int(shape["head_dim"])


def shape_from_args(x, *rest, **kwargs):
    d = int(x.shape[-1])
    s = int(x.shape[-2]) if x.dim() >= 2 else 1
    h = int(x.shape[-3]) if x.dim() >= 3 else 1
    return {"batch": int(x.numel() // max(h * s * d, 1)), "heads": h, "seq": s, "head_dim": d}


SPEC = KernelSpec(
    name="rotary_embedding",
    order=80,
    signature="kernel_fn(x, cos, sin)",
    summary="x * cos + rotate_half(x) * sin for x [batch, heads, seq, head_dim], cos/sin [seq, head_dim]",
    reference=reference,
    baseline=baseline,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=flops,
    metric="GB/s",
    smoke_shape={"batch": 1, "heads": 2, "seq": 16, "head_dim": 64},
    batch_dims=("batch", "heads"),
    sweep_shapes=(
        {"batch": 1, "heads": 1, "seq": 8, "head_dim": 64},
        {"batch": 2, "heads": 4, "seq": 37, "head_dim": 64},
        {"batch": 1, "heads": 8, "seq": 128, "head_dim": 128},
        {"batch": 2, "heads": 3, "seq": 100, "head_dim": 80},
        {"batch": 4, "heads": 32, "seq": 2048, "head_dim": 128},
        {"batch": 1, "heads": 32, "seq": 4096, "head_dim": 128},
        {"batch": 8, "heads": 12, "seq": 1023, "head_dim": 64},
    ),
    edge_shapes=(
        {"batch": 1, "heads": 1, "seq": 1, "head_dim": 2},
        {"batch": 1, "heads": 1, "seq": 1, "head_dim": 128},
        {"batch": 1, "heads": 3, "seq": 7, "head_dim": 64},
        {"batch": 3, "heads": 1, "seq": 33, "head_dim": 96},
        {"batch": 2, "heads": 5, "seq": 17, "head_dim": 6},
    ),
    bench_shapes=(
        {"batch": 4, "heads": 32, "seq": 4096, "head_dim": 128},
        {"batch": 8, "heads": 32, "seq": 2048, "head_dim": 128},
        {"batch": 16, "heads": 16, "seq": 2048, "head_dim": 64},
        {"batch": 1, "heads": 32, "seq": 8192, "head_dim": 128},
    ),
    # Each output element is two products and a sum in fp32: the halves are dominated by the
    # output's own rounding (2**-11 and 2**-8 relative).
    tolerances={
        torch.float32: (1e-5, 1e-5),
        torch.float16: (1e-3, 2e-3),
        torch.bfloat16: (1e-2, 1e-2),
    },
    shape_from_args=shape_from_args,
    data_args=(0,),
    forbidden_ops=frozenset(),  # made of cat/neg/mul/add, all "math ops" a candidate may not call anyway
    starters=starters_beside(__file__),
    notes=(
        "head_dim is even; the first half pairs with the second: out[..., j] = x[j]*cos[j] - "
        "x[j+D/2]*sin[j], out[..., j+D/2] = x[j+D/2]*cos[j+D/2] + x[j]*sin[j+D/2]. cos/sin are indexed by "
        "the seq position only: load a block of them once and reuse it for several heads (the starter "
        "takes 8 heads per program), so the floor is one read and one write of x. Rows are short "
        "(64-128 elements): pack many positions per program. fp32 math, output in x's dtype."
    ),
)

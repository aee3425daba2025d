"""Triton starter for rotary embedding (rotate-half): many short rows per program.

x is flattened to [batch*heads*seq, head_dim]; each program takes ROWS rows, loads both halves of
each row and the matching halves of cos/sin (row % seq), and writes both output halves. cos/sin
are re-read per head but stay in L2, so DRAM traffic is one read and one write of x.
"""

import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# Half-rows packed into one program. The interpreter pays per program, not per element, so it gets
# bigger tiles.
ROW_TILE, MAX_ROWS = (16384, 256) if INTERPRETED else (2048, 64)


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, n_rows, seq, half,
                 stride_x, stride_cs, stride_out,
                 ROWS: tl.constexpr, BLOCK_H: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_H)
    mask = (rows < n_rows)[:, None] & (cols < half)[None, :]
    pos = rows % seq
    x_lo_ptr = x_ptr + rows[:, None] * stride_x + cols[None, :]
    cs_lo = pos[:, None] * stride_cs + cols[None, :]
    x1 = tl.load(x_lo_ptr, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_lo_ptr + half, mask=mask, other=0.0).to(tl.float32)
    c1 = tl.load(cos_ptr + cs_lo, mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + cs_lo + half, mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + cs_lo, mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + cs_lo + half, mask=mask, other=0.0).to(tl.float32)
    out_lo_ptr = out_ptr + rows[:, None] * stride_out + cols[None, :]
    tl.store(out_lo_ptr, (x1 * c1 - x2 * s1).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_lo_ptr + half, (x2 * c2 + x1 * s2).to(out_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x, cos, sin):
    d = x.shape[-1]
    seq = x.shape[-2]
    x2d = x.contiguous().view(-1, d)
    cos2d = cos.reshape(-1, d)
    sin2d = sin.reshape(-1, d)
    if cos2d.stride(-1) != 1 or sin2d.stride(-1) != 1 or cos2d.stride(0) != sin2d.stride(0):
        cos2d, sin2d = cos2d.contiguous(), sin2d.contiguous()
    n_rows = x2d.shape[0]
    out = torch.empty((n_rows, d), dtype=x.dtype, device=x.device)
    if n_rows:
        half = d // 2
        block_h = triton.next_power_of_2(max(half, 1))
        rows = max(1, min(MAX_ROWS, ROW_TILE // block_h))
        _rope_kernel[(triton.cdiv(n_rows, rows),)](
            x2d, cos2d, sin2d, out, n_rows, seq, half, x2d.stride(0), cos2d.stride(0), out.stride(0),
            ROWS=rows, BLOCK_H=block_h, num_warps=4)
    return out.view(x.shape)

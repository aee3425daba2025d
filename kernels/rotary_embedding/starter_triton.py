"""Triton starter for rotary embedding (rotate-half): a block of positions, several heads per program.

x is [batch, heads, seq, head_dim], read through its strides (a transposed q or k is not copied),
and the output has x's layout, as PyTorch's own elementwise ops give it: a rotated q that stays in
[batch, seq, heads, head_dim] memory makes attention's output come back in that layout too, and the
model's `o.transpose(1, 2).reshape(b, s, d)` is then a view instead of a copy. Each program takes SEQ_BLOCK positions
of one batch entry, loads the matching halves of cos and sin once, and reuses them for
HEADS_PER_PROGRAM heads: per head it loads both halves of x, computes in fp32 and writes both
output halves. cos/sin are read from memory (or L2) once per head group rather than once per row,
so the traffic is essentially one read and one write of x.

A contiguous x with contiguous [seq, head_dim] tables takes a flatter path instead: one 1-D block of
x's elements per program, each element with its partner from the other half (which the same program
has just read, so the second load hits L1/L2) and cos/sin at its position (kept in L2). It keeps up
with torch.compile's kernel where the tiled form trailed it (numbers: docs/results/kernel_notes.md).
"""

import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# Half-row elements per head in one program, and heads per program. The interpreter pays per
# program, not per element, so it gets bigger tiles.
# 1024 half-row elements and one head per program beat 2048 and 8 heads at every shape probed: more
# programs, each with fewer loads behind one another; cos and sin come from L2 either way.
SEQ_TILE, HEADS_PER_PROGRAM = (16384, 32) if INTERPRETED else (1024, 1)
# Elements per program and warps of the flat path (2048 over 8 warps, ahead of 1024/4, 2048/4 and 4096/8 in
# the probes). Numbers for both: docs/results/kernel_notes.md.
FLAT_BLOCK, FLAT_WARPS = (65536, 4) if INTERPRETED else (2048, 8)


@triton.jit
def _rope_flat_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, n, slab, D: tl.constexpr, HALF: tl.constexpr,
                      BLOCK: tl.constexpr):
    """x and out contiguous [..., seq, D], cos/sin contiguous [seq, D] (slab = seq * D)."""
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    first = (idx % D) < HALF
    at = idx % slab  # position and column within one head's [seq, D]
    x = tl.load(x_ptr + idx, mask=ok, other=0.0).to(tl.float32)
    partner = tl.load(x_ptr + tl.where(first, idx + HALF, idx - HALF), mask=ok, other=0.0,
                      eviction_policy="evict_last").to(tl.float32)
    c = tl.load(cos_ptr + at, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    s = tl.load(sin_ptr + at, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    rotated = tl.where(first, -partner, partner)
    tl.store(out_ptr + idx, (x * c + rotated * s).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, heads, seq, half, head_groups,
                 stride_cs, sxb, sxh, sxs, sob, soh, sos, HEADS_PER_PROGRAM: tl.constexpr, SEQ_BLOCK: tl.constexpr,
                 BLOCK_H: tl.constexpr):
    pid_s = tl.program_id(0)
    pid_bg = tl.program_id(1)
    b = (pid_bg // head_groups).to(tl.int64)
    first_head = (pid_bg % head_groups) * HEADS_PER_PROGRAM
    pos = pid_s * SEQ_BLOCK + tl.arange(0, SEQ_BLOCK)
    cols = tl.arange(0, BLOCK_H)
    tile_ok = (pos < seq)[:, None] & (cols < half)[None, :]
    cs = pos[:, None].to(tl.int64) * stride_cs + cols[None, :]
    c1 = tl.load(cos_ptr + cs, mask=tile_ok, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + cs + half, mask=tile_ok, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + cs, mask=tile_ok, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + cs + half, mask=tile_ok, other=0.0).to(tl.float32)
    for h in range(first_head, tl.minimum(first_head + HEADS_PER_PROGRAM, heads)):
        h64 = b * 0 + h  # the head index in int64 (b is), so h * sxh cannot overflow
        x_offs = (b * sxb + h64 * sxh + pos.to(tl.int64) * sxs)[:, None] + cols[None, :]  # x may be a strided view
        offs = (b * sob + h64 * soh + pos.to(tl.int64) * sos)[:, None] + cols[None, :]  # and so may the output
        x1 = tl.load(x_ptr + x_offs, mask=tile_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        x2 = tl.load(x_ptr + x_offs + half, mask=tile_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        tl.store(out_ptr + offs, (x1 * c1 - x2 * s1).to(out_ptr.dtype.element_ty), mask=tile_ok)
        tl.store(out_ptr + offs + half, (x2 * c2 + x1 * s2).to(out_ptr.dtype.element_ty), mask=tile_ok)


def kernel_fn(x, cos, sin):
    d = x.shape[-1]
    seq = x.shape[-2] if x.dim() >= 2 else 1
    heads = x.shape[-3] if x.dim() >= 3 else 1
    # q and k in attention are usually transposed views ([B, S, H, D] memory seen as [B, H, S, D]): read
    # them where they are instead of copying them first (a copy is one more read and write of x).
    if x.dim() == 4 and x.stride(-1) == 1:
        xc = x
    else:
        xc = x.contiguous().reshape(-1, heads, seq, d) if x.numel() else x
    cos2d = cos.reshape(-1, d)
    sin2d = sin.reshape(-1, d)
    if cos2d.stride(-1) != 1 or sin2d.stride(-1) != 1 or cos2d.stride(0) != sin2d.stride(0):
        cos2d, sin2d = cos2d.contiguous(), sin2d.contiguous()
    # empty_like keeps a dense x's strides (a transposed view stays transposed); anything else: contiguous
    out = torch.empty_like(x) if xc is x else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    flat = (xc.is_contiguous() and out.is_contiguous() and cos2d.shape[0] == seq and cos2d.is_contiguous()
            and sin2d.is_contiguous() and d % 2 == 0)
    if x.numel() and flat:
        _rope_flat_kernel[(triton.cdiv(x.numel(), FLAT_BLOCK),)](xc, cos2d, sin2d, out, x.numel(), seq * d, D=d,
                                                                  HALF=d // 2, BLOCK=FLAT_BLOCK, num_warps=FLAT_WARPS)
    elif x.numel():
        o4 = out if xc is x else out.view(-1, heads, seq, d)
        batch = x.numel() // (heads * seq * d)
        half = d // 2
        block_h = triton.next_power_of_2(max(half, 1))
        seq_block = max(1, min(SEQ_TILE // block_h, triton.next_power_of_2(seq)))
        per_program = min(HEADS_PER_PROGRAM, heads)
        head_groups = triton.cdiv(heads, per_program)
        grid = (triton.cdiv(seq, seq_block), batch * head_groups)
        _rope_kernel[grid](xc, cos2d, sin2d, out, heads, seq, half, head_groups, cos2d.stride(0),
                           xc.stride(0), xc.stride(1), xc.stride(2), o4.stride(0), o4.stride(1), o4.stride(2),
                           HEADS_PER_PROGRAM=per_program, SEQ_BLOCK=seq_block, BLOCK_H=block_h, num_warps=4)
    return out

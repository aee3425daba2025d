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

This file is also the playbook's rotary template: the knob constants below are what the playbook agent
moves (playbook/templates/rotary_embedding.py gives each one's reason); their values here are the starter's.
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
SEQ_TILE, HEAD_GROUP = (16384, 32) if INTERPRETED else (1024, 1)
# Elements per program and warps of the flat path (2048 over 8 warps, ahead of 1024/4, 2048/4 and 4096/8 in
# the probes). Numbers for both: docs/results/kernel_notes.md.
FLAT_BLOCK, FLAT_WARPS = (65536, 4) if INTERPRETED else (2048, 8)

# Knobs, each with its playbook tier. 0 picks the starter's own rule where a knob has one; the tiled path's
# knobs act on every x that is not contiguous, and on all of them once FLAT is off.
NUM_WARPS = 0  # tier 1, launch shape (0: FLAT_WARPS on the flat path, 4 on the tiled one)
BLOCK_S = 0  # tier 1, launch shape (positions per program of the tiled path; 0: SEQ_TILE half-row elements)
LOAD_EVICTION = 'evict_first'  # tier 2, memory access (x on the tiled path)
CS_EVICTION = ''  # tier 2, memory access (cos and sin on the tiled path)
ACC_FP32 = True  # tier 3, compute
AUTOTUNE = False  # tier 4, algorithm (triton.autotune picks the tiled kernel's warps)
HEADS_PER_PROGRAM = 0  # tier 6, kernel-specific (0: HEAD_GROUP)
SPLIT_HALVES = True  # tier 6, kernel-specific (False: each element gathers its partner, any head dim)
FLAT = True  # tier 6, kernel-specific (False: contiguous x takes the tiled path too)


@triton.jit
def _rope_flat_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, n, slab, D: tl.constexpr, HALF: tl.constexpr,
                      BLOCK: tl.constexpr, ACC_FP32: tl.constexpr):
    """x and out contiguous [..., seq, D], cos/sin contiguous [seq, D] (slab = seq * D)."""
    acc_dtype = tl.float32 if ACC_FP32 else x_ptr.dtype.element_ty
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n
    first = (idx % D) < HALF
    at = idx % slab  # position and column within one head's [seq, D]
    x = tl.load(x_ptr + idx, mask=ok, other=0.0).to(acc_dtype)
    partner = tl.load(x_ptr + tl.where(first, idx + HALF, idx - HALF), mask=ok, other=0.0,
                      eviction_policy="evict_last").to(acc_dtype)
    c = tl.load(cos_ptr + at, mask=ok, other=0.0, eviction_policy="evict_last").to(acc_dtype)
    s = tl.load(sin_ptr + at, mask=ok, other=0.0, eviction_policy="evict_last").to(acc_dtype)
    rotated = tl.where(first, -partner, partner)
    tl.store(out_ptr + idx, (x * c + rotated * s).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, heads, seq, width, head_groups,
                 stride_cs, sxb, sxh, sxs, sob, soh, sos, HEADS_PER_PROGRAM: tl.constexpr, SEQ_BLOCK: tl.constexpr,
                 BLOCK_H: tl.constexpr, HALVES: tl.constexpr, X_EVICTION: tl.constexpr, CS_EVICTION: tl.constexpr,
                 ACC_FP32: tl.constexpr):
    """With HALVES, `width` is half the head dim and each half of x is loaded once; without, it is the head
    dim and each element gathers its partner (element i pairs with i + D // 2, negated, or i - (D - D // 2))."""
    acc_dtype = tl.float32 if ACC_FP32 else x_ptr.dtype.element_ty
    pid_s = tl.program_id(0)
    pid_bg = tl.program_id(1)
    b = (pid_bg // head_groups).to(tl.int64)
    first_head = (pid_bg % head_groups) * HEADS_PER_PROGRAM
    pos = pid_s * SEQ_BLOCK + tl.arange(0, SEQ_BLOCK)
    cols = tl.arange(0, BLOCK_H)
    tile_ok = (pos < seq)[:, None] & (cols < width)[None, :]
    cs = pos[:, None].to(tl.int64) * stride_cs + cols[None, :]
    if HALVES:
        half = width
        c1 = tl.load(cos_ptr + cs, mask=tile_ok, other=0.0, eviction_policy=CS_EVICTION).to(acc_dtype)
        c2 = tl.load(cos_ptr + cs + half, mask=tile_ok, other=0.0, eviction_policy=CS_EVICTION).to(acc_dtype)
        s1 = tl.load(sin_ptr + cs, mask=tile_ok, other=0.0, eviction_policy=CS_EVICTION).to(acc_dtype)
        s2 = tl.load(sin_ptr + cs + half, mask=tile_ok, other=0.0, eviction_policy=CS_EVICTION).to(acc_dtype)
    else:
        second = width // 2  # the second half's length is width - second
        first = cols < width - second
        partner = tl.where(first, cols + second, cols - (width - second))
        c = tl.load(cos_ptr + cs, mask=tile_ok, other=0.0, eviction_policy=CS_EVICTION).to(acc_dtype)
        s = tl.load(sin_ptr + cs, mask=tile_ok, other=0.0, eviction_policy=CS_EVICTION).to(acc_dtype)
        s = tl.where(first[None, :], -s, s)  # the rotation's sign, folded into sin
    for h in range(first_head, tl.minimum(first_head + HEADS_PER_PROGRAM, heads)):
        h64 = b * 0 + h  # the head index in int64 (b is), so h * sxh cannot overflow
        x_offs = (b * sxb + h64 * sxh + pos.to(tl.int64) * sxs)[:, None] + cols[None, :]  # x may be a strided view
        offs = (b * sob + h64 * soh + pos.to(tl.int64) * sos)[:, None] + cols[None, :]  # and so may the output
        if HALVES:
            x1 = tl.load(x_ptr + x_offs, mask=tile_ok, other=0.0, eviction_policy=X_EVICTION).to(acc_dtype)
            x2 = tl.load(x_ptr + x_offs + half, mask=tile_ok, other=0.0, eviction_policy=X_EVICTION).to(acc_dtype)
            tl.store(out_ptr + offs, (x1 * c1 - x2 * s1).to(out_ptr.dtype.element_ty), mask=tile_ok)
            tl.store(out_ptr + offs + half, (x2 * c2 + x1 * s2).to(out_ptr.dtype.element_ty), mask=tile_ok)
        else:
            x = tl.load(x_ptr + x_offs, mask=tile_ok, other=0.0, eviction_policy=X_EVICTION).to(acc_dtype)
            xp = tl.load(x_ptr + x_offs + (partner - cols)[None, :], mask=tile_ok, other=0.0,
                         eviction_policy=X_EVICTION).to(acc_dtype)
            tl.store(out_ptr + offs, (x * c + xp * s).to(out_ptr.dtype.element_ty), mask=tile_ok)


if AUTOTUNE:
    # The CPU interpreter cannot time configs, so it gets the first one.
    _CONFIGS = [triton.Config({}, num_warps=w) for w in (4, 2, 8)]
    _rope_kernel = triton.autotune(configs=_CONFIGS[:1] if INTERPRETED else _CONFIGS,
                                   key=["width", "SEQ_BLOCK", "HEADS_PER_PROGRAM", "HALVES"])(_rope_kernel)


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
    flat = (FLAT and xc.is_contiguous() and out.is_contiguous() and cos2d.shape[0] == seq and cos2d.is_contiguous()
            and sin2d.is_contiguous() and d % 2 == 0)
    if x.numel() and flat:
        _rope_flat_kernel[(triton.cdiv(x.numel(), FLAT_BLOCK),)](xc, cos2d, sin2d, out, x.numel(), seq * d, D=d,
                                                                  HALF=d // 2, BLOCK=FLAT_BLOCK, ACC_FP32=ACC_FP32,
                                                                  num_warps=NUM_WARPS or FLAT_WARPS)
    elif x.numel():
        o4 = out if xc is x else out.view(-1, heads, seq, d)
        batch = x.numel() // (heads * seq * d)
        halves = SPLIT_HALVES and d % 2 == 0  # an odd head dim has no halves: its elements gather partners
        width = d // 2 if halves else d
        block_h = triton.next_power_of_2(max(width, 1))
        seq_block = BLOCK_S or max(1, min(SEQ_TILE // block_h, triton.next_power_of_2(seq)))
        per_program = min(HEADS_PER_PROGRAM or HEAD_GROUP, heads)
        head_groups = triton.cdiv(heads, per_program)
        grid = (triton.cdiv(seq, seq_block), batch * head_groups)
        launch = {} if AUTOTUNE else {"num_warps": NUM_WARPS or 4}
        _rope_kernel[grid](xc, cos2d, sin2d, out, heads, seq, width, head_groups, cos2d.stride(0),
                           xc.stride(0), xc.stride(1), xc.stride(2), o4.stride(0), o4.stride(1), o4.stride(2),
                           HEADS_PER_PROGRAM=per_program, SEQ_BLOCK=seq_block, BLOCK_H=block_h, HALVES=halves,
                           X_EVICTION=LOAD_EVICTION, CS_EVICTION=CS_EVICTION, ACC_FP32=ACC_FP32, **launch)
    return out

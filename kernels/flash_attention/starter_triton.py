"""Triton starter for attention: a FlashAttention-2 style forward pass, causal or not.

One program per (BLOCK_M queries, batch*head). It walks the key/value tiles keeping a running max
and sum of the softmax (online softmax, exp2 with log2(e) folded into the scale, fp32
accumulators) and writes acc / l once. Tiles that need no mask (fully visible under the causal
mask, or fully inside the sequence) run first without one; only the diagonal tiles (causal) or
the last partial tile (not causal) are masked, so any sequence length works. Head dims that are
not a power of two are padded to one with masked loads. Long sequences are autotuned over a few
H100 tiles; short ones, and everything under TRITON_INTERPRET=1, use one small tile. Under the
interpreter bf16 tiles are widened to fp32 before tl.dot (the interpreter's bf16 dot is wrong;
the widening is exact).

The knobs below are this file's variants, the playbook agent's space (playbook/templates/flash_attention.py):
each is read by the launch code or passed to the kernel as a constexpr, and at the values written here
the starter runs as described above.
"""

import math
import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# Knobs, each with its playbook tier. A tile knob of None leaves that part of the tile to the lists
# below; set, it replaces it in every tile (the autotuned ones too).
BLOCK_M = None  # tier 1, launch shape
BLOCK_N = None  # tier 1, launch shape
NUM_WARPS = None  # tier 1, launch shape
NUM_STAGES = None  # tier 1, launch shape
KV_EVICTION = ''  # tier 2, memory access: eviction hint on the K and V loads ('' or 'evict_last')
EXP2 = True  # tier 3, compute: softmax through exp2 with log2(e) folded into the scale (False: exp)
CAUSAL_SKIP = True  # tier 6, kernel-specific: causal, stop at the diagonal (False: walk every key tile, masked)
PRESCALE_Q = False  # tier 6, kernel-specific: scale q once at its load instead of every score tile

# Autotuned on a GPU for fp16/bf16 sequences long enough to repay it, once per head dim, mask and
# dtype (not per sequence length: a cold check compiles every tile for each of those, and each
# compile costs seconds). fp32 (IEEE dots, no tensor cores) and short sequences take one tile, and
# everything under the interpreter SMALL_TILE. BLOCK_M is a multiple of BLOCK_N (the causal split needs it).
TUNED_TILES = [  # (BLOCK_M, BLOCK_N, num_warps, num_stages): H100 bf16/fp16 favourites first
    (128, 64, 8, 3),
    (128, 128, 8, 3),
    (64, 64, 4, 3),
]
FP32_TILE = (64, 32, 4, 3)  # fits fp32 shared-memory budgets at head dim 128
SMALL_TILE = (32, 32, 4, 2) if INTERPRETED else (64, 32, 4, 2)
AUTOTUNE_MIN_SEQ = 512


def _with_knobs(tile):
    """`tile` (BLOCK_M, BLOCK_N, num_warps, num_stages) with each tile knob that is set in place."""
    return tuple(own if knob is None else knob for own, knob in zip(tile, (BLOCK_M, BLOCK_N, NUM_WARPS, NUM_STAGES)))


@triton.jit
def _attend_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                  offs_m, offs_d, lo, hi, seq, head_dim, qk_scale,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr,
                  UPCAST: tl.constexpr, BLOCK_N: tl.constexpr, KV_EVICTION: tl.constexpr, EXP2: tl.constexpr,
                  PRESCALE_Q: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    d_ok = offs_d < head_dim
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd  # k.T tile [BLOCK_D, BLOCK_N]
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd  # [BLOCK_N, BLOCK_D]
        if MASKED:
            k = tl.load(k_ptrs, mask=d_ok[:, None] & (cols[None, :] < seq), other=0.0, eviction_policy=KV_EVICTION)
            v = tl.load(v_ptrs, mask=(cols[:, None] < seq) & d_ok[None, :], other=0.0, eviction_policy=KV_EVICTION)
        elif EVEN_D:
            k = tl.load(k_ptrs, eviction_policy=KV_EVICTION)
            v = tl.load(v_ptrs, eviction_policy=KV_EVICTION)
        else:
            k = tl.load(k_ptrs, mask=d_ok[:, None], other=0.0, eviction_policy=KV_EVICTION)
            v = tl.load(v_ptrs, mask=d_ok[None, :], other=0.0, eviction_policy=KV_EVICTION)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        if IEEE or UPCAST:
            qk = tl.dot(q, k, input_precision="ieee")
        else:
            qk = tl.dot(q, k)
        if not PRESCALE_Q:  # otherwise q was scaled at its load
            qk = qk * qk_scale  # log2 units (EXP2): exp2(qk) == exp(q.k / sqrt(D))
        if MASKED:
            visible = cols[None, :] < seq
            if CAUSAL:
                visible = visible & (offs_m[:, None] >= cols[None, :])
            qk = tl.where(visible, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        if EXP2:
            p = tl.exp2(qk - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
        else:
            p = tl.exp(qk - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        if IEEE or UPCAST:
            acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, heads, seq, head_dim, qk_scale,
                      stride_qb, stride_qh, stride_qs, stride_qd,
                      stride_kb, stride_kh, stride_ks, stride_kd,
                      stride_vb, stride_vh, stride_vs, stride_vd,
                      stride_ob, stride_oh, stride_os, stride_od,
                      CAUSAL: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr, EVEN_D: tl.constexpr,
                      BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KV_EVICTION: tl.constexpr,
                      EXP2: tl.constexpr, CAUSAL_SKIP: tl.constexpr, PRESCALE_Q: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    o_base = o_ptr + b * stride_ob + h * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < seq
    d_ok = offs_d < head_dim
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if PRESCALE_Q:
        q = (q.to(tl.float32) * qk_scale).to(q_ptr.dtype.element_ty)
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)

    # Unmasked tiles: below the diagonal block (causal) or entirely inside the sequence.
    if CAUSAL:
        full_hi = start_m * BLOCK_M
        if BLOCK_M % BLOCK_N != 0:  # a tile knob broke the tiles' rule: stop at the key tile the diagonal starts in
            full_hi = full_hi // BLOCK_N * BLOCK_N
    else:
        full_hi = (seq // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd, stride_vs, stride_vd,
                                  offs_m, offs_d, 0, full_hi, seq, head_dim, qk_scale,
                                  False, CAUSAL, EVEN_D, IEEE, UPCAST, BLOCK_N, KV_EVICTION, EXP2, PRESCALE_Q)
    # Masked tiles: the diagonal block (causal) or the partial last tile.
    if CAUSAL and CAUSAL_SKIP:
        masked_hi = tl.minimum((start_m + 1) * BLOCK_M, seq)
    else:
        masked_hi = seq
    acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd, stride_vs, stride_vd,
                                  offs_m, offs_d, full_hi, masked_hi, seq, head_dim, qk_scale,
                                  True, CAUSAL, EVEN_D, IEEE, UPCAST, BLOCK_N, KV_EVICTION, EXP2, PRESCALE_Q)

    out = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od, out.to(o_ptr.dtype.element_ty),
             mask=row_ok[:, None] & d_ok[None, :])


_attention_tuned = triton.autotune(
    configs=[triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=st)
             for m, n, w, st in dict.fromkeys(map(_with_knobs, TUNED_TILES))],
    key=["head_dim", "CAUSAL"],
)(_attention_kernel)


def kernel_fn(q, k, v, causal=False):
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"attention expects q, k, v of one shape [B, H, S, D]; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    batch, heads, seq, head_dim = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if q.numel() == 0:
        return out
    block_d = max(16, triton.next_power_of_2(head_dim))
    qk_scale = (1.4426950408889634 if EXP2 else 1.0) / math.sqrt(head_dim)
    grid = lambda meta: (triton.cdiv(seq, meta["BLOCK_M"]), batch * heads)
    flags = dict(CAUSAL=bool(causal), IEEE=q.dtype == torch.float32, UPCAST=INTERPRETED and q.dtype == torch.bfloat16,
                 EVEN_D=block_d == head_dim, BLOCK_D=block_d, KV_EVICTION=KV_EVICTION, EXP2=EXP2,
                 CAUSAL_SKIP=CAUSAL_SKIP, PRESCALE_Q=PRESCALE_Q)
    if INTERPRETED or seq < AUTOTUNE_MIN_SEQ or flags["IEEE"]:
        tile = FP32_TILE if flags["IEEE"] and not INTERPRETED and seq >= AUTOTUNE_MIN_SEQ else SMALL_TILE
        block_m, block_n, warps, stages = _with_knobs(tile)
        kernel = _attention_kernel
        flags.update(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages)
    else:
        kernel = _attention_tuned
    kernel[grid](q, k, v, out, heads, seq, head_dim, qk_scale,
                 *q.stride(), *k.stride(), *v.stride(), *out.stride(), **flags)
    return out

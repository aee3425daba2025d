"""Triton starter for matmul: tiled, grouped program order, fp32 accumulation, autotuned on a GPU.

Each program computes one BLOCK_M x BLOCK_N tile of C, walking K in BLOCK_K steps; programs are
ordered in groups of GROUP_M tile-rows so neighbouring programs share A and B tiles in L2. The
K loop is unmasked when K is a multiple of BLOCK_K. fp32 inputs are multiplied in IEEE fp32
(the spec's fp32 tolerance does not admit TF32). Big problems are autotuned over a few H100 tiles;
small ones, and everything under TRITON_INTERPRET=1 (CPU, where autotuning would run every config
in the interpreter), use one small tile. Under the interpreter bf16 tiles are widened to fp32
before tl.dot (the interpreter's bf16 dot returns garbage; exact, since the product of two bf16
values fits in fp32).

The knobs below are this file's variants, the playbook agent's space (playbook/templates/matmul.py):
each is read by the launch code or passed to the kernel as a constexpr, and at the values written
here the starter runs as described above.
"""

import os

import torch
import triton
import triton.language as tl

from autokernel.kernels.triton_common import ab_tile_pointers, dot_acc, grouped_tile, load_k_tiles, span, tma_ready

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# Knobs, each with its playbook tier. A tile knob of None leaves that part of the tile to the lists
# below; set, it replaces it in every tile (the autotuned ones too).
BLOCK_M = None  # tier 1, launch shape
BLOCK_N = None  # tier 1, launch shape
BLOCK_K = None  # tier 1, launch shape
NUM_WARPS = None  # tier 1, launch shape
NUM_STAGES = None  # tier 1, launch shape
GROUP_M = 8  # tier 2, memory access: tile rows per group of programs that share B tiles in L2
INPUT_PRECISION = 'ieee'  # tier 3, compute: the dot of fp32 inputs, 'ieee' (exact) or 'tf32'
SPLIT_K = 1  # tier 4, algorithm: programs per output tile along K; a second pass adds their partials in order
AUTOTUNE = True  # tier 4, algorithm: autotune over TUNED_TILES from AUTOTUNE_MIN_WORK up (False: SMALL_TILE always)
TMA = False  # tier 5, Hopper: A and B tiles through tensor descriptors where the layout allows
WARP_SPECIALIZE = False  # tier 5, Hopper: producer and consumer warps in the K loop
EVEN_K = True  # tier 6, kernel-specific: no masks in the K loop when K is a multiple of BLOCK_K

# Autotuned on a GPU for problems big enough to repay it (each config is compiled per dtype, then
# timed); small problems, and everything under the interpreter, use SMALL_TILE directly.
TUNED_TILES = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): H100 bf16/fp16 favourites first
    (128, 256, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 32, 4, 4),  # fits fp32 (IEEE) shared-memory budgets
]
SMALL_TILE = (64, 64, 32, 4, 3)
AUTOTUNE_MIN_WORK = 1 << 24  # M*N*K below this (256**3) is launch-bound: no autotuning


def _with_knobs(tile):
    """`tile` (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) with each tile knob that is set in place."""
    return tuple(own if knob is None else knob for own, knob in zip(tile, (BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES)))


@triton.heuristics({"EVEN_K": lambda args: EVEN_K and args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   IEEE: tl.constexpr, UPCAST: tl.constexpr, INT64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, SPLIT_K: tl.constexpr, USE_TMA: tl.constexpr,
                   WARP_SPECIALIZE: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)

    a_ptrs, b_ptrs, offs_k = ab_tile_pointers(a_ptr, b_ptr, pid_m, pid_n, M, N, stride_am, stride_ak, stride_bk,
                                              stride_bn, INT64, BLOCK_M, BLOCK_N, BLOCK_K)
    if USE_TMA:  # parts of a tile past an edge read as zeros: no masks, no wrapped rows
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])

    # This program's K steps: all of them, or with SPLIT_K one slice, its partial sums stored in rows
    # [split * M, split * M + M) of a [SPLIT_K * M, N] fp32 buffer.
    k_first = 0
    k_last = tl.cdiv(K, BLOCK_K)
    if SPLIT_K > 1:
        per_split = tl.cdiv(k_last, SPLIT_K)
        k_first = tl.program_id(1) * per_split
        k_last = min(k_first + per_split, k_last)
        a_ptrs += k_first * BLOCK_K * stride_ak
        b_ptrs += k_first * BLOCK_K * stride_bk
        c_ptr += tl.program_id(1).to(tl.int64) * M * stride_cm

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(k_first, k_last, warp_specialize=WARP_SPECIALIZE):
        if USE_TMA:
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        else:
            a, b = load_k_tiles(a_ptrs, b_ptrs, offs_k, K - k * BLOCK_K, EVEN_K)
        acc = dot_acc(a, b, acc, IEEE, UPCAST)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if INT64:
        offs_cm = offs_cm.to(tl.int64)
        offs_cn = offs_cn.to(tl.int64)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _add_splits(partial_ptr, c_ptr, MN, N, stride_cm, stride_cn, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    """c = the SPLIT_K partial products of a contiguous [SPLIT_K * M, N] fp32 buffer, added in split order
    (so the result repeats bit for bit)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in tl.static_range(SPLIT_K):
        acc += tl.load(partial_ptr + offs, mask=mask, other=0.0)
        partial_ptr += MN
    tl.store(c_ptr + (offs // N) * stride_cm + (offs % N) * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)


_matmul_tuned = triton.autotune(
    configs=[triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": GROUP_M}, num_warps=w, num_stages=st)
             for m, n, k, w, st in dict.fromkeys(map(_with_knobs, TUNED_TILES))],
    key=["M", "N", "K", "IEEE", "UPCAST"],
)(_matmul_kernel)


def matmul(a, b, out=None):
    """a [M, K] @ b [K, N] into a new (or the given) [M, N] tensor of a's dtype; any strides."""
    M, K = a.shape
    N = b.shape[1]
    c = out if out is not None else torch.empty((M, N), dtype=a.dtype, device=a.device)
    if M == 0 or N == 0:
        return c
    if K == 0:
        return c.fill_(0)
    use_tma = False
    if TMA:
        a, b = a.contiguous(), b.contiguous()
        use_tma = tma_ready(a, b)
    target, grid = c, lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    if SPLIT_K > 1:  # partial products in fp32, one [M, N] block of rows per split
        target = torch.empty((SPLIT_K * M, N), dtype=torch.float32, device=a.device)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), SPLIT_K)
    args = (a, b, target, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), target.stride(0), target.stride(1))
    flags = dict(IEEE=a.dtype == torch.float32 and INPUT_PRECISION == "ieee", UPCAST=INTERPRETED and a.dtype == torch.bfloat16,
                 INT64=max(span(a), span(b), span(target)) >= 2**31, SPLIT_K=SPLIT_K, USE_TMA=use_tma,
                 WARP_SPECIALIZE=WARP_SPECIALIZE)
    if not AUTOTUNE or INTERPRETED or M * N * K < AUTOTUNE_MIN_WORK:
        m, n, k, warps, stages = _with_knobs(SMALL_TILE)
        _matmul_kernel[grid](*args, **flags, BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, GROUP_M=GROUP_M, num_warps=warps, num_stages=stages)
    else:
        _matmul_tuned[grid](*args, **flags)
    if SPLIT_K > 1:
        _add_splits[(triton.cdiv(M * N, 1024),)](target, c, M * N, N, c.stride(0), c.stride(1), SPLIT_K=SPLIT_K, BLOCK=1024)
    return c


def kernel_fn(a, b):
    if b.dim() != 2 or a.dim() < 1 or a.shape[-1] != b.shape[0]:
        raise ValueError(f"matmul expects a [..., K] and b [K, N]; got {tuple(a.shape)} and {tuple(b.shape)}")
    lead = a.shape[:-1]
    a2d = a.reshape(-1, a.shape[-1])
    return matmul(a2d, b).reshape(*lead, b.shape[1])

"""Triton starter for matmul: tiled, grouped program order, fp32 accumulation, autotuned on a GPU.

Each program computes one BLOCK_M x BLOCK_N tile of C, walking K in BLOCK_K steps; programs are
ordered in groups of GROUP_M tile-rows so neighbouring programs share A and B tiles in L2. The
K loop is unmasked when K is a multiple of BLOCK_K. fp32 inputs are multiplied in IEEE fp32
(the spec's fp32 tolerance does not admit TF32). Big problems are autotuned over a few H100 tiles;
small ones, and everything under TRITON_INTERPRET=1 (CPU, where autotuning would run every config
in the interpreter), use one small tile. Under the interpreter bf16 tiles are widened to fp32
before tl.dot (the interpreter's bf16 dot returns garbage; exact, since the product of two bf16
values fits in fp32).
"""

import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# Autotuned on a GPU for problems big enough to repay it (each config is compiled per dtype, then
# timed); small problems, and everything under the interpreter, use SMALL_TILE directly.
TUNED_TILES = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): H100 bf16/fp16 favourites first
    (128, 256, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 32, 4, 4),  # fits fp32 (IEEE) shared-memory budgets
]
SMALL_TILE = ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, 4, 3)
AUTOTUNE_MIN_WORK = 1 << 24  # M*N*K below this (256**3) is launch-bound: no autotuning


@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   IEEE: tl.constexpr, UPCAST: tl.constexpr, INT64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # Rows/columns past the edge wrap around (valid addresses, results never stored).
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    if INT64:  # element offsets past 2**31 (e.g. a 16k x 128k logits matrix)
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if IEEE or UPCAST:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
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


_matmul_tuned = triton.autotune(
    configs=[triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_warps=w, num_stages=st)
             for m, n, k, w, st in TUNED_TILES],
    key=["M", "N", "K", "IEEE", "UPCAST"],
)(_matmul_kernel)


def _span(t):
    """The largest element offset a 2-D tensor's strides reach."""
    return sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))


def matmul(a, b, out=None):
    """a [M, K] @ b [K, N] into a new (or the given) [M, N] tensor of a's dtype; any strides."""
    M, K = a.shape
    N = b.shape[1]
    c = out if out is not None else torch.empty((M, N), dtype=a.dtype, device=a.device)
    if M == 0 or N == 0:
        return c
    if K == 0:
        return c.fill_(0)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    flags = dict(IEEE=a.dtype == torch.float32, UPCAST=INTERPRETED and a.dtype == torch.bfloat16,
                 INT64=max(_span(a), _span(b), _span(c)) >= 2**31)
    if INTERPRETED or M * N * K < AUTOTUNE_MIN_WORK:
        tile, warps, stages = SMALL_TILE
        _matmul_kernel[grid](*args, **flags, **tile, num_warps=warps, num_stages=stages)
    else:
        _matmul_tuned[grid](*args, **flags)
    return c


def kernel_fn(a, b):
    if b.dim() != 2 or a.dim() < 1 or a.shape[-1] != b.shape[0]:
        raise ValueError(f"matmul expects a [..., K] and b [K, N]; got {tuple(a.shape)} and {tuple(b.shape)}")
    lead = a.shape[:-1]
    a2d = a.reshape(-1, a.shape[-1])
    return matmul(a2d, b).reshape(*lead, b.shape[1])

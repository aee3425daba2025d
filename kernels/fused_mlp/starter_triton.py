"""Triton starter for the SwiGLU MLP: one fused gate/up kernel, then the down projection.

Kernel 1 is one matmul over w_gate and w_up with their columns interleaved (gate j, up j, gate j+1,
...): each program's B tile holds both halves of BLOCK_N // 2 columns of h, read straight from the two
weights (no copy), so the K loop is one plain dot, the same wgmma pipeline as the matmul starter's
(two accumulators and two dots per step, the first form, reached 0.82-0.92x the eager SwiGLU on the
H100). Its epilogue splits the pairs and writes silu(g) * u once, in x's dtype. Kernel 2 is a tiled,
grouped-order matmul h @ w_down.T. Weights are read through the strides of their transposed views
(no copies). Big problems are autotuned over a few H100 tiles;
small ones, and everything under TRITON_INTERPRET=1, use one small tile. Under the interpreter
bf16 tiles are widened to fp32 before tl.dot (the interpreter's bf16 dot is wrong; the widening
is exact).
"""

import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _tuned(kernel, tiles):
    """`kernel` autotuned over `tiles` (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)."""
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_warps=w, num_stages=st)
               for m, n, k, w, st in tiles]
    return triton.autotune(configs=configs, key=["M", "N", "K", "IEEE", "UPCAST"])(kernel)


# Autotuned on a GPU for problems big enough to repay it (each config is compiled per dtype, then
# timed); small problems, and everything under the interpreter, use SMALL_TILE directly.
# The gate/up tile is a plain matmul tile over the interleaved [gate | up] columns (BLOCK_N counts
# both), so it takes the matmul starter's H100 tiles.
GATE_UP_TILES = [
    (128, 256, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 32, 4, 4),  # fits fp32 (IEEE) shared-memory budgets
]
DOWN_TILES = [
    (128, 256, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (64, 64, 32, 4, 4),
]
SMALL_TILE = ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, 4, 3)
AUTOTUNE_MIN_WORK = 1 << 24  # tokens*hidden*intermediate below this (256**3) is launch-bound


@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped program order: GROUP_M tile-rows share their B tiles in L2."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _gate_up_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K,
                    stride_xm, stride_xk, stride_wk, stride_wn, stride_hm, stride_hn,
                    IEEE: tl.constexpr, UPCAST: tl.constexpr, INT64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    """One [BLOCK_M, BLOCK_N] tile of x @ [w_gate | w_up].T with the two interleaved column by column
    (even columns gate j, odd columns up j, for BLOCK_N // 2 columns j of h), so it is one plain dot per
    K step, the same wgmma and cp.async pipeline as a matmul; the epilogue splits the pairs and writes
    silu(g) * u for its BLOCK_N // 2 columns of h."""
    HALF: tl.constexpr = BLOCK_N // 2
    pid_m, pid_n = _tile_ids(M, 2 * N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    c = tl.arange(0, BLOCK_N)
    cols = (pid_n * HALF + c // 2) % N
    if INT64:  # element offsets past 2**31 (e.g. a 16k x 128k logits matrix)
        offs_m = offs_m.to(tl.int64)
        cols = cols.to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_offs = offs_k[:, None] * stride_wk + cols[None, :] * stride_wn  # w_gate and w_up share a layout
    w_ptrs = tl.where((c % 2 == 1)[None, :], wu_ptr + w_offs, wg_ptr + w_offs)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            x = tl.load(x_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_left = K - k * BLOCK_K
            x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST:
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        if IEEE or UPCAST:
            acc = tl.dot(x, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(x, w, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    g, u = tl.split(tl.reshape(acc, (BLOCK_M, HALF, 2)))
    h = g / (1.0 + tl.exp(-g)) * u  # silu(g) * u in fp32
    offs_hm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_hn = pid_n * HALF + tl.arange(0, HALF)
    if INT64:
        offs_hm = offs_hm.to(tl.int64)
        offs_hn = offs_hn.to(tl.int64)
    mask = (offs_hm[:, None] < M) & (offs_hn[None, :] < N)
    tl.store(h_ptr + offs_hm[:, None] * stride_hm + offs_hn[None, :] * stride_hn, h.to(h_ptr.dtype.element_ty), mask=mask)


@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   IEEE: tl.constexpr, UPCAST: tl.constexpr, INT64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
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
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)


_gate_up_tuned = _tuned(_gate_up_kernel, GATE_UP_TILES)
_matmul_tuned = _tuned(_matmul_kernel, DOWN_TILES)


def _span(t):
    """The largest element offset a 2-D tensor's strides reach."""
    return sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))


def _grid(M, N, per_tile=1):
    """Programs for an [M, N] output, each covering BLOCK_N // per_tile of its columns."""
    return lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"] // per_tile),)


def kernel_fn(x, w_gate, w_up, w_down):
    hidden = x.shape[-1]
    inter = w_gate.shape[0]
    x2d = x.reshape(-1, hidden)
    tokens = x2d.shape[0]
    out = torch.empty((tokens, hidden), dtype=x.dtype, device=x.device)
    if tokens == 0 or hidden == 0:
        return out.reshape(x.shape)
    if inter == 0:
        return out.fill_(0).reshape(x.shape)
    if w_gate.stride() != w_up.stride():
        w_gate, w_up = w_gate.contiguous(), w_up.contiguous()
    flags = dict(IEEE=x.dtype == torch.float32, UPCAST=INTERPRETED and x.dtype == torch.bfloat16,
                 INT64=max(_span(t) for t in (x2d, w_gate, w_up, w_down)) >= 2**31 or tokens * inter >= 2**31)
    if INTERPRETED or tokens * hidden * inter < AUTOTUNE_MIN_WORK:
        tile, warps, stages = SMALL_TILE
        gate_up, down = _gate_up_kernel, _matmul_kernel
        flags.update(tile, num_warps=warps, num_stages=stages)
    else:
        gate_up, down = _gate_up_tuned, _matmul_tuned
    h = torch.empty((tokens, inter), dtype=x.dtype, device=x.device)
    # w.T is [hidden, inter] with strides (w.stride(1), w.stride(0)).
    gate_up[_grid(tokens, inter, per_tile=2)](
        x2d, w_gate, w_up, h, tokens, inter, hidden,
        x2d.stride(0), x2d.stride(1), w_gate.stride(1), w_gate.stride(0), h.stride(0), h.stride(1), **flags)
    down[_grid(tokens, hidden)](
        h, w_down, out, tokens, hidden, inter,
        h.stride(0), h.stride(1), w_down.stride(1), w_down.stride(0), out.stride(0), out.stride(1), **flags)
    return out.reshape(x.shape)

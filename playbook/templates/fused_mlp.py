"""Fused MLP template: (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T, weights in nn.Linear layout.

Compute-bound at LLM sizes. Two kernels: the first computes the gate and up projections of the
same x tile and applies SiLU x up in its epilogue, so the [tokens, intermediate] activation is
written once; the second is the down projection. With INTERLEAVED (the default) the first is one
matmul over the gate and up columns taken in turn (gate j, up j, ...; BLOCK_N counts both), one dot per
K step as in a plain matmul, and the epilogue splits the pairs; without it, two accumulators and two
dots per step (on Hopper that form trailed the interleaved one; numbers in
docs/results/kernel_notes.md). With TMA (Hopper; 16-bit inputs with 16-byte aligned rows) both
kernels read their tiles through tensor descriptors, the weights' tiles K-major as wgmma takes them: gate/up keeps two
accumulators (BLOCK_N still counts gate and up columns together) and the down kernel is a plain
descriptor matmul; elsewhere the candidate falls back to the pointer kernels.
"""

from __future__ import annotations

from . import Knob, knob_header
from ._source import IMPORTS, INTERPRETER_NOTE, TMA_READY, fill, join

KERNEL = "fused_mlp"
METRIC = "TFLOP/s"

SPACE = (
    Knob("block_m", 1, (32, 64, 128, 256),
         "BLOCK_M={new} instead of {old}: taller tiles reuse each loaded weight tile over more of the {tokens} tokens"),
    Knob("block_n", 1, (32, 64, 128, 256),
         "BLOCK_N={new} instead of {old}: wider tiles reuse each loaded x tile over more output features (interleaved, the gate/up tile's BLOCK_N covers gate and up columns together; otherwise it holds two accumulators of this width)"),
    Knob("block_k", 1, (32, 64, 128),
         "BLOCK_K={new} instead of {old}: deeper K steps mean fewer iterations over hidden={hidden} and intermediate={intermediate}, but more shared memory per stage"),
    Knob("num_warps", 1, (4, 8),
         "{new} warps instead of {old} per output tile: more hide latency, fewer leave more registers for the two accumulators"),
    Knob("num_stages", 1, (2, 3, 4),
         "{new} pipeline stages instead of {old}: more K tiles in flight, if shared memory allows (the gate/up kernel loads three tiles per step)"),
    Knob("group_m", 2, (1, 4, 8, 16),
         "grouping {new} tile rows (was {old}) so programs that run together share weight tiles in L2"),
    Knob("exp2_sigmoid", 3, (True, False),
         "exp2_sigmoid={new} (was {old}): SiLU's sigmoid through exp2 with log2(e) folded in maps onto the ex2 instruction"),
    Knob("h_fp32", 3, (False, True),
         "h_fp32={new} (was {old}): keeping the intermediate activation in fp32 doubles its bytes but removes one rounding before the down projection"),
    Knob("interleaved", 4, (True, False),
         "interleaved={new} (was {old}): gate and up as one dot over their interleaved columns keeps a plain matmul's single accumulator and pipeline, where two accumulators and two dots per K step share each x tile but halve the tile each dot sees",
         ordered=False),
    Knob("tma", 5, (False, True),
         "tma={new} (was {old}): on Hopper, tensor-descriptor (TMA) loads give wgmma the weights' K-major tiles as they lie, with no address math or masks in the K loops",
         ordered=False),
    Knob("warp_specialize", 5, (False, True),
         "warp_specialize={new} (was {old}): on sm_90+, let Triton split producer and consumer warps in both K loops"),
)

DEFAULTS = {
    "block_m": 128,
    "block_n": 256,
    "block_k": 64,
    "num_warps": 8,
    "num_stages": 3,
    "group_m": 8,
    "exp2_sigmoid": True,
    "h_fp32": False,
    "interleaved": True,
    "tma": True,
    "warp_specialize": False,
}

def group_order(index: str) -> str:
    """Lines that place tile number `index` in group-M order (pid_m, pid_n), from num_pid_m and num_pid_n:
    GROUP_M tile rows at a time, so the programs that run together share B tiles in L2."""
    return fill(
        """
        num_pid_in_group = GROUP_M * num_pid_n
        group_id = <<index>> // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((<<index>> % num_pid_in_group) % group_size_m)
        pid_n = (<<index>> % num_pid_in_group) // group_size_m
        """,
        index=index,
    )


GROUP_M_SWIZZLE = fill(
    """
    # Group-M swizzle: programs that run together share B tiles in L2.
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    <<order>>
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    """,
    order=group_order("pid"),
)


_UPCAST = """
    if DOT_UPCAST:  # the CPU interpreter's dot mishandles bf16; never set on a GPU
        a = a.to(tl.float32)
        <<more>>
"""


_GATE_UP = """
@triton.jit
def _gate_up(
    x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_hm, stride_hn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    DOT_UPCAST: tl.constexpr, USE_TMA: tl.constexpr,
):
    <<body>>
"""


def _two_accumulators(sig: str, ws: str) -> str:
    """The gate/up kernel's body with one accumulator per projection (interleaved=False)."""
    return fill(
        """
            # h[m, n] = silu(x[m, :] . w_gate[n, :]) * (x[m, :] . w_up[n, :]); both weights share x's tile.
            <<swizzle>>
            acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for k in tl.range(0, K, BLOCK_K<<ws>>):
                offs_k = k + tl.arange(0, BLOCK_K)
                a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                            mask=(offs_m < M)[:, None] & (offs_k < K)[None, :], other=0.0)
                w_mask = (offs_k < K)[:, None] & (offs_n < N)[None, :]
                bg = tl.load(wg_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn, mask=w_mask, other=0.0)
                bu = tl.load(wu_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn, mask=w_mask, other=0.0)
                <<upcast>>
                acc_g = tl.dot(a, bg, acc_g)
                acc_u = tl.dot(a, bu, acc_u)
            g = acc_g
            h = g * <<sig>> * acc_u
            h_ptrs = h_ptr + offs_m[:, None] * stride_hm + offs_n[None, :] * stride_hn
            tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])
        """,
        swizzle=GROUP_M_SWIZZLE, ws=ws, sig=sig,
        upcast=fill(_UPCAST, more="bg = bg.to(tl.float32)\nbu = bu.to(tl.float32)"),
    )


# The descriptor kernels walk their tiles in a loop even though the grid has one program per tile:
# built by Triton 3.6 that form runs faster on Hopper than the same body straight from the program id
# (scripts/mlp_diag.py, numbers in docs/results/kernel_notes.md; the fused_mlp starter does the same).
def _tile_loop(body: str) -> str:
    """`body` run for each of this program's tiles (pid_m, pid_n) in group-M order."""
    return fill(
        """
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
            # Group-M order: programs that run together share weight tiles in L2.
            <<order>>
            <<body>>
        """,
        order=group_order("tile"), body=body,
    )


def _with_tma(tma_body: str, pointer_body: str) -> str:
    """A kernel body that takes the descriptor path when the launcher says USE_TMA, else the pointers."""
    return fill(
        """
        if USE_TMA:
            <<tma>>
        else:
            <<pointers>>
        """,
        tma=tma_body, pointers=pointer_body,
    )


def _gate_up_tma(p: dict, sig: str, ws: str) -> str:
    """The gate/up body over tensor descriptors: two accumulators of W columns each (W = BLOCK_N // 2
    when interleaved, whose BLOCK_N counts both; else BLOCK_N), tiles past an edge read as zeros."""
    half = "BLOCK_N // 2" if p["interleaved"] else "BLOCK_N"
    cols = "N // 2" if p["interleaved"] else "N"
    return fill(
        """
        W: tl.constexpr = <<half>>
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
        wg_desc = tl.make_tensor_descriptor(wg_ptr, shape=[<<cols>>, K], strides=[stride_wn, 1], block_shape=[W, BLOCK_K])
        wu_desc = tl.make_tensor_descriptor(wu_ptr, shape=[<<cols>>, K], strides=[stride_wn, 1], block_shape=[W, BLOCK_K])
        h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, <<cols>>], strides=[stride_hm, 1], block_shape=[BLOCK_M, W])
        <<loop>>
        """,
        loop=_tile_loop(fill(
            """
            acc_g = tl.zeros([BLOCK_M, W], dtype=tl.float32)
            acc_u = tl.zeros([BLOCK_M, W], dtype=tl.float32)
            for k in tl.range(0, K, BLOCK_K<<ws>>):
                # Each weight's load right before its dot: x and w_gate then complete on one barrier and
                # w_up on another, so the first wgmma need not wait for w_up (as in the starter).
                a = x_desc.load([pid_m * BLOCK_M, k])
                bg = wg_desc.load([pid_n * W, k]).T
                <<upcast>>
                acc_g = tl.dot(a, bg, acc_g)
                bu = wu_desc.load([pid_n * W, k]).T
                if DOT_UPCAST:
                    bu = bu.to(tl.float32)
                acc_u = tl.dot(a, bu, acc_u)
            g = acc_g
            h = g * <<sig>> * acc_u
            h_desc.store([pid_m * BLOCK_M, pid_n * W], h.to(h_desc.dtype))
            """,
            ws=ws, sig=sig, upcast=fill(_UPCAST, more="bg = bg.to(tl.float32)"))),
        half=half, cols=cols,
    )


def _kernels(p: dict) -> str:
    ws = ", warp_specialize=True" if p["warp_specialize"] else ""
    sig = ("1.0 / (1.0 + tl.exp2(-g * 1.4426950408889634))" if p["exp2_sigmoid"]
           else "1.0 / (1.0 + tl.exp(-g))")
    if p["interleaved"]:
        body = fill(
            """
                # N = 2 * intermediate columns taken in turn: column c is w_gate[c // 2] (even c) or w_up[c // 2] (odd c).
                <<swizzle>>
                cols = offs_n // 2
                is_up = (offs_n % 2) == 1
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for k in tl.range(0, K, BLOCK_K<<ws>>):
                    offs_k = k + tl.arange(0, BLOCK_K)
                    a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                                mask=(offs_m < M)[:, None] & (offs_k < K)[None, :], other=0.0)
                    w_offs = offs_k[:, None] * stride_wk + cols[None, :] * stride_wn
                    b = tl.load(tl.where(is_up[None, :], wu_ptr + w_offs, wg_ptr + w_offs),
                                mask=(offs_k < K)[:, None] & (offs_n < N)[None, :], other=0.0)
                    <<upcast>>
                    acc = tl.dot(a, b, acc)
                g, u = tl.split(tl.reshape(acc, [BLOCK_M, BLOCK_N // 2, 2]))
                h = g * <<sig>> * u
                offs_h = pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
                h_ptrs = h_ptr + offs_m[:, None] * stride_hm + offs_h[None, :] * stride_hn
                tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & (offs_h < N // 2)[None, :])
            """,
            swizzle=GROUP_M_SWIZZLE, ws=ws, sig=sig,
            upcast=fill(_UPCAST, more="b = b.to(tl.float32)"),
        )
    else:
        body = _two_accumulators(sig, ws)
    if p["tma"]:
        body = _with_tma(_gate_up_tma(p, sig, ws), body)
    gate_up = fill(_GATE_UP, body=body)
    pointer_loop = fill(
        """
        <<swizzle>>
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in tl.range(0, K, BLOCK_K<<ws>>):
            offs_k = k + tl.arange(0, BLOCK_K)
            a = tl.load(h_ptr + offs_m[:, None] * stride_hm + offs_k[None, :] * stride_hk,
                        mask=(offs_m < M)[:, None] & (offs_k < K)[None, :], other=0.0)
            b = tl.load(wd_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                        mask=(offs_k < K)[:, None] & (offs_n < N)[None, :], other=0.0)
            <<upcast>>
            if H_FP32:  # an fp32 intermediate meets the weights in fp32
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])
        """,
        swizzle=GROUP_M_SWIZZLE, ws=ws, upcast=fill(_UPCAST, more="b = b.to(tl.float32)"),
    )
    down_body = pointer_loop
    if p["tma"]:
        tma_loop = fill(
            """
            h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, K], strides=[stride_hm, 1], block_shape=[BLOCK_M, BLOCK_K])
            w_desc = tl.make_tensor_descriptor(wd_ptr, shape=[N, K], strides=[stride_wn, 1], block_shape=[BLOCK_N, BLOCK_K])
            y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[stride_ym, 1], block_shape=[BLOCK_M, BLOCK_N])
            <<loop>>
            """,
            loop=_tile_loop(fill(
                """
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for k in tl.range(0, K, BLOCK_K<<ws>>):
                    a = h_desc.load([pid_m * BLOCK_M, k])
                    b = w_desc.load([pid_n * BLOCK_N, k]).T
                    <<upcast>>
                    if H_FP32:  # an fp32 intermediate meets the weights in fp32
                        b = b.to(tl.float32)
                    acc = tl.dot(a, b, acc)
                y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(y_desc.dtype))
                """,
                ws=ws, upcast=fill(_UPCAST, more="b = b.to(tl.float32)"))),
        )
        down_body = _with_tma(tma_loop, pointer_loop)
    down = fill(
        """
        @triton.jit
        def _down(
            h_ptr, wd_ptr, y_ptr, M, N, K,
            stride_hm, stride_hk, stride_wn, stride_wk, stride_ym, stride_yn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
            DOT_UPCAST: tl.constexpr, H_FP32: tl.constexpr, USE_TMA: tl.constexpr,
        ):
            # y[m, n] = h[m, :] . w_down[n, :]
            <<body>>
        """,
        body=down_body,
    )
    return gate_up + "\n\n\n" + down


def _use_tma(p: dict) -> str:
    """The launcher's test for the descriptor path: 16-bit inputs (fp32 tiles would not fit the
    pipeline's shared memory) whose tensors all pass _tma_ready, tiles at least 16 bytes wide."""
    if not p["tma"]:
        return "False"
    narrowest = min(p["block_k"], p["block_n"] // 2 if p["interleaved"] else p["block_n"])
    return f"x.dtype != torch.float32 and _tma_ready(x2, w_gate, w_up, w_down, h, y, block_cols={narrowest})"


def _launcher(p: dict) -> str:
    h_dtype = "torch.float32" if p["h_fp32"] else "x.dtype"
    return fill(
        '''
        def kernel_fn(x, w_gate, w_up, w_down):
            """(silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T; weights [out, in]; output in x's dtype."""
            hidden = x.shape[-1]
            x2 = x.reshape(-1, hidden)
            tokens, inter = x2.shape[0], w_gate.shape[0]
            h = torch.empty((tokens, inter), dtype=<<h_dtype>>, device=x.device)
            y = torch.empty((tokens, w_down.shape[0]), dtype=x.dtype, device=x.device)
            if tokens == 0:
                return y.reshape(*x.shape[:-1], w_down.shape[0])
            if w_up.stride() != w_gate.stride():  # the kernel walks both weights with one set of strides
                w_gate, w_up = w_gate.contiguous(), w_up.contiguous()
            upcast = _INTERPRETED and x.dtype == torch.bfloat16
            use_tma = <<use_tma>>
            opts = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                        DOT_UPCAST=upcast, USE_TMA=use_tma, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
            n_gu = 2 * inter if INTERLEAVED else inter  # interleaved: gate and up columns in turn
            grid = (triton.cdiv(tokens, BLOCK_M) * triton.cdiv(n_gu, BLOCK_N),)
            _gate_up[grid](
                x2, w_gate, w_up, h, tokens, n_gu, hidden,
                x2.stride(0), x2.stride(1), w_gate.stride(0), w_gate.stride(1), h.stride(0), h.stride(1), **opts,
            )
            grid = (triton.cdiv(tokens, BLOCK_M) * triton.cdiv(w_down.shape[0], BLOCK_N),)
            _down[grid](
                h, w_down, y, tokens, w_down.shape[0], inter,
                h.stride(0), h.stride(1), w_down.stride(0), w_down.stride(1), y.stride(0), y.stride(1),
                H_FP32=h.dtype != x.dtype, **opts,
            )
            return y.reshape(*x.shape[:-1], w_down.shape[0])
        ''',
        h_dtype=h_dtype, use_tma=_use_tma(p),
    )


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default)."""
    p = {**DEFAULTS, **params}
    return join(
        '"""Fused-MLP candidate written by the playbook agent from its template (autokernel)."""',
        IMPORTS,
        knob_header(SPACE, p),
        INTERPRETER_NOTE,
        TMA_READY if p["tma"] else None,
        _kernels(p),
        _launcher(p),
    )

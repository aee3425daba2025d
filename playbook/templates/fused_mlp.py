"""Fused MLP template: (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T, weights in nn.Linear layout.

Compute-bound at LLM sizes. Two kernels: the first computes the gate and up projections of the
same x tile and applies SiLU x up in its epilogue, so the [tokens, intermediate] activation is
written once; the second is the down projection. With INTERLEAVED (the default) the first is one
matmul over the gate and up columns taken in turn (gate j, up j, ...; BLOCK_N counts both), one dot per
K step as in a plain matmul, and the epilogue splits the pairs; without it, two accumulators and two
dots per step (on the H100 that form reached 0.82-0.92x the eager SwiGLU, the interleaved starter
0.88-1.03x).
"""

from __future__ import annotations

from . import Knob, knob_header
from ._source import IMPORTS, INTERPRETER_NOTE, fill, join
from .matmul import GROUP_M_SWIZZLE

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
    "warp_specialize": False,
}

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
    DOT_UPCAST: tl.constexpr,
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
    gate_up = fill(_GATE_UP, body=body)
    down = fill(
        """
        @triton.jit
        def _down(
            h_ptr, wd_ptr, y_ptr, M, N, K,
            stride_hm, stride_hk, stride_wn, stride_wk, stride_ym, stride_yn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
            DOT_UPCAST: tl.constexpr, H_FP32: tl.constexpr,
        ):
            # y[m, n] = h[m, :] . w_down[n, :]
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
    return gate_up + "\n\n\n" + down


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
            upcast = _INTERPRETED and x.dtype == torch.bfloat16
            opts = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                        DOT_UPCAST=upcast, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
            n_gu = 2 * inter if INTERLEAVED else inter  # interleaved: gate and up columns in turn
            grid = (triton.cdiv(tokens, BLOCK_M) * triton.cdiv(n_gu, BLOCK_N),)
            if w_up.stride() != w_gate.stride():  # the kernel walks both weights with one set of strides
                w_gate, w_up = w_gate.contiguous(), w_up.contiguous()
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
        h_dtype=h_dtype,
    )


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default)."""
    p = {**DEFAULTS, **params}
    return join(
        '"""Fused-MLP candidate written by the playbook agent from its template (autokernel)."""',
        IMPORTS,
        knob_header(SPACE, p),
        INTERPRETER_NOTE,
        _kernels(p),
        _launcher(p),
    )

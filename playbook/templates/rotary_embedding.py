"""Rotary embedding template: x * cos + rotate_half(x) * sin, x [B, H, S, D], cos/sin [S, D].

Memory-bound: the floor is one read and one write of x plus one read of cos and sin. A program
owns BLOCK_S positions of HEADS heads: cos and sin are loaded once and reused across the heads.
Even head dims load each half of x once and write both output halves from it; odd ones use a
gather of the partner element (any D is correct).
"""

from __future__ import annotations

from . import Knob, knob_header
from ._rowwise import AUTOTUNE
from ._source import IMPORTS, INTERPRETER_NOTE, autotune_decorator, eviction_arg, fill, join

KERNEL = "rotary_embedding"
METRIC = "GB/s"

SPACE = (
    Knob("num_warps", 1, (1, 2, 4, 8, 16),
         "{new} warps instead of {old} change how many loads of the [positions, {head_dim}] tile are in flight per program"),
    Knob("block_s", 1, (1, 2, 4, 8, 16, 32, 64),
         "{new} positions per program instead of {old}: larger tiles give each program more bytes in flight over {seq} positions, smaller ones more programs"),
    Knob("load_eviction", 2, ("", "evict_first", "evict_last"),
         "eviction hint {new!r} on x (was {old!r}): x is streamed once, while cos and sin are reused by every batch and head", ordered=False),
    Knob("cs_eviction", 2, ("", "evict_last"),
         "eviction hint {new!r} on cos/sin (was {old!r}): keep the {seq}x{head_dim} tables in L2 for the other batches and heads", ordered=False),
    Knob("acc_fp32", 3, (True, False),
         "acc_fp32={new} (was {old}): the rotation in the input dtype saves conversions; the harness decides whether it is still accurate"),
    AUTOTUNE,
    Knob("heads_per_program", 6, (1, 2, 4, 8, 16),
         "{new} heads per program instead of {old} reuse each loaded cos/sin tile {new} times ({heads} heads share the same positions)"),
    Knob("split_halves", 6, (True, False),
         "split_halves={new} (was {old}): loading each half of the head once and writing both output halves from it avoids a second, gathered load of x"),
)

DEFAULTS = {
    "num_warps": 4,
    "block_s": 8,
    "load_eviction": "evict_first",
    "cs_eviction": "evict_last",
    "acc_fp32": True,
    "autotune": False,
    "heads_per_program": 4,
    "split_halves": True,
}


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    out = dict(params)
    if params["autotune"]:
        out["num_warps"] = None
    if dtype == "fp32":
        out["acc_fp32"] = None  # fp32 inputs are rotated in fp32 either way
    return out


def _kernel(p: dict) -> str:
    ev = eviction_arg(p["load_eviction"])
    cev = eviction_arg(p["cs_eviction"])
    f = ".to(tl.float32)" if p["acc_fp32"] else ""
    kernel = fill(
        """
        @triton.jit
        def _rotary(
            x_ptr, cos_ptr, sin_ptr, y_ptr, n_heads, n_bh, seq, head_dim,
            sxb, sxh, sxs, syb, syh, sys_, scs,
            BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, HEADS: tl.constexpr, HALVES: tl.constexpr,
        ):
            pos = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
            d = tl.arange(0, BLOCK_D)
            pos_mask = pos < seq
            cs_rows = pos.to(tl.int64)[:, None] * scs
            if HALVES:
                # Even head dim: d runs over one half; each half of x is loaded once.
                half = head_dim // 2
                m = pos_mask[:, None] & (d < half)[None, :]
                cos1 = tl.load(cos_ptr + cs_rows + d[None, :], mask=m, other=0.0<<cev>>)<<f>>
                cos2 = tl.load(cos_ptr + cs_rows + half + d[None, :], mask=m, other=0.0<<cev>>)<<f>>
                sin1 = tl.load(sin_ptr + cs_rows + d[None, :], mask=m, other=0.0<<cev>>)<<f>>
                sin2 = tl.load(sin_ptr + cs_rows + half + d[None, :], mask=m, other=0.0<<cev>>)<<f>>
            else:
                # Any head dim: element i pairs with i + h (negated) or i - (D - h), h = D // 2.
                h = head_dim // 2
                first = d < head_dim - h
                partner = tl.where(first, d + h, d - (head_dim - h))
                sign = tl.where(first, -1.0, 1.0)
                m = pos_mask[:, None] & (d < head_dim)[None, :]
                cos = tl.load(cos_ptr + cs_rows + d[None, :], mask=m, other=0.0<<cev>>)<<f>>
                sin = tl.load(sin_ptr + cs_rows + d[None, :], mask=m, other=0.0<<cev>>)<<f>>
            for i in range(HEADS):
                bh = tl.program_id(1) * HEADS + i
                if bh < n_bh:
                    b = bh // n_heads
                    hh = bh % n_heads
                    x_rows = x_ptr + b.to(tl.int64) * sxb + hh.to(tl.int64) * sxh + pos.to(tl.int64)[:, None] * sxs
                    y_rows = y_ptr + b.to(tl.int64) * syb + hh.to(tl.int64) * syh + pos.to(tl.int64)[:, None] * sys_
                    if HALVES:
                        x1 = tl.load(x_rows + d[None, :], mask=m, other=0.0<<ev>>)<<f>>
                        x2 = tl.load(x_rows + half + d[None, :], mask=m, other=0.0<<ev>>)<<f>>
                        tl.store(y_rows + d[None, :], (x1 * cos1 - x2 * sin1).to(y_ptr.dtype.element_ty), mask=m)
                        tl.store(y_rows + half + d[None, :], (x2 * cos2 + x1 * sin2).to(y_ptr.dtype.element_ty), mask=m)
                    else:
                        x = tl.load(x_rows + d[None, :], mask=m, other=0.0<<ev>>)<<f>>
                        xp = tl.load(x_rows + partner[None, :], mask=m, other=0.0<<ev>>)<<f>>
                        tl.store(y_rows + d[None, :], (x * cos + sign[None, :] * xp * sin).to(y_ptr.dtype.element_ty), mask=m)
        """,
        ev=ev, cev=cev, f=f,
    )
    if p["autotune"]:
        kernel = autotune_decorator(
            "[triton.Config({}, num_warps=w) for w in (4, 2, 8)]", '["head_dim", "BLOCK_S", "HEADS"]'
        ) + "\n" + kernel
    return kernel


def _launcher(p: dict) -> str:
    launch = "" if p["autotune"] else ", num_warps=NUM_WARPS"
    return fill(
        '''
        def kernel_fn(x, cos, sin):
            """x * cos + rotate_half(x) * sin for x [B, H, S, D] and cos/sin [S, D]; output in x's dtype."""
            batch, heads, seq, head_dim = x.shape
            if x.stride(-1) != 1:
                x = x.contiguous()
            cos = cos.reshape(seq, head_dim).contiguous()
            sin = sin.reshape(seq, head_dim).contiguous()
            y = torch.empty_like(x)  # x's layout, as PyTorch's elementwise ops keep it (a transposed q stays so)
            if y.numel() == 0:
                return y
            halves = SPLIT_HALVES and head_dim % 2 == 0
            block_d = triton.next_power_of_2(head_dim // 2 if halves else head_dim)
            grid = (triton.cdiv(seq, BLOCK_S), triton.cdiv(batch * heads, HEADS_PER_PROGRAM))
            _rotary[grid](
                x, cos, sin, y, heads, batch * heads, seq, head_dim,
                x.stride(0), x.stride(1), x.stride(2), y.stride(0), y.stride(1), y.stride(2), cos.stride(0),
                BLOCK_S=BLOCK_S, BLOCK_D=block_d, HEADS=HEADS_PER_PROGRAM, HALVES=halves<<launch>>,
            )
            return y
        ''',
        launch=launch,
    )


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default)."""
    p = {**DEFAULTS, **params}
    return join(
        '"""Rotary-embedding candidate written by the playbook agent from its template (autokernel)."""',
        IMPORTS,
        knob_header(SPACE, p),
        INTERPRETER_NOTE if p["autotune"] else None,
        _kernel(p),
        _launcher(p),
    )

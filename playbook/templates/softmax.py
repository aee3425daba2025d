"""Softmax template: softmax over the last dim of a 2-D view, fp32 math, output in x's dtype.

Memory-bound: the floor is one read of x and one write of y. Whole rows stay in registers
(one read); rows wider than the tile cap are looped either with an online max/sum (two reads)
or the classic max, sum, write passes (three reads).
"""

from __future__ import annotations

from . import Knob, knob_header
from ._rowwise import (AUTOTUNE, LOAD_EVICTION, NUM_STAGES, NUM_WARPS, PERSISTENT, ROWS_PER_PROGRAM, TMA,
                       effective_rowwise, grid_expr, launch_opts, max_block_knob, row_loop)
from ._source import IMPORTS, INTERPRETER_NOTE, NUM_SMS, TMA_READY, autotune_decorator, eviction_arg, fill, join

KERNEL = "softmax"
METRIC = "GB/s"

SPACE = (
    NUM_WARPS,
    NUM_STAGES,
    ROWS_PER_PROGRAM,
    PERSISTENT,
    LOAD_EVICTION,
    max_block_knob("max_block_n",
                   "capping a row tile at {new} elements instead of {old} switches between holding the whole {cols}-wide row in registers (one read of x) and looping over tiles (more reads, fewer registers)"),
    Knob("backwards", 2, (False, True),
         "backwards={new} (was {old}): the write pass over a looped {cols}-wide row starts at its last tile, the lines the first pass read most recently and so the likeliest still in L2 (H100, 1024x131072 with one program per SM: 0.231 ms backwards, 0.235 forwards)"),
    Knob("exp2", 3, (True, False),
         "exp2={new} (was {old}): exp(x - max) as exp2((x - max) * log2(e)) maps straight onto the hardware's ex2 instruction with the scale folded into one multiply"),
    Knob("online", 4, (True, False),
         "online={new} (was {old}): for rows wider than a tile, a running max with a rescaled running sum needs one pass over x before the write pass, instead of separate max and sum passes"),
    AUTOTUNE,
    TMA,
    Knob("reciprocal", 6, (True, False),
         "reciprocal={new} (was {old}): multiply every element by 1/sum computed once per row instead of dividing each element by the sum"),
)

DEFAULTS = {
    "num_warps": 8,
    "num_stages": 1,
    "max_block_n": 16384,
    "rows_per_program": 1,
    "persistent": 0,
    "load_eviction": "evict_first",
    "backwards": False,
    "exp2": True,
    "online": True,
    "autotune": False,
    "tma": False,
    "reciprocal": True,
}


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    cols = int(shape.get("cols", 0))
    out = effective_rowwise(params, cols, "max_block_n")
    if cols and cols <= out["max_block_n"]:
        out["online"] = None  # whole rows: no looping, nothing to do online
        out["backwards"] = None  # and no write pass to order
    return out


LOG2E_CONSTANT = 'LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) == exp2(x * LOG2E)'


def _exp(p: dict, arg: str) -> str:
    return f"tl.exp2(({arg}) * LOG2E)" if p["exp2"] else f"tl.exp({arg})"


def _normalise(p: dict, num: str, den: str) -> str:
    return f"{num} * (1.0 / {den})[:, None]" if p["reciprocal"] else f"{num} / {den}[:, None]"


def _kernel(p: dict) -> str:
    ev = eviction_arg(p["load_eviction"])
    whole_load = fill('x = tl.load(x_rows + cols[None, :], mask=mask, other=-float("inf")<<ev>>)', ev=ev)
    whole_store = "tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)"
    if p["tma"]:
        # Descriptor loads pad out-of-range columns with zeros, so those are masked to -inf after.
        whole_load = fill(
            """
            if USE_TMA:
                x = x_desc.load([first_row, 0])
                x = tl.where(mask, x.to(tl.float32), -float("inf"))
            else:
                <<load>>
            """,
            load=whole_load,
        )
        whole_store = fill(
            """
            if USE_TMA:
                y_desc.store([first_row, 0], y.to(y_ptr.dtype.element_ty))
            else:
                <<store>>
            """,
            store=whole_store,
        )
    tiled_load = fill('tl.load(x_rows + c[None, :], mask=mask, other=-float("inf")<<ev>>).to(tl.float32)', ev=ev)
    if p["online"]:
        first_passes = fill(
            """
            # One pass keeps a running max and a running sum rescaled whenever the max grows.
            m = tl.full([ROWS], -float("inf"), dtype=tl.float32)
            s = tl.zeros([ROWS], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                x = <<load>>
                m_new = tl.maximum(m, tl.max(x, axis=1))
                m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
                s = s * <<rescale>> + tl.sum(<<e>>, axis=1)
                m = m_new
            m_safe = tl.where(m == -float("inf"), 0.0, m)
            """,
            load=tiled_load,
            rescale=_exp(p, "m - m_safe"),
            e=_exp(p, "x - m_safe[:, None]"),
        )
    else:
        first_passes = fill(
            """
            # Pass 1: the row max. Pass 2: the sum of exponentials.
            m = tl.full([ROWS], -float("inf"), dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                m = tl.maximum(m, tl.max(<<load>>, axis=1))
            m_safe = tl.where(m == -float("inf"), 0.0, m)
            s = tl.zeros([ROWS], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                x = <<load>>
                s += tl.sum(<<e>>, axis=1)
            """,
            load=tiled_load,
            e=_exp(p, "x - m_safe[:, None]"),
        )
    body = fill(
        """
        first_row = row_block * ROWS
        rows = first_row + tl.arange(0, ROWS)
        row_mask = rows < n_rows
        x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
        y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_y
        if NUM_TILES == 1:
            # The whole row fits one tile: read x once, keep it in registers.
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            <<whole_load>>
            x = x.to(tl.float32)
            m = tl.max(x, axis=1)
            m = tl.where(m == -float("inf"), 0.0, m)  # rows past the end: keep them finite
            e = <<e_whole>>
            y = <<norm_whole>>
            <<whole_store>>
        else:
            <<first_passes>>
            for tile in range(0, NUM_TILES):
                c = <<tile_start>> * BLOCK_N + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                x = <<tiled_load>>
                e = <<e_tiled>>
                tl.store(y_rows + c[None, :], (<<norm_tiled>>).to(y_ptr.dtype.element_ty), mask=mask)
        """,
        whole_load=whole_load,
        whole_store=whole_store,
        e_whole=_exp(p, "x - m[:, None]"),
        norm_whole=_normalise(p, "e", "tl.sum(e, axis=1)"),
        first_passes=first_passes,
        tile_start="(NUM_TILES - 1 - tile)" if p["backwards"] else "tile",
        tiled_load=tiled_load,
        e_tiled=_exp(p, "x - m_safe[:, None]"),
        norm_tiled=_normalise(p, "e", "s"),
    )
    tma_setup = ""
    if p["tma"]:
        tma_setup = """
            if USE_TMA:
                x_desc = tl.make_tensor_descriptor(x_ptr, shape=[n_rows, n_cols], strides=[stride_x, 1], block_shape=[ROWS, BLOCK_N])
                y_desc = tl.make_tensor_descriptor(y_ptr, shape=[n_rows, n_cols], strides=[stride_y, 1], block_shape=[ROWS, BLOCK_N])
            """
    kernel = fill(
        """
        @triton.jit
        def _softmax_rows(
            x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y,
            BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_TILES: tl.constexpr, USE_TMA: tl.constexpr,
        ):
            cols = tl.arange(0, BLOCK_N)
            <<tma_setup>>
            <<loop>>
        """,
        tma_setup=tma_setup,
        loop=row_loop(body, bool(p["persistent"])),
    )
    if p["autotune"]:
        kernel = autotune_decorator(
            "[triton.Config({}, num_warps=w, num_stages=NUM_STAGES) for w in (8, 4, 16)]", '["n_cols", "ROWS"]'
        ) + "\n" + kernel
    return kernel


def _launcher(p: dict) -> str:
    return fill(
        '''
        _PLANS = {}  # (rows, columns, device index) -> (block_n, num_tiles, grid), at most MAX_PLANS
        MAX_PLANS = 256  # emptied when full: dynamic shapes never grow it without end


        def kernel_fn(x):
            """Softmax over the last dim of `x`; output in x's dtype. The tile and grid are the same at every
            call of a shape, so they are worked out once per shape (a launch-bound call pays for each line)."""
            n_cols = x.shape[-1]
            x2 = x if x.dim() == 2 else x.reshape(x.shape[:-1].numel(), n_cols)
            if x2.stride(-1) != 1:
                x2 = x2.contiguous()
            n_rows = x2.shape[0]
            y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
            if n_rows == 0 or n_cols == 0:
                return y.reshape(x.shape)
            key = (n_rows, n_cols, x.get_device())
            plan = _PLANS.get(key)
            if plan is None:
                if len(_PLANS) >= MAX_PLANS:
                    _PLANS.clear()
                block_n = min(triton.next_power_of_2(n_cols), MAX_BLOCK_N)
                n_blocks = triton.cdiv(n_rows, ROWS_PER_PROGRAM)
                plan = _PLANS[key] = (block_n, triton.cdiv(n_cols, block_n), <<grid>>)
            block_n, num_tiles, grid = plan
            _softmax_rows[grid](
                x2, y, n_rows, n_cols, x2.stride(0), n_cols,
                BLOCK_N=block_n, ROWS=ROWS_PER_PROGRAM, NUM_TILES=num_tiles,
                USE_TMA=<<use_tma>><<launch_opts>>,
            )
            return y if y.dim() == x.dim() else y.reshape(x.shape)
        ''',
        grid=grid_expr(bool(p["persistent"])),
        launch_opts=launch_opts(p["autotune"]),
        use_tma="TMA and num_tiles == 1 and _tma_ready(x2, y, block_cols=block_n)" if p["tma"] else "False",
    )


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default)."""
    p = {**DEFAULTS, **params}
    return join(
        '"""Softmax candidate written by the playbook agent from its template (autokernel)."""',
        IMPORTS,
        knob_header(SPACE, p),
        INTERPRETER_NOTE if p["autotune"] else None,
        LOG2E_CONSTANT if p["exp2"] else None,
        NUM_SMS if p["persistent"] else None,
        TMA_READY if p["tma"] else None,
        _kernel(p),
        _launcher(p),
    )

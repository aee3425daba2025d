"""LayerNorm template: y = (x - mean) * rsqrt(var + eps) * weight + bias over the last dim, fp32 math.

Memory-bound: the floor is one read of x and one write of y. Whole rows stay in registers (one
read, exact two-step mean and variance); wider rows are tiled, with either a pass per statistic
(three reads) or one pass for the sum and the sum of squares (two reads, less exact). Few, wide
rows are split into chunks over a 2-D grid (`split_rows`, `split_programs`): per-chunk Welford mean
and M2, merged by Chan's formula where each chunk is normalised (sound in fp32 for rows of millions).
"""

from __future__ import annotations

from . import Knob, knob_header
from ._rowwise import (AUTOTUNE, LOAD_EVICTION, NUM_STAGES, NUM_WARPS, PERSISTENT, ROWS_PER_PROGRAM, SPLIT_PLAN,
                       SPLIT_PROGRAMS, SPLIT_ROWS, TMA, chunk_walk, effective_rowwise, effective_split, grid_expr,
                       launch_opts, max_block_knob, row_loop)
from ._source import IMPORTS, INTERPRETER_NOTE, NUM_SMS, TMA_READY, autotune_decorator, eviction_arg, fill, join

KERNEL = "layernorm"
METRIC = "GB/s"

SPACE = (
    NUM_WARPS,
    NUM_STAGES,
    ROWS_PER_PROGRAM,
    PERSISTENT,
    LOAD_EVICTION,
    max_block_knob("max_block_n",
                   "capping a row tile at {new} elements instead of {old} switches between holding the whole {cols}-wide row in registers (one read) and looping over tiles (more reads, fewer registers)"),
    Knob("rsqrt", 3, (True, False),
         "rsqrt={new} (was {old}): one reciprocal square-root instruction vs a sqrt and a divide per row at the end of the reduction"),
    Knob("one_pass_stats", 4, (False, True),
         "one_pass_stats={new} (was {old}): for tiled rows, sum and sum of squares in the same pass (var = E[x^2] - mean^2) saves a read of x, at some cost in precision the harness will judge"),
    SPLIT_ROWS,
    SPLIT_PROGRAMS,
    AUTOTUNE,
    TMA,
    Knob("even_masks", 6, (False, True),
         "even_masks={new} (was {old}): when {cols} columns fill the tile exactly and rows divide evenly, loads and stores drop their masks"),
)

DEFAULTS = {
    "num_warps": 8,
    "num_stages": 1,
    "max_block_n": 8192,
    "rows_per_program": 1,
    "persistent": 0,
    "load_eviction": "evict_last",  # a little ahead of evict_first in the probes (docs/results/kernel_notes.md)
    "rsqrt": True,
    "one_pass_stats": False,
    "split_rows": 4,  # as the starter's split rule (kernels/layernorm/starter_triton.py)
    "split_programs": 8,
    "autotune": False,
    "tma": False,
    "even_masks": False,
}


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    cols = int(shape.get("cols", 0))
    out = effective_rowwise(params, cols, "max_block_n")
    if cols and cols <= out["max_block_n"]:
        out["one_pass_stats"] = None
    return effective_split(out, cols)


def _inv(p: dict) -> str:
    return "tl.rsqrt(var + eps)" if p["rsqrt"] else "1.0 / tl.sqrt(var + eps)"


def _kernel(p: dict) -> str:
    ev = eviction_arg(p["load_eviction"])
    inv = _inv(p)
    masked_load = fill("x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0<<ev>>)", ev=ev)
    masked_store = "tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)"
    whole_load, whole_store = masked_load, masked_store
    if p["even_masks"]:
        whole_load = fill(
            """
            if EVEN:
                x = tl.load(x_rows + cols[None, :]<<ev>>)
            else:
                <<masked>>
            """,
            ev=ev, masked=masked_load,
        )
        whole_store = fill(
            """
            if EVEN:
                tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty))
            else:
                <<masked>>
            """,
            masked=masked_store,
        )
    if p["tma"]:
        whole_load = fill(
            """
            if USE_TMA:
                x = x_desc.load([first_row, 0])
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
    tile_load = fill("tl.load(x_rows + c[None, :], mask=mask, other=0.0<<ev>>).to(tl.float32)", ev=ev)
    if p["one_pass_stats"]:
        stats = fill(
            """
            # One pass: sum and sum of squares together (var = E[x^2] - mean^2).
            acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
            acc_sq = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                x = <<load>>
                acc += x
                acc_sq += x * x
            mean = tl.sum(acc, axis=1) / n_cols
            var = tl.maximum(tl.sum(acc_sq, axis=1) / n_cols - mean * mean, 0.0)
            """,
            load=tile_load,
        )
    else:
        stats = fill(
            """
            # Pass 1: the mean. Pass 2: the variance around it (exact for rows with a large mean).
            acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                acc += <<load>>
            mean = tl.sum(acc, axis=1) / n_cols
            acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                xc = tl.where(mask, <<load>> - mean[:, None], 0.0)
                acc += xc * xc
            var = tl.sum(acc, axis=1) / n_cols
            """,
            load=tile_load,
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
            mean = tl.sum(x, axis=1) / n_cols
            xc = tl.where(mask, x - mean[:, None], 0.0)
            var = tl.sum(xc * xc, axis=1) / n_cols
            rstd = <<inv>>
            y = xc * rstd[:, None] * w[None, :] + b[None, :]
            <<whole_store>>
        else:
            <<stats>>
            rstd = <<inv>>
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                x = <<tile_load>>
                wt = tl.load(w_ptr + c, mask=c < n_cols, other=0.0, eviction_policy="evict_last").to(tl.float32)
                bt = tl.load(b_ptr + c, mask=c < n_cols, other=0.0, eviction_policy="evict_last").to(tl.float32)
                y = (x - mean[:, None]) * rstd[:, None] * wt[None, :] + bt[None, :]
                tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
        """,
        whole_load=whole_load,
        whole_store=whole_store,
        inv=inv,
        stats=stats,
        tile_load=tile_load,
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
        def _layernorm_rows(
            x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
            BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_TILES: tl.constexpr, EVEN: tl.constexpr, USE_TMA: tl.constexpr,
        ):
            cols = tl.arange(0, BLOCK_N)
            if NUM_TILES == 1:
                # Weight and bias are the same for every row: load them once per program, keep them in L2.
                w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last").to(tl.float32)
                b = tl.load(b_ptr + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last").to(tl.float32)
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


# Few, wide rows: one program per (row, chunk). Each lane keeps Welford's running mean and M2 of its
# elements; lanes, then chunks, are merged by Chan's formula for groups, so no sum is of raw squares
# (E[x^2] - mean^2 cancels in fp32 for rows with a large mean) and none runs over millions of terms.
def _split_kernels(inv: str) -> str:
    return fill(
        """
        @triton.jit
        def _layernorm_chunk_stats(x_ptr, mean_ptr, m2_ptr, n_cols, stride_x, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            chunk = tl.program_id(1)
            count = tl.zeros((BLOCK_N,), tl.float32)
            mean = tl.zeros((BLOCK_N,), tl.float32)
            m2 = tl.zeros((BLOCK_N,), tl.float32)
            <<stats_walk>>
            chunk_mean = tl.sum(mean * count, axis=0) / tl.sum(count, axis=0)
            d = mean - chunk_mean
            slot = row * tl.num_programs(1) + chunk
            tl.store(mean_ptr + slot, chunk_mean)
            tl.store(m2_ptr + slot, tl.sum(m2 + count * d * d, axis=0))


        @triton.jit
        def _layernorm_chunk_norm(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, m2_ptr, n_cols, stride_x, stride_y, eps,
                                  CHUNK: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            chunk = tl.program_id(1)
            # The row's chunk statistics (a few hundred values, from L2), merged.
            n_chunks = tl.num_programs(1)
            k = tl.arange(0, CHUNKS)
            k_ok = k < n_chunks
            stats = row * n_chunks + k
            means = tl.load(mean_ptr + stats, mask=k_ok, other=0.0)
            m2s = tl.load(m2_ptr + stats, mask=k_ok, other=0.0)
            counts = tl.where(k_ok, tl.minimum(n_cols - k * CHUNK, CHUNK), 0).to(tl.float32)
            mean = tl.sum(counts * means, axis=0) / n_cols
            d = means - mean
            var = tl.sum(m2s + counts * d * d, axis=0) / n_cols
            rstd = <<inv>>
            y_row = y_ptr + row * stride_y
            <<norm_walk>>
        """,
        stats_walk=chunk_walk(
            """
            count += ok.to(tl.float32)
            delta = tl.where(ok, x - mean, 0.0)
            # A lane holding an element at this step held one at every step before: its count is the step,
            # so one reciprocal per step serves all lanes.
            mean += delta * (1.0 / (start // BLOCK_N + 1.0))
            m2 += delta * tl.where(ok, x - mean, 0.0)
            """
        ),
        norm_walk=chunk_walk(
            """
            w = tl.load(w_ptr + idx, mask=ok, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + idx, mask=ok, other=0.0).to(tl.float32)
            tl.store(y_row + idx, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=ok)
            """,
            ', eviction_policy="evict_first"',
        ),
        inv=inv,
    )


SPLIT_LAUNCH = """
plan = _split_plan(n_rows, n_cols, x.device)
if plan is not None:
    chunks, chunk, block = plan
    means = torch.empty((n_rows, chunks), dtype=torch.float32, device=x.device)
    m2s = torch.empty_like(means)
    _layernorm_chunk_stats[(n_rows, chunks)](x2, means, m2s, n_cols, x2.stride(0), CHUNK=chunk, BLOCK_N=block,
                                            num_warps=NUM_WARPS)
    _layernorm_chunk_norm[(n_rows, chunks)](x2, w, b, y, means, m2s, n_cols, x2.stride(0), y.stride(0), eps,
                                           CHUNK=chunk, BLOCK_N=block, CHUNKS=triton.next_power_of_2(chunks),
                                           num_warps=NUM_WARPS)
    return y.reshape(x.shape)
"""


def _launcher(p: dict) -> str:
    return fill(
        '''
        def kernel_fn(x, weight, bias, eps=1e-5):
            """LayerNorm over the last dim of `x` with `weight` and `bias` (either may be None); output in x's dtype."""
            n_cols = x.shape[-1]
            x2 = x.reshape(x.shape[:-1].numel(), n_cols)
            if x2.stride(-1) != 1:
                x2 = x2.contiguous()
            w = weight.contiguous() if weight is not None else torch.ones(n_cols, dtype=x.dtype, device=x.device)
            b = bias.contiguous() if bias is not None else torch.zeros(n_cols, dtype=x.dtype, device=x.device)
            y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
            n_rows = x2.shape[0]
            if n_rows == 0 or n_cols == 0:
                return y.reshape(x.shape)
            <<split>>
            block_n = min(triton.next_power_of_2(n_cols), MAX_BLOCK_N)
            num_tiles = triton.cdiv(n_cols, block_n)
            n_blocks = triton.cdiv(n_rows, ROWS_PER_PROGRAM)
            grid = <<grid>>
            _layernorm_rows[grid](
                x2, w, b, y, n_rows, n_cols, x2.stride(0), y.stride(0), eps,
                BLOCK_N=block_n, ROWS=ROWS_PER_PROGRAM, NUM_TILES=num_tiles,
                EVEN=<<even>>, USE_TMA=<<use_tma>><<launch_opts>>,
            )
            return y.reshape(x.shape)
        ''',
        split=SPLIT_LAUNCH if p["split_rows"] else "",
        grid=grid_expr(bool(p["persistent"])),
        launch_opts=launch_opts(p["autotune"]),
        use_tma="TMA and num_tiles == 1 and _tma_ready(x2, y, block_cols=block_n)" if p["tma"] else "False",
        even="(n_cols == block_n and n_rows % ROWS_PER_PROGRAM == 0)" if p["even_masks"] else "False",
    )


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default)."""
    p = {**DEFAULTS, **params}
    return join(
        '"""LayerNorm candidate written by the playbook agent from its template (autokernel)."""',
        IMPORTS,
        knob_header(SPACE, p),
        INTERPRETER_NOTE if p["autotune"] else None,
        NUM_SMS if p["persistent"] or p["split_rows"] else None,
        SPLIT_PLAN if p["split_rows"] else None,
        TMA_READY if p["tma"] else None,
        _kernel(p),
        _split_kernels(_inv(p)) if p["split_rows"] else None,
        _launcher(p),
    )

"""RMSNorm template: y = x * rsqrt(mean(x^2, -1) + eps) * weight, fp32 math, rows of a 2-D view.

Memory-bound: the floor is one read of x and one write of y. The space covers warps and stages,
rows per program, whole-row vs tiled loads, persistent grids, cache hints, rsqrt, accumulation
precision, autotune, Hopper tensor descriptors and mask elision on even shapes, and the split of few,
wide rows into chunks over a 2-D grid (per-chunk sums of squares, added where each chunk is scaled).
"""

from __future__ import annotations

from . import Knob, knob_header
from ._rowwise import SPLIT_PLAN, SPLIT_PROGRAMS, SPLIT_ROWS, chunk_walk, effective_rowwise, effective_split
from ._source import IMPORTS, INTERPRETER_NOTE, NUM_SMS, TMA_READY, autotune_decorator, eviction_arg, fill, join

KERNEL = "rmsnorm"
METRIC = "GB/s"

SPACE = (
    Knob("num_warps", 1, (1, 2, 4, 8, 16, 32),
         "{new} warps instead of {old} split a {cols}-wide row over more threads: more loads in flight per row and fewer values per thread, so latency is hidden better",
         why_down="{new} warps instead of {old}: each thread holds more of the {cols}-wide row and issues wider, fewer loads, and small rows stop wasting idle threads"),
    Knob("num_stages", 1, (1, 2, 3, 4),
         "{new} pipeline stages instead of {old} let the compiler prefetch the next tile of a looped row (or the next row of a persistent program) while this one is reduced"),
    Knob("rows_per_program", 2, (1, 2, 4, 8),
         "{new} rows per program instead of {old} reuse the weight load across rows and give each program more bytes in flight; {rows} rows keep the grid full either way"),
    Knob("persistent", 2, (0, 1, 2, 4, 8),
         "a persistent grid of {new} programs per SM (0 = one program per row block; was {old}) removes launch tail effects over {rows} rows and loads the weight once per program"),
    Knob("load_eviction", 2, ("", "evict_first", "evict_last"),
         "eviction hint {new!r} on the x loads (was {old!r}): which lines the L2 gives up first decides how the y stores, the weight and a second pass over a tiled row share it; on the H100 'evict_last' measured 1-2% faster than 'evict_first' for one-pass rows", ordered=False),
    Knob("max_block_n", 2, (1024, 2048, 4096, 8192, 16384, 32768),
         "capping a row tile at {new} elements instead of {old} switches between holding the whole {cols}-wide row in registers (one read) and looping over tiles (two reads, lower register pressure)"),
    Knob("rsqrt", 3, (True, False),
         "rsqrt={new} (was {old}): one reciprocal square-root instruction vs a sqrt and a divide per row; small, but it shortens the dependent chain at the end of the reduction"),
    Knob("acc_fp32", 3, (True, False),
         "acc_fp32={new} (was {old}): squaring and summing in the input dtype saves conversions but may lose precision; the harness decides whether it is still correct"),
    SPLIT_ROWS,
    SPLIT_PROGRAMS,
    Knob("autotune", 4, (False, True),
         "autotune={new} (was {old}): let triton.autotune pick num_warps per row width at run time instead of the fixed NUM_WARPS"),
    Knob("tma", 5, (False, True),
         "tma={new} (was {old}): on Hopper, tensor-descriptor (TMA) loads of the [rows, {cols}] block move the address arithmetic off the threads"),
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
    "acc_fp32": True,
    "split_rows": 4,  # as the starter's split rule (kernels/rmsnorm/starter_triton.py)
    "split_programs": 8,
    "autotune": False,
    "tma": False,
    "even_masks": False,
}


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    """Params as they act at `shape`: a tile cap above the row width is the same as whole-row,
    and fp32 inputs are accumulated in fp32 either way."""
    out = effective_rowwise(params, int(shape.get("cols", 0)), "max_block_n")
    if dtype == "fp32":
        out["acc_fp32"] = None
    return effective_split(out, int(shape.get("cols", 0)))


def _kernel(p: dict) -> str:
    ev = eviction_arg(p["load_eviction"])
    acc = ".to(tl.float32)" if p["acc_fp32"] else ""
    acc_line = "x = x.to(tl.float32)" if p["acc_fp32"] else ""
    square_sum = "tl.sum(x * x, axis=1)" if p["acc_fp32"] else "tl.sum(x * x, axis=1).to(tl.float32)"
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
            <<acc_line>>
            inv_rms = <<inv_whole>>
            y = x.to(tl.float32) * inv_rms[:, None] * w[None, :]
            <<whole_store>>
        else:
            # Wider than one tile: sum squares tile by tile, then read x again to scale it.
            acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                x = tl.load(x_rows + c[None, :], mask=mask, other=0.0<<ev>>)<<acc>>
                acc += (x * x).to(tl.float32)
            inv_rms = <<inv_tiled>>
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                x = tl.load(x_rows + c[None, :], mask=mask, other=0.0<<ev>>).to(tl.float32)
                wt = tl.load(w_ptr + c, mask=c < n_cols, other=0.0, eviction_policy="evict_last").to(tl.float32)
                tl.store(y_rows + c[None, :], (x * inv_rms[:, None] * wt[None, :]).to(y_ptr.dtype.element_ty), mask=mask)
        """,
        whole_load=whole_load,
        whole_store=whole_store,
        acc=acc,
        acc_line=acc_line,
        ev=ev,
        inv_whole=fill(inv, ms=square_sum + " / n_cols"),
        inv_tiled=fill(inv, ms="tl.sum(acc, axis=1) / n_cols"),
    )
    if p["persistent"]:
        loop = fill(
            """
            for row_block in range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
                <<body>>
            """,
            body=body,
        )
    else:
        loop = fill(
            """
            row_block = tl.program_id(0)
            <<body>>
            """,
            body=body,
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
        def _rmsnorm_rows(
            x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
            BLOCK_N: tl.constexpr, ROWS: tl.constexpr, NUM_TILES: tl.constexpr, EVEN: tl.constexpr, USE_TMA: tl.constexpr,
        ):
            cols = tl.arange(0, BLOCK_N)
            if NUM_TILES == 1:
                # The weight is the same for every row: load it once per program, keep it in L2.
                w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last").to(tl.float32)
            <<tma_setup>>
            <<loop>>
        """,
        tma_setup=tma_setup,
        loop=loop,
    )
    if p["autotune"]:
        kernel = autotune_decorator(
            "[triton.Config({}, num_warps=w, num_stages=NUM_STAGES) for w in (8, 4, 16)]", '["n_cols", "ROWS"]'
        ) + "\n" + kernel
    return kernel


# Few, wide rows: one program per (row, chunk); squares are non-negative, so fp32 partials summed per
# lane and then per chunk lose nothing to cancellation.
def _split_kernels(inv: str) -> str:
    return fill(
        """
        @triton.jit
        def _rmsnorm_chunk_squares(x_ptr, sq_ptr, n_cols, stride_x, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            chunk = tl.program_id(1)
            acc = tl.zeros((BLOCK_N,), tl.float32)
            <<squares_walk>>
            tl.store(sq_ptr + row * tl.num_programs(1) + chunk, tl.sum(acc, axis=0))


        @triton.jit
        def _rmsnorm_chunk_scale(x_ptr, w_ptr, y_ptr, sq_ptr, n_cols, stride_x, stride_y, eps,
                                 CHUNK: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            chunk = tl.program_id(1)
            # The row's partial sums of squares (a few hundred values, from L2), added.
            n_chunks = tl.num_programs(1)
            k = tl.arange(0, CHUNKS)
            partials = tl.load(sq_ptr + row * n_chunks + k, mask=k < n_chunks, other=0.0)
            inv_rms = <<inv>>
            y_row = y_ptr + row * stride_y
            <<scale_walk>>
        """,
        squares_walk=chunk_walk("acc += x * x"),
        scale_walk=chunk_walk(
            """
            w = tl.load(w_ptr + idx, mask=ok, other=0.0).to(tl.float32)
            tl.store(y_row + idx, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=ok)
            """,
            ', eviction_policy="evict_first"',
        ),
        inv=inv,
    )


SPLIT_LAUNCH = """
plan = _split_plan(n_rows, n_cols, x.device)
if plan is not None:
    chunks, chunk, block = plan
    squares = torch.empty((n_rows, chunks), dtype=torch.float32, device=x.device)
    _rmsnorm_chunk_squares[(n_rows, chunks)](x2, squares, n_cols, x2.stride(0), CHUNK=chunk, BLOCK_N=block,
                                            num_warps=NUM_WARPS)
    _rmsnorm_chunk_scale[(n_rows, chunks)](x2, w, y, squares, n_cols, x2.stride(0), y.stride(0), eps,
                                          CHUNK=chunk, BLOCK_N=block, CHUNKS=triton.next_power_of_2(chunks),
                                          num_warps=NUM_WARPS)
    return y.reshape(x.shape)
"""


def _inv(p: dict) -> str:
    return "tl.rsqrt(<<ms>> + eps)" if p["rsqrt"] else "1.0 / tl.sqrt(<<ms>> + eps)"


def _launcher(p: dict) -> str:
    grid = "(min(n_blocks, PERSISTENT * _num_sms(x.device)),)" if p["persistent"] else "(n_blocks,)"
    launch_opts = "" if p["autotune"] else ", num_warps=NUM_WARPS, num_stages=NUM_STAGES"
    use_tma = "TMA and num_tiles == 1 and _tma_ready(x2, y, block_cols=block_n)" if p["tma"] else "False"
    even = "(n_cols == block_n and n_rows % ROWS_PER_PROGRAM == 0)" if p["even_masks"] else "False"
    return fill(
        '''
        def kernel_fn(x, weight, eps=1e-6):
            """RMSNorm over the last dim of `x`, scaled by `weight` (may be None); output in x's dtype."""
            n_cols = x.shape[-1]
            x2 = x.reshape(x.shape[:-1].numel(), n_cols)
            if x2.stride(-1) != 1:
                x2 = x2.contiguous()
            w = weight.contiguous() if weight is not None else torch.ones(n_cols, dtype=x.dtype, device=x.device)
            y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
            n_rows = x2.shape[0]
            if n_rows == 0 or n_cols == 0:
                return y.reshape(x.shape)
            <<split>>
            block_n = min(triton.next_power_of_2(n_cols), MAX_BLOCK_N)
            num_tiles = triton.cdiv(n_cols, block_n)
            n_blocks = triton.cdiv(n_rows, ROWS_PER_PROGRAM)
            grid = <<grid>>
            _rmsnorm_rows[grid](
                x2, w, y, n_rows, n_cols, x2.stride(0), y.stride(0), eps,
                BLOCK_N=block_n, ROWS=ROWS_PER_PROGRAM, NUM_TILES=num_tiles,
                EVEN=<<even>>, USE_TMA=<<use_tma>><<launch_opts>>,
            )
            return y.reshape(x.shape)
        ''',
        split=SPLIT_LAUNCH if p["split_rows"] else "",
        grid=grid,
        launch_opts=launch_opts,
        use_tma=use_tma,
        even=even,
    )


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default)."""
    p = {**DEFAULTS, **params}
    doc = '"""RMSNorm candidate written by the playbook agent from its template (autokernel)."""'
    split = bool(p["split_rows"])
    helpers = [NUM_SMS if p["persistent"] or split else None, SPLIT_PLAN if split else None,
               TMA_READY if p["tma"] else None]
    return join(
        doc,
        IMPORTS,
        knob_header(SPACE, p),
        INTERPRETER_NOTE if p["autotune"] else None,
        *helpers,
        _kernel(p),
        _split_kernels(fill(_inv(p), ms="tl.sum(partials, axis=0) / n_cols")) if split else None,
        _launcher(p),
    )

"""Reduce template: x.sum(-1) with fp32 accumulation, output in x's dtype.

Memory-bound: the floor is one read of x. Rows are summed in tiles into a [ROWS, BLOCK_N]
accumulator; very long rows can be split across programs, whose partial sums a second kernel
adds in a fixed order (deterministic, no atomics).
"""

from __future__ import annotations

from . import Knob, knob_header
from ._rowwise import (AUTOTUNE, LOAD_EVICTION, NUM_STAGES, NUM_WARPS, PERSISTENT, ROWS_PER_PROGRAM,
                       effective_rowwise, grid_expr, launch_opts, max_block_knob, row_loop)
from ._source import IMPORTS, INTERPRETER_NOTE, NUM_SMS, autotune_decorator, eviction_arg, fill, join

KERNEL = "reduce"
METRIC = "GB/s"

SPACE = (
    NUM_WARPS,
    NUM_STAGES,
    ROWS_PER_PROGRAM,
    PERSISTENT,
    LOAD_EVICTION,
    max_block_knob("max_block_n",
                   "a tile of at most {new} elements instead of {old} changes how many loads each loop step issues per row of {cols} and how many registers the accumulator takes"),
    Knob("acc_fp32", 3, (True, False),
         "acc_fp32={new} (was {old}): accumulating in the input dtype saves conversions but loses precision on long rows; the harness decides"),
    Knob("split", 4, (1, 2, 4, 8),
         "splitting each {cols}-long row over {new} programs (was {old}) puts more SMs to work when there are only {rows} rows; a second tiny kernel adds the partials"),
    AUTOTUNE,
    Knob("even_masks", 6, (False, True),
         "even_masks={new} (was {old}): when {cols} columns are a multiple of the tile and rows divide evenly, loads drop their masks"),
)

DEFAULTS = {
    "num_warps": 8,
    "num_stages": 1,
    "max_block_n": 4096,
    "rows_per_program": 1,
    "persistent": 0,
    "load_eviction": "evict_first",
    "acc_fp32": True,
    "split": 1,
    "autotune": False,
    "even_masks": False,
}


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    out = effective_rowwise(params, int(shape.get("cols", 0)), "max_block_n")
    if dtype == "fp32":
        out["acc_fp32"] = None  # fp32 inputs are accumulated in fp32 either way
    return out


def _kernel(p: dict) -> str:
    ev = eviction_arg(p["load_eviction"])
    acc_type = "tl.float32" if p["acc_fp32"] else "x_ptr.dtype.element_ty"
    load = fill("tl.load(x_rows + c[None, :], mask=mask, other=0.0<<ev>>)", ev=ev)
    if p["even_masks"]:
        load_stmt = fill(
            """
            if EVEN:
                x = tl.load(x_rows + c[None, :]<<ev>>)
            else:
                x = <<load>>
            """,
            ev=ev, load=load,
        )
    else:
        load_stmt = f"x = {load}"
    store = "tl.store(out_ptr + rows.to(tl.int64) * stride_out + split_id, total.to(out_ptr.dtype.element_ty), mask=row_mask)"
    body = fill(
        """
        rows = row_block * ROWS + tl.arange(0, ROWS)
        row_mask = rows < n_rows
        x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
        acc = tl.zeros([ROWS, BLOCK_N], dtype=<<acc_type>>)
        for start in range(col_start, col_end, BLOCK_N):
            c = start + cols
            mask = row_mask[:, None] & (c < col_end)[None, :]
            <<load_stmt>>
            acc += x.to(<<acc_type>>)
        total = tl.sum(acc, axis=1)
        <<store>>
        """,
        acc_type=acc_type, load_stmt=load_stmt, store=store,
    )
    kernel = fill(
        """
        @triton.jit
        def _reduce_rows(
            x_ptr, out_ptr, n_rows, n_cols, stride_x, stride_out, cols_per_split,
            BLOCK_N: tl.constexpr, ROWS: tl.constexpr, EVEN: tl.constexpr,
        ):
            # Program (row block, split) sums columns [col_start, col_end) of its rows.
            split_id = tl.program_id(1)
            col_start = split_id * cols_per_split
            col_end = tl.minimum(col_start + cols_per_split, n_cols)
            cols = tl.arange(0, BLOCK_N)
            <<loop>>
        """,
        loop=row_loop(body, bool(p["persistent"])),
    )
    if p["autotune"]:
        kernel = autotune_decorator(
            "[triton.Config({}, num_warps=w, num_stages=NUM_STAGES) for w in (8, 4, 16)]", '["n_cols", "ROWS"]'
        ) + "\n" + kernel
    if p["split"] > 1:
        kernel += "\n\n\n" + fill(
            """
            @triton.jit
            def _add_partials(partial_ptr, y_ptr, n_rows, n_splits, SPLIT: tl.constexpr, BLOCK_R: tl.constexpr):
                # The partial sums of each row, added in a fixed order (repeatable bit for bit).
                rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
                splits = tl.arange(0, SPLIT)
                parts = tl.load(partial_ptr + rows[:, None] * SPLIT + splits[None, :],
                                mask=(rows < n_rows)[:, None] & (splits < n_splits)[None, :], other=0.0)
                tl.store(y_ptr + rows, tl.sum(parts, axis=1).to(y_ptr.dtype.element_ty), mask=rows < n_rows)
            """
        )
    return kernel


def _launcher(p: dict) -> str:
    if p["split"] > 1:
        finish = """
            partials = torch.empty((n_rows, SPLIT), dtype=torch.float32, device=x.device)
            _reduce_rows[grid](
                x2, partials, n_rows, n_cols, x2.stride(0), SPLIT, cols_per_split,
                BLOCK_N=block_n, ROWS=ROWS_PER_PROGRAM, EVEN=even<<launch_opts>>,
            )
            _add_partials[(triton.cdiv(n_rows, 128),)](partials, y, n_rows, grid[1], SPLIT=SPLIT, BLOCK_R=128, num_warps=4)
            """
    else:
        finish = """
            _reduce_rows[grid](
                x2, y, n_rows, n_cols, x2.stride(0), 1, cols_per_split,
                BLOCK_N=block_n, ROWS=ROWS_PER_PROGRAM, EVEN=even<<launch_opts>>,
            )
            """
    persistent = bool(p["persistent"])
    return fill(
        '''
        def kernel_fn(x):
            """x.sum(-1), accumulated in fp32, returned in x's dtype."""
            n_cols = x.shape[-1]
            x2 = x.reshape(x.shape[:-1].numel(), n_cols)
            if x2.stride(-1) != 1:
                x2 = x2.contiguous()
            n_rows = x2.shape[0]
            y = torch.empty(n_rows, dtype=x.dtype, device=x.device)
            if n_rows == 0:
                return y.reshape(x.shape[:-1])
            cols_per_split = max(triton.cdiv(n_cols, SPLIT), 1)  # empty rows still get their 0
            block_n = min(triton.next_power_of_2(cols_per_split), MAX_BLOCK_N)
            cols_per_split = triton.cdiv(cols_per_split, block_n) * block_n  # splits start on tile edges
            n_blocks = triton.cdiv(n_rows, ROWS_PER_PROGRAM)
            grid = (<<grid>>, max(triton.cdiv(n_cols, cols_per_split), 1))
            even = <<even>>
            <<finish>>
            return y.reshape(x.shape[:-1])
        ''',
        grid=grid_expr(persistent)[1:-2],
        finish=fill(finish, launch_opts=launch_opts(p["autotune"])),
        even="(n_cols % block_n == 0 and cols_per_split * SPLIT == n_cols and n_rows % ROWS_PER_PROGRAM == 0)"
        if p["even_masks"] else "False",
    )


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default)."""
    p = {**DEFAULTS, **params}
    return join(
        '"""Reduce (sum over the last dim) candidate written by the playbook agent from its template (autokernel)."""',
        IMPORTS,
        knob_header(SPACE, p),
        INTERPRETER_NOTE if p["autotune"] else None,
        NUM_SMS if p["persistent"] else None,
        _kernel(p),
        _launcher(p),
    )

"""Triton starter for reduce (sum over the last dim): a tile of rows per program, fp32 lanes.

Each program owns ROWS rows and walks them BLOCK_N columns at a time, adding into an fp32
[ROWS, BLOCK_N] accumulator; one tree reduction per row at the end. Narrow rows are packed
several to a program so each program still moves a few KB. The order of additions is fixed,
so the result is bitwise repeatable.

The row width is compiled in (one compile per width, as torch.compile does), and when the rows and the
width divide into whole tiles the loads carry no masks at all: that is what torch.compile's kernel had
over the masked form with a run-time width (numbers: docs/results/kernel_notes.md).

Few, wide rows (a sum over several trailing dims) would leave most SMs idle at one program per row,
so each row is then split into chunks over a 2-D grid: one kernel writes each chunk's fp32 sum, a
second adds a row's partials in a fixed order, so the split result is as repeatable as the rest
(`split_plan` holds the rule, its module constants are the knobs).
"""

import functools
import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# Elements of narrow rows packed into one program. The interpreter pays per program, not per element,
# so it gets bigger tiles.
ROW_TILE, MAX_ROWS = (16384, 256) if INTERPRETED else (4096, 64)

# The split rule (see `split_plan`): rows at least SPLIT_MIN_COLS wide are split when there are fewer
# than SPLIT_ROWS_PER_SM rows per SM; the split grid aims at SPLIT_PROGRAMS_PER_SM programs per SM,
# each walking its chunk SPLIT_BLOCK elements at a time.
SPLIT_MIN_COLS = 16385
SPLIT_ROWS_PER_SM = 4
SPLIT_PROGRAMS_PER_SM = 8
SPLIT_BLOCK = 4096


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, n_rows, stride_x, N_COLS: tl.constexpr, ROWS: tl.constexpr,
                    BLOCK_N: tl.constexpr, WHOLE_TILES: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((ROWS, BLOCK_N), tl.float32)
    for start in range(0, N_COLS, BLOCK_N):
        idx = start + cols
        ptrs = x_ptr + rows[:, None] * stride_x + idx[None, :]
        if WHOLE_TILES:  # every row and column of every tile exists: no masks
            acc += tl.load(ptrs, eviction_policy="evict_first").to(tl.float32)
        else:
            mask = row_ok[:, None] & (idx < N_COLS)[None, :]
            acc += tl.load(ptrs, mask=mask, other=0.0,
                           eviction_policy="evict_first").to(tl.float32)
    total = tl.sum(acc, axis=1)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def _chunk_sum_kernel(x_ptr, part_ptr, n_cols, stride_x, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr):
    """The fp32 sum of one chunk of one row."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    x_row = x_ptr + row * stride_x
    first = chunk.to(tl.int64) * CHUNK
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        acc += tl.load(x_row + idx, mask=idx < n_cols, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(part_ptr + row * tl.num_programs(1) + chunk, tl.sum(acc, axis=0))


@triton.jit
def _add_partials_kernel(part_ptr, out_ptr, n_chunks, CHUNKS: tl.constexpr):
    """A row's partial sums, added in a fixed order."""
    row = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, CHUNKS)
    parts = tl.load(part_ptr + row * n_chunks + k, mask=k < n_chunks, other=0.0)
    tl.store(out_ptr + row, tl.sum(parts, axis=0).to(out_ptr.dtype.element_ty))


@functools.lru_cache(maxsize=None)
def _num_sms(device):
    """Streaming multiprocessors of the GPU; on the CPU interpreter a small fixed number."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def split_plan(n_rows, n_cols, num_sms):
    """(chunks per row, chunk length, tile) when rows should be split across programs, else None.

    One program per row fills the GPU only with enough rows; below SPLIT_ROWS_PER_SM rows per SM
    (and for rows of at least SPLIT_MIN_COLS) each row is cut into chunks, as many as bring the grid
    to about SPLIT_PROGRAMS_PER_SM programs per SM, each a whole number of tiles (one at least).
    """
    if n_cols < SPLIT_MIN_COLS or n_rows >= SPLIT_ROWS_PER_SM * num_sms:
        return None
    # At least a whole tile per program: less work than that is all set-up.
    per_chunk = max(triton.cdiv(n_cols, triton.cdiv(SPLIT_PROGRAMS_PER_SM * num_sms, n_rows)), SPLIT_BLOCK)
    chunk = triton.cdiv(per_chunk, SPLIT_BLOCK) * SPLIT_BLOCK
    chunks = triton.cdiv(n_cols, chunk)
    return (chunks, chunk, SPLIT_BLOCK) if chunks > 1 else None


def kernel_fn(x):
    n_cols = x.shape[-1] if x.dim() else 1
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    n_rows = x2d.shape[0]
    out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
    plan = split_plan(n_rows, n_cols, _num_sms(x.device)) if n_rows else None
    if plan is not None:
        chunks, chunk, block = plan
        partials = torch.empty((n_rows, chunks), dtype=torch.float32, device=x.device)
        _chunk_sum_kernel[(n_rows, chunks)](x2d, partials, n_cols, x2d.stride(0), CHUNK=chunk, BLOCK_N=block,
                                            num_warps=16 if block >= 4096 else 8)
        _add_partials_kernel[(n_rows,)](partials, out, chunks, CHUNKS=triton.next_power_of_2(chunks), num_warps=4)
    elif n_rows:
        block_n = min(triton.next_power_of_2(n_cols), 4096)
        rows = max(1, min(MAX_ROWS, ROW_TILE // block_n))
        # Rows of 4096 or more get 16 warps (ahead of 8 in the probes); packed narrow rows keep 8 (16 was
        # slower). Numbers: docs/results/kernel_notes.md.
        warps = 16 if block_n >= 4096 else (8 if rows * block_n >= 4096 else 4)
        whole = n_rows % rows == 0 and n_cols % block_n == 0
        _row_sum_kernel[(triton.cdiv(n_rows, rows),)](
            x2d, out, n_rows, x2d.stride(0), N_COLS=n_cols, ROWS=rows, BLOCK_N=block_n, WHOLE_TILES=whole,
            num_warps=warps)
    return out.reshape(x.shape[:-1])

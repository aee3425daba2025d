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

This file is also the playbook's reduce template: the knob constants below are what the playbook agent
moves (playbook/templates/reduce.py gives each one's reason); their values here are the starter's own.
"""

import os

import torch
import triton
import triton.language as tl

from autokernel.kernels.triton_common import autotuned, num_sms, programs, row_split_plan, row_view

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# Elements of narrow rows packed into one program. The interpreter pays per program, not per element,
# so it gets bigger tiles.
ROW_TILE, MAX_ROWS = (16384, 256) if INTERPRETED else (4096, 64)

# The split rule (see `split_plan`): rows at least SPLIT_MIN_COLS wide are split when there are fewer
# than SPLIT_ROWS rows per SM; the split grid aims at SPLIT_PROGRAMS programs per SM,
# each walking its chunk SPLIT_BLOCK elements at a time.
SPLIT_MIN_COLS = 16385
SPLIT_ROWS = 4
SPLIT_PROGRAMS = 8
SPLIT_BLOCK = 4096

# Knobs, each with its playbook tier. 0 picks the starter's own rule where a knob has one.
NUM_WARPS = 0  # tier 1, launch shape (0: by the tile, see `_row_warps`)
NUM_STAGES = 3  # tier 1, launch shape (3 is Triton's default on NVIDIA GPUs)
ROWS_PER_PROGRAM = 0  # tier 2, memory access (0: narrow rows packed up to ROW_TILE elements)
PERSISTENT = 0  # tier 2, memory access (programs per SM looping over row tiles; 0: one program per tile)
LOAD_EVICTION = 'evict_first'  # tier 2, memory access
MAX_BLOCK_N = 4096  # tier 2, memory access
ACC_FP32 = True  # tier 3, compute
SPLIT = 0  # tier 4, algorithm (chunks of every row; 0: by `split_plan`, 1: never)
AUTOTUNE = False  # tier 4, algorithm (triton.autotune picks the row kernel's warps)
EVEN_MASKS = True  # tier 6, kernel-specific (unmasked loads when rows and width divide into whole tiles)


@triton.jit
def _sum_row_tile(x_ptr, out_ptr, first_row, n_rows, stride_x, N_COLS: tl.constexpr, ROWS: tl.constexpr,
                  BLOCK_N: tl.constexpr, WHOLE_TILES: tl.constexpr, EVICTION: tl.constexpr,
                  ACC_FP32: tl.constexpr):
    """The sums of the ROWS rows from `first_row` (int64)."""
    acc_dtype = tl.float32 if ACC_FP32 else x_ptr.dtype.element_ty
    rows = first_row + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((ROWS, BLOCK_N), acc_dtype)
    for start in range(0, N_COLS, BLOCK_N):
        idx = start + cols
        ptrs = x_ptr + rows[:, None] * stride_x + idx[None, :]
        if WHOLE_TILES:  # every row and column of every tile exists: no masks
            acc += tl.load(ptrs, eviction_policy=EVICTION).to(acc_dtype)
        else:
            mask = row_ok[:, None] & (idx < N_COLS)[None, :]
            acc += tl.load(ptrs, mask=mask, other=0.0,
                           eviction_policy=EVICTION).to(acc_dtype)
    total = tl.sum(acc, axis=1)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, n_rows, stride_x, N_COLS: tl.constexpr, ROWS: tl.constexpr,
                    BLOCK_N: tl.constexpr, WHOLE_TILES: tl.constexpr, EVICTION: tl.constexpr,
                    ACC_FP32: tl.constexpr, PERSISTENT: tl.constexpr):
    if PERSISTENT:  # a fixed grid walks the row tiles
        for tile in range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
            _sum_row_tile(x_ptr, out_ptr, tl.cast(tile, tl.int64) * ROWS, n_rows, stride_x, N_COLS, ROWS, BLOCK_N,
                          WHOLE_TILES, EVICTION, ACC_FP32)
    else:
        _sum_row_tile(x_ptr, out_ptr, tl.program_id(0).to(tl.int64) * ROWS, n_rows, stride_x, N_COLS, ROWS, BLOCK_N,
                      WHOLE_TILES, EVICTION, ACC_FP32)


if AUTOTUNE:
    _row_sum_kernel = autotuned(_row_sum_kernel, ["N_COLS", "ROWS", "BLOCK_N"], (8, 4, 16), NUM_STAGES, INTERPRETED)


@triton.jit
def _chunk_sum_kernel(x_ptr, part_ptr, n_cols, stride_x, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr,
                      EVICTION: tl.constexpr, ACC_FP32: tl.constexpr):
    """The sum of one chunk of one row (stored in fp32)."""
    acc_dtype = tl.float32 if ACC_FP32 else x_ptr.dtype.element_ty
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    x_row = x_ptr + row * stride_x
    first = chunk.to(tl.int64) * CHUNK
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), acc_dtype)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        acc += tl.load(x_row + idx, mask=idx < n_cols, other=0.0, eviction_policy=EVICTION).to(acc_dtype)
    tl.store(part_ptr + row * tl.num_programs(1) + chunk, tl.sum(acc, axis=0))


@triton.jit
def _add_partials_kernel(part_ptr, out_ptr, n_chunks, CHUNKS: tl.constexpr):
    """A row's partial sums, added in a fixed order."""
    row = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, CHUNKS)
    parts = tl.load(part_ptr + row * n_chunks + k, mask=k < n_chunks, other=0.0)
    tl.store(out_ptr + row, tl.sum(parts, axis=0).to(out_ptr.dtype.element_ty))


def split_plan(n_rows, n_cols, num_sms):
    """(chunks per row, chunk length, tile) when rows should be split across programs, else None: the shared
    rule (`row_split_plan`) with this starter's SPLIT_* constants."""
    return row_split_plan(n_rows, n_cols, num_sms, SPLIT_MIN_COLS, SPLIT_ROWS, SPLIT_PROGRAMS, SPLIT_BLOCK)


def fixed_split(n_cols, parts):
    """(chunks, chunk length, tile) cutting every row into about `parts` chunks of whole tiles (SPLIT > 1)."""
    if parts < 2 or not n_cols:
        return None
    per_chunk = triton.cdiv(n_cols, parts)
    block = min(triton.next_power_of_2(per_chunk), MAX_BLOCK_N)
    chunk = triton.cdiv(per_chunk, block) * block  # chunks start on tile edges
    chunks = triton.cdiv(n_cols, chunk)
    return (chunks, chunk, block) if chunks > 1 else None


def _row_warps(block_n, rows):
    """NUM_WARPS, or at 0 the rule: rows of 4096 or more get 16 warps (ahead of 8 in the probes); packed
    narrow rows keep 8 (16 was slower). Numbers: docs/results/kernel_notes.md."""
    if NUM_WARPS:
        return NUM_WARPS
    return 16 if block_n >= 4096 else (8 if rows * block_n >= 4096 else 4)


def kernel_fn(x):
    x2d = row_view(x if x.dim() else x.reshape(1))  # a 0-dim x is one row of one
    n_rows, n_cols = x2d.shape
    out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
    plan = None
    if n_rows:
        plan = split_plan(n_rows, n_cols, num_sms(x.device)) if SPLIT == 0 else fixed_split(n_cols, SPLIT)
    if plan is not None:
        chunks, chunk, block = plan
        partials = torch.empty((n_rows, chunks), dtype=torch.float32, device=x.device)
        _chunk_sum_kernel[(n_rows, chunks)](x2d, partials, n_cols, x2d.stride(0), CHUNK=chunk, BLOCK_N=block,
                                            EVICTION=LOAD_EVICTION, ACC_FP32=ACC_FP32,
                                            num_warps=NUM_WARPS or (16 if block >= 4096 else 8), num_stages=NUM_STAGES)
        _add_partials_kernel[(n_rows,)](partials, out, chunks, CHUNKS=triton.next_power_of_2(chunks), num_warps=4)
    elif n_rows:
        block_n = min(triton.next_power_of_2(n_cols), MAX_BLOCK_N)
        rows = ROWS_PER_PROGRAM or max(1, min(MAX_ROWS, ROW_TILE // block_n))
        whole = EVEN_MASKS and n_rows % rows == 0 and n_cols % block_n == 0
        grid = (programs(triton.cdiv(n_rows, rows), PERSISTENT, x.device),)
        launch = {} if AUTOTUNE else {"num_warps": _row_warps(block_n, rows), "num_stages": NUM_STAGES}
        _row_sum_kernel[grid](x2d, out, n_rows, x2d.stride(0), N_COLS=n_cols, ROWS=rows, BLOCK_N=block_n,
                              WHOLE_TILES=whole, EVICTION=LOAD_EVICTION, ACC_FP32=ACC_FP32,
                              PERSISTENT=PERSISTENT, **launch)
    return out.reshape(x.shape[:-1])

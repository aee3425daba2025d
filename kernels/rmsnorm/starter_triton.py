"""Triton starter for RMSNorm over the last dim (Llama style, fp32 math).

Rows up to MAX_BLOCK_N columns are read once into registers, several narrow rows per program; wider
rows loop twice over the row (sum of squares, then scale). The weight is read once per program.

Few, wide rows (a norm over several trailing dims) would leave most SMs idle at one program per
row, so each row is then split into chunks over a 2-D grid: one kernel writes each chunk's sum of
squares, a second adds a row's partials and scales its own chunk (`split_plan` holds the rule).
Squares are non-negative, so fp32 partials summed per lane and per chunk lose nothing to
cancellation. The weight may be None (elementwise_affine=False).

The one-pass rows are loaded with eviction_policy="evict_last": the probes found it a little ahead of
no hint and of evict_first, at the speed of a device copy of the same bytes (numbers:
docs/results/kernel_notes.md).

This file is also the playbook's rmsnorm template: the knob constants below are what the playbook agent
moves (playbook/templates/rmsnorm.py gives each one's reason); their values here are the starter's own.
"""

import os

import torch
import triton
import triton.language as tl

from autokernel.kernels.triton_common import (autotuned, column_param, inverse_sqrt, load_row_block, num_sms, programs,
                                              row_block_descriptors, row_launch, row_split_plan, row_view,
                                              store_row_block, tma_ready)

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# Knobs, each with its playbook tier. 0 picks the starter's own rule where a knob has one.
NUM_WARPS = 0  # tier 1, launch shape (0: 4, 8 or 16 by the elements a program holds, see `warps_for_elements`)
NUM_STAGES = 3  # tier 1, launch shape (3 is Triton's default on NVIDIA GPUs)
ROWS_PER_PROGRAM = 0  # tier 2, memory access (0: narrow rows packed up to 2048 elements, 16 rows at most)
PERSISTENT = 0  # tier 2, memory access (programs per SM looping over row blocks; 0: one program per block)
LOAD_EVICTION = 'evict_last'  # tier 2, memory access (the one-pass rows' loads)
MAX_BLOCK_N = 16384  # tier 2, memory access (the widest row held in registers; wider rows loop)
RSQRT = False  # tier 3, compute
ACC_FP32 = True  # tier 3, compute
SPLIT_ROWS = 4  # tier 4, algorithm (split rows below this many rows per SM; 0: never)
SPLIT_PROGRAMS = 8  # tier 4, algorithm (programs per SM the split grid aims at)
AUTOTUNE = False  # tier 4, algorithm (triton.autotune picks the row kernels' warps)
TMA = False  # tier 5, Hopper (tensor-descriptor loads and stores of the one-pass rows)
EVEN_MASKS = False  # tier 6, kernel-specific (unmasked one-pass rows when width and rows divide evenly)

# Wider rows than MAX_BLOCK_N loop over tiles of at most LOOP_BLOCK_N elements.
LOOP_BLOCK_N = 4096
# The split path's fixed part (see `split_plan`): narrower rows than SPLIT_MIN_COLS fit one tile of
# registers and are never split; a split program walks its chunk SPLIT_BLOCK elements at a time.
SPLIT_MIN_COLS = 16385
SPLIT_BLOCK = 4096


@triton.jit
def _square(x, ACC_FP32: tl.constexpr):
    """x * x in fp32, squared in fp32 or (ACC_FP32 off) in the input dtype."""
    if ACC_FP32:
        x = x.to(tl.float32)
        sq = x * x
    else:
        sq = (x * x).to(tl.float32)
    return sq


@triton.jit
def _rmsnorm_row_block(row_block, x_ptr, w_ptr, y_ptr, x_desc, y_desc, n_rows, n_cols, stride_x, stride_y, eps,
                       ROWS: tl.constexpr, BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, EVICTION: tl.constexpr,
                       RSQRT: tl.constexpr, ACC_FP32: tl.constexpr, EVEN: tl.constexpr, USE_TMA: tl.constexpr):
    """Normalise the ROWS rows of one block, each read once into registers."""
    rows = row_block.to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_ok[None, :]
    x = load_row_block(x_ptr, x_desc, row_block, rows, cols, mask, stride_x, ROWS, EVICTION, EVEN, USE_TMA)
    if ACC_FP32:
        x = x.to(tl.float32)
        mean_square = tl.sum(x * x, axis=1) / n_cols
    else:
        mean_square = tl.sum(x * x, axis=1).to(tl.float32) / n_cols
    rstd = inverse_sqrt(mean_square + eps, RSQRT)
    w = column_param(w_ptr, cols, col_ok, HAS_W, 1.0)  # 1 where the norm has no weight
    y = x.to(tl.float32) * rstd[:, None] * w[None, :]
    store_row_block(y_ptr, y_desc, y, row_block, rows, cols, mask, stride_y, ROWS, EVEN, USE_TMA)


@triton.jit
def _rmsnorm_rows_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
                         ROWS: tl.constexpr, BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, EVICTION: tl.constexpr,
                         RSQRT: tl.constexpr, ACC_FP32: tl.constexpr, EVEN: tl.constexpr, USE_TMA: tl.constexpr,
                         PERSISTENT: tl.constexpr):
    x_desc, y_desc = row_block_descriptors(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, ROWS, BLOCK_N, USE_TMA)
    if PERSISTENT:  # a fixed grid walks the row blocks
        for row_block in range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
            _rmsnorm_row_block(tl.cast(row_block, tl.int32), x_ptr, w_ptr, y_ptr, x_desc, y_desc, n_rows, n_cols, stride_x, stride_y,
                               eps, ROWS, BLOCK_N, HAS_W, EVICTION, RSQRT, ACC_FP32, EVEN, USE_TMA)
    else:
        _rmsnorm_row_block(tl.program_id(0), x_ptr, w_ptr, y_ptr, x_desc, y_desc, n_rows, n_cols, stride_x, stride_y,
                           eps, ROWS, BLOCK_N, HAS_W, EVICTION, RSQRT, ACC_FP32, EVEN, USE_TMA)


@triton.jit
def _rmsnorm_wide_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps, BLOCK_N: tl.constexpr,
                         HAS_W: tl.constexpr, RSQRT: tl.constexpr, ACC_FP32: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        x = tl.load(x_row + idx, mask=idx < n_cols, other=0.0)
        acc += _square(x, ACC_FP32)
    rstd = inverse_sqrt(tl.sum(acc, axis=0) / n_cols + eps, RSQRT)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        ok = idx < n_cols
        x = tl.load(x_row + idx, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = column_param(w_ptr, idx, ok, HAS_W, 1.0)
        tl.store(y_row + idx, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _rmsnorm_chunk_squares_kernel(x_ptr, sq_ptr, n_cols, stride_x, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr,
                                  ACC_FP32: tl.constexpr):
    """The sum of squares of one chunk of one row."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    x_row = x_ptr + row * stride_x
    first = chunk.to(tl.int64) * CHUNK
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        x = tl.load(x_row + idx, mask=idx < n_cols, other=0.0)
        acc += _square(x, ACC_FP32)
    tl.store(sq_ptr + row * tl.num_programs(1) + chunk, tl.sum(acc, axis=0))


@triton.jit
def _rmsnorm_chunk_scale_kernel(x_ptr, w_ptr, y_ptr, sq_ptr, n_cols, stride_x, stride_y, eps,
                                CHUNK: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr,
                                HAS_W: tl.constexpr, RSQRT: tl.constexpr):
    """Add the row's partial sums of squares (a few hundred values, from L2), then scale one chunk."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    n_chunks = tl.num_programs(1)
    k = tl.arange(0, CHUNKS)
    partials = tl.load(sq_ptr + row * n_chunks + k, mask=k < n_chunks, other=0.0)
    rstd = inverse_sqrt(tl.sum(partials, axis=0) / n_cols + eps, RSQRT)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    first = chunk.to(tl.int64) * CHUNK
    cols = tl.arange(0, BLOCK_N)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        ok = idx < n_cols
        x = tl.load(x_row + idx, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = column_param(w_ptr, idx, ok, HAS_W, 1.0)
        tl.store(y_row + idx, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=ok)


if AUTOTUNE:
    _rmsnorm_rows_kernel = autotuned(_rmsnorm_rows_kernel, ["n_cols", "ROWS"], (8, 4, 16), NUM_STAGES, INTERPRETED)
    _rmsnorm_wide_kernel = autotuned(_rmsnorm_wide_kernel, ["n_cols"], (8, 4, 16), NUM_STAGES, INTERPRETED)


def split_plan(n_rows, n_cols, num_sms):
    """(chunks per row, chunk length, tile) when rows should be split across programs, else None: the shared
    rule (`row_split_plan`) with this starter's SPLIT_* constants."""
    return row_split_plan(n_rows, n_cols, num_sms, SPLIT_MIN_COLS, SPLIT_ROWS, SPLIT_PROGRAMS, SPLIT_BLOCK)


def kernel_fn(x, weight, eps=1e-6):
    x2d = row_view(x)
    n_rows, n_cols = x2d.shape
    has_w = weight is not None  # without one the kernels never read the stand-in pointer
    weight = weight.contiguous() if has_w else x2d
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0:
        return y.reshape(x.shape)
    plan = split_plan(n_rows, n_cols, num_sms(x.device))
    if plan is not None:
        chunks, chunk, block = plan
        squares = torch.empty((n_rows, chunks), dtype=torch.float32, device=x.device)
        options = row_launch(NUM_WARPS, NUM_STAGES, block)
        _rmsnorm_chunk_squares_kernel[(n_rows, chunks)](
            x2d, squares, n_cols, x2d.stride(0), CHUNK=chunk, BLOCK_N=block, ACC_FP32=ACC_FP32, **options)
        _rmsnorm_chunk_scale_kernel[(n_rows, chunks)](
            x2d, weight, y, squares, n_cols, x2d.stride(0), y.stride(0), float(eps),
            CHUNK=chunk, BLOCK_N=block, CHUNKS=triton.next_power_of_2(chunks), HAS_W=has_w, RSQRT=RSQRT, **options)
    elif n_cols <= MAX_BLOCK_N:
        block_n = triton.next_power_of_2(n_cols)
        rows = ROWS_PER_PROGRAM or max(1, min(16, 2048 // block_n))
        grid = (programs(triton.cdiv(n_rows, rows), PERSISTENT, x.device),)
        _rmsnorm_rows_kernel[grid](
            x2d, weight, y, n_rows, n_cols, x2d.stride(0), y.stride(0), float(eps),
            ROWS=rows, BLOCK_N=block_n, HAS_W=has_w, EVICTION=LOAD_EVICTION, RSQRT=RSQRT, ACC_FP32=ACC_FP32,
            EVEN=EVEN_MASKS and n_cols == block_n and n_rows % rows == 0,
            USE_TMA=TMA and tma_ready(x2d, y, block_cols=block_n), PERSISTENT=PERSISTENT > 0,
            **row_launch(NUM_WARPS, NUM_STAGES, rows * block_n, AUTOTUNE))
    else:
        block_n = min(MAX_BLOCK_N, LOOP_BLOCK_N)
        _rmsnorm_wide_kernel[(n_rows,)](x2d, weight, y, n_cols, x2d.stride(0), y.stride(0), float(eps),
                                        BLOCK_N=block_n, HAS_W=has_w, RSQRT=RSQRT, ACC_FP32=ACC_FP32,
                                        **row_launch(NUM_WARPS, NUM_STAGES, block_n, AUTOTUNE))
    return y.reshape(x.shape)

"""Triton starter for LayerNorm over the last dim.

Rows that fit in registers (up to MAX_BLOCK_N columns) are normalised from one read: a tile of ROWS rows
per program (several rows when they are narrow, so every program moves a few KB), a centred
variance of the data shifted by the row's first element (exact for constant rows), fp32 math,
weight and bias read once per program. Wider rows loop over the row in three passes (mean,
centred variance, normalise).

Few, wide rows (a LayerNorm over several trailing dims: a handful of rows of millions of elements)
would leave most SMs idle at one program per row, so each row is split into chunks over a 2-D grid:
one kernel writes each chunk's mean and M2 (sum of squared deviations), a second combines a row's
chunks and normalises its own chunk. The statistics are Welford's: each lane keeps a running mean
and M2 of its own elements (no E[x^2] - mean^2, whose fp32 cancellation loses the variance of rows
with a large mean), and lanes and chunks are merged by Chan's formula for groups, so every sum
is over deviations from a nearby mean and no single fp32 accumulator sees millions of terms.
`split_plan` holds the rule. weight and bias may be None
(nn.LayerNorm(elementwise_affine=False), or bias=False).

The rows load with evict_last and take the shift with one scalar load instead of a third reduction
over the tile: the probes found the earlier form behind the playbook template's rows, which ran at
copy speed (numbers: docs/results/kernel_notes.md).

This file is also the playbook's layernorm template: the knob constants below are what the playbook agent
moves (playbook/templates/layernorm.py gives each one's reason); their values here are the starter's own.
"""

import os

import torch
import triton
import triton.language as tl

from autokernel.kernels.triton_common import (autotuned, column_param, inverse_sqrt, load_row_block, num_sms, programs,
                                              row_block_descriptors, row_launch, row_split_plan, row_view,
                                              store_row_block, tma_ready)

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# Elements of narrow rows packed into one program. The interpreter pays per program, not per element,
# so it gets bigger tiles.
ROW_TILE, MAX_ROWS = (16384, 128) if INTERPRETED else (2048, 16)

# Knobs, each with its playbook tier. 0 picks the starter's own rule where a knob has one.
NUM_WARPS = 0  # tier 1, launch shape (0: 4, 8 or 16 by the elements a program holds, see `warps_for_elements`)
NUM_STAGES = 3  # tier 1, launch shape (3 is Triton's default on NVIDIA GPUs)
ROWS_PER_PROGRAM = 0  # tier 2, memory access (0: narrow rows packed up to ROW_TILE elements, MAX_ROWS at most)
PERSISTENT = 0  # tier 2, memory access (programs per SM looping over row blocks; 0: one program per block)
LOAD_EVICTION = 'evict_last'  # tier 2, memory access (the one-pass rows' loads)
MAX_BLOCK_N = 16384  # tier 2, memory access (the widest row held in registers; wider rows loop)
RSQRT = False  # tier 3, compute
ONE_PASS_STATS = False  # tier 4, algorithm (looped rows: sum and sum of squares in one pass)
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
def _affine(w_ptr, b_ptr, idx, ok, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """weight and bias at `idx` in fp32; 1 and 0 where the norm has none."""
    return column_param(w_ptr, idx, ok, HAS_W, 1.0), column_param(b_ptr, idx, ok, HAS_B, 0.0)


@triton.jit
def _layernorm_row_block(row_block, x_ptr, w_ptr, b_ptr, y_ptr, x_desc, y_desc, n_rows, n_cols, stride_x, stride_y,
                         eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                         EVICTION: tl.constexpr, RSQRT: tl.constexpr, EVEN: tl.constexpr, USE_TMA: tl.constexpr):
    """Normalise the ROWS rows of one block, each read once into registers."""
    rows = row_block.to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_ok[None, :]
    # Shift by the row's first element before averaging: exact for constant rows, and it keeps
    # the fp32 sum small for rows far from zero. A scalar load per row (served by L1 from the same
    # line as the tile), not a third reduction over the tile.
    shift = tl.load(x_ptr + rows * stride_x, mask=rows < n_rows, other=0.0).to(tl.float32)
    x = load_row_block(x_ptr, x_desc, row_block, rows, cols, mask, stride_x, ROWS, EVICTION, EVEN, USE_TMA)
    x = tl.where(mask, x.to(tl.float32) - shift[:, None], 0.0)
    mean = tl.sum(x, axis=1) / n_cols
    diff = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(diff * diff, axis=1) / n_cols
    rstd = inverse_sqrt(var + eps, RSQRT)
    w, b = _affine(w_ptr, b_ptr, cols, col_ok, HAS_W, HAS_B)
    y = diff * rstd[:, None] * w[None, :] + b[None, :]
    store_row_block(y_ptr, y_desc, y, row_block, rows, cols, mask, stride_y, ROWS, EVEN, USE_TMA)


@triton.jit
def _layernorm_rows_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
                           ROWS: tl.constexpr, BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                           EVICTION: tl.constexpr, RSQRT: tl.constexpr, EVEN: tl.constexpr, USE_TMA: tl.constexpr,
                           PERSISTENT: tl.constexpr):
    x_desc, y_desc = row_block_descriptors(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, ROWS, BLOCK_N, USE_TMA)
    if PERSISTENT:  # a fixed grid walks the row blocks
        for row_block in range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
            _layernorm_row_block(tl.cast(row_block, tl.int32), x_ptr, w_ptr, b_ptr, y_ptr, x_desc, y_desc, n_rows,
                                 n_cols, stride_x, stride_y, eps, ROWS, BLOCK_N, HAS_W, HAS_B, EVICTION, RSQRT, EVEN,
                                 USE_TMA)
    else:
        _layernorm_row_block(tl.program_id(0), x_ptr, w_ptr, b_ptr, y_ptr, x_desc, y_desc, n_rows, n_cols, stride_x,
                             stride_y, eps, ROWS, BLOCK_N, HAS_W, HAS_B, EVICTION, RSQRT, EVEN, USE_TMA)


@triton.jit
def _layernorm_wide_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                           BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, RSQRT: tl.constexpr,
                           ONE_PASS_STATS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    shift = tl.load(x_row).to(tl.float32)  # see the rows kernel: exact for constant rows
    acc = tl.zeros((BLOCK_N,), tl.float32)
    if ONE_PASS_STATS:
        acc_sq = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        x = tl.load(x_row + idx, mask=idx < n_cols, other=0.0).to(tl.float32)
        shifted = tl.where(idx < n_cols, x - shift, 0.0)
        acc += shifted
        if ONE_PASS_STATS:
            acc_sq += shifted * shifted
    shifted_mean = tl.sum(acc, axis=0) / n_cols
    mean = shift + shifted_mean
    if ONE_PASS_STATS:
        # var = E[(x - shift)^2] - E[x - shift]^2: one read of x less, less exact where the row's mean
        # is far from its first element.
        var = tl.maximum(tl.sum(acc_sq, axis=0) / n_cols - shifted_mean * shifted_mean, 0.0)
    else:
        acc = tl.zeros((BLOCK_N,), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            idx = start + cols
            x = tl.load(x_row + idx, mask=idx < n_cols, other=0.0).to(tl.float32)
            d = tl.where(idx < n_cols, x - mean, 0.0)
            acc += d * d
        var = tl.sum(acc, axis=0) / n_cols
    rstd = inverse_sqrt(var + eps, RSQRT)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        ok = idx < n_cols
        x = tl.load(x_row + idx, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w, b = _affine(w_ptr, b_ptr, idx, ok, HAS_W, HAS_B)
        tl.store(y_row + idx, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _layernorm_chunk_stats_kernel(x_ptr, mean_ptr, m2_ptr, n_cols, stride_x,
                                  CHUNK: tl.constexpr, BLOCK_N: tl.constexpr):
    """Mean and M2 of one chunk of one row: a Welford update per lane, then the lanes merged."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    x_row = x_ptr + row * stride_x
    first = chunk.to(tl.int64) * CHUNK
    cols = tl.arange(0, BLOCK_N)
    count = tl.zeros((BLOCK_N,), tl.float32)
    mean = tl.zeros((BLOCK_N,), tl.float32)
    m2 = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        ok = idx < n_cols
        x = tl.load(x_row + idx, mask=ok, other=0.0).to(tl.float32)
        count += ok.to(tl.float32)
        delta = tl.where(ok, x - mean, 0.0)
        # A lane holding an element at this step held one at every step before: its count is the step,
        # so one reciprocal per step serves all lanes.
        mean += delta * (1.0 / (start // BLOCK_N + 1.0))
        m2 += delta * tl.where(ok, x - mean, 0.0)
    n = tl.sum(count, axis=0)
    chunk_mean = tl.sum(mean * count, axis=0) / n
    d = mean - chunk_mean
    chunk_m2 = tl.sum(m2 + count * d * d, axis=0)
    slot = row * tl.num_programs(1) + chunk
    tl.store(mean_ptr + slot, chunk_mean)
    tl.store(m2_ptr + slot, chunk_m2)


@triton.jit
def _layernorm_chunk_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, m2_ptr, n_cols, stride_x, stride_y, eps,
                                 CHUNK: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr,
                                 HAS_W: tl.constexpr, HAS_B: tl.constexpr, RSQRT: tl.constexpr):
    """Merge the row's chunk statistics (a few hundred values, from L2), then normalise one chunk."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    n_chunks = tl.num_programs(1)
    k = tl.arange(0, CHUNKS)
    k_ok = k < n_chunks
    means = tl.load(mean_ptr + row * n_chunks + k, mask=k_ok, other=0.0)
    m2s = tl.load(m2_ptr + row * n_chunks + k, mask=k_ok, other=0.0)
    counts = tl.where(k_ok, tl.minimum(n_cols - k * CHUNK, CHUNK), 0).to(tl.float32)
    mean = tl.sum(counts * means, axis=0) / n_cols
    d = means - mean
    var = tl.sum(m2s + counts * d * d, axis=0) / n_cols
    rstd = inverse_sqrt(var + eps, RSQRT)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    first = chunk.to(tl.int64) * CHUNK
    cols = tl.arange(0, BLOCK_N)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        ok = idx < n_cols
        x = tl.load(x_row + idx, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w, b = _affine(w_ptr, b_ptr, idx, ok, HAS_W, HAS_B)
        tl.store(y_row + idx, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=ok)


if AUTOTUNE:
    _layernorm_rows_kernel = autotuned(_layernorm_rows_kernel, ["n_cols", "ROWS"], (8, 4, 16), NUM_STAGES, INTERPRETED)
    _layernorm_wide_kernel = autotuned(_layernorm_wide_kernel, ["n_cols"], (8, 4, 16), NUM_STAGES, INTERPRETED)


def split_plan(n_rows, n_cols, num_sms):
    """(chunks per row, chunk length, tile) when rows should be split across programs, else None: the shared
    rule (`row_split_plan`) with this starter's SPLIT_* constants."""
    return row_split_plan(n_rows, n_cols, num_sms, SPLIT_MIN_COLS, SPLIT_ROWS, SPLIT_PROGRAMS, SPLIT_BLOCK)


def kernel_fn(x, weight, bias, eps=1e-5):
    x2d = row_view(x)
    n_rows, n_cols = x2d.shape
    # No weight or bias: the kernels are told so and never read the stand-in pointer.
    has_w, has_b = weight is not None, bias is not None
    weight = weight.contiguous() if has_w else x2d
    bias = bias.contiguous() if has_b else x2d
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0:
        return y.reshape(x.shape)
    plan = split_plan(n_rows, n_cols, num_sms(x.device))
    if plan is not None:
        chunks, chunk, block = plan
        means = torch.empty((n_rows, chunks), dtype=torch.float32, device=x.device)
        m2s = torch.empty_like(means)
        options = row_launch(NUM_WARPS, NUM_STAGES, block)
        _layernorm_chunk_stats_kernel[(n_rows, chunks)](
            x2d, means, m2s, n_cols, x2d.stride(0), CHUNK=chunk, BLOCK_N=block, **options)
        _layernorm_chunk_norm_kernel[(n_rows, chunks)](
            x2d, weight, bias, y, means, m2s, n_cols, x2d.stride(0), y.stride(0), float(eps),
            CHUNK=chunk, BLOCK_N=block, CHUNKS=triton.next_power_of_2(chunks), HAS_W=has_w, HAS_B=has_b,
            RSQRT=RSQRT, **options)
    elif n_cols <= MAX_BLOCK_N:
        block_n = triton.next_power_of_2(n_cols)
        rows = ROWS_PER_PROGRAM or max(1, min(MAX_ROWS, ROW_TILE // block_n))
        grid = (programs(triton.cdiv(n_rows, rows), PERSISTENT, x.device),)
        _layernorm_rows_kernel[grid](
            x2d, weight, bias, y, n_rows, n_cols, x2d.stride(0), y.stride(0), float(eps),
            ROWS=rows, BLOCK_N=block_n, HAS_W=has_w, HAS_B=has_b, EVICTION=LOAD_EVICTION, RSQRT=RSQRT,
            EVEN=EVEN_MASKS and n_cols == block_n and n_rows % rows == 0,
            USE_TMA=TMA and tma_ready(x2d, y, block_cols=block_n), PERSISTENT=PERSISTENT > 0,
            **row_launch(NUM_WARPS, NUM_STAGES, rows * block_n, AUTOTUNE))
    else:
        block_n = min(MAX_BLOCK_N, LOOP_BLOCK_N)
        _layernorm_wide_kernel[(n_rows,)](
            x2d, weight, bias, y, n_cols, x2d.stride(0), y.stride(0), float(eps),
            BLOCK_N=block_n, HAS_W=has_w, HAS_B=has_b, RSQRT=RSQRT, ONE_PASS_STATS=ONE_PASS_STATS,
            **row_launch(NUM_WARPS, NUM_STAGES, block_n, AUTOTUNE))
    return y.reshape(x.shape)

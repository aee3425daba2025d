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

from autokernel.kernels.triton_common import num_sms, row_split_plan, tma_ready, warps_for_elements

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
def _gain(w_ptr, idx, ok, HAS_W: tl.constexpr):
    """The weight at `idx` in fp32; 1 where the norm has none."""
    if HAS_W:
        w = tl.load(w_ptr + idx, mask=ok, other=0.0).to(tl.float32)
    else:
        w = tl.full(idx.shape, 1.0, tl.float32)
    return w


@triton.jit
def _inverse_rms(mean_square, RSQRT: tl.constexpr):
    if RSQRT:
        inv = tl.rsqrt(mean_square)
    else:
        inv = 1.0 / tl.sqrt(mean_square)
    return inv


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
    x_ptrs = x_ptr + rows[:, None] * stride_x + cols[None, :]
    if USE_TMA:
        x = x_desc.load([row_block * ROWS, 0])
    elif EVEN:
        x = tl.load(x_ptrs, eviction_policy=EVICTION)
    else:
        x = tl.load(x_ptrs, mask=mask, other=0.0, eviction_policy=EVICTION)
    if ACC_FP32:
        x = x.to(tl.float32)
        mean_square = tl.sum(x * x, axis=1) / n_cols
    else:
        mean_square = tl.sum(x * x, axis=1).to(tl.float32) / n_cols
    rstd = _inverse_rms(mean_square + eps, RSQRT)
    w = _gain(w_ptr, cols, col_ok, HAS_W)
    y = x.to(tl.float32) * rstd[:, None] * w[None, :]
    if USE_TMA:
        y_desc.store([row_block * ROWS, 0], y.to(y_ptr.dtype.element_ty))
    elif EVEN:
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty))
    else:
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_rows_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
                         ROWS: tl.constexpr, BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, EVICTION: tl.constexpr,
                         RSQRT: tl.constexpr, ACC_FP32: tl.constexpr, EVEN: tl.constexpr, USE_TMA: tl.constexpr,
                         PERSISTENT: tl.constexpr):
    if USE_TMA:
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[n_rows, n_cols], strides=[stride_x, 1],
                                           block_shape=[ROWS, BLOCK_N])
        y_desc = tl.make_tensor_descriptor(y_ptr, shape=[n_rows, n_cols], strides=[stride_y, 1],
                                           block_shape=[ROWS, BLOCK_N])
    else:
        x_desc, y_desc = x_ptr, y_ptr  # not read
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
    rstd = _inverse_rms(tl.sum(acc, axis=0) / n_cols + eps, RSQRT)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        ok = idx < n_cols
        x = tl.load(x_row + idx, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = _gain(w_ptr, idx, ok, HAS_W)
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
    rstd = _inverse_rms(tl.sum(partials, axis=0) / n_cols + eps, RSQRT)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    first = chunk.to(tl.int64) * CHUNK
    cols = tl.arange(0, BLOCK_N)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        ok = idx < n_cols
        x = tl.load(x_row + idx, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = _gain(w_ptr, idx, ok, HAS_W)
        tl.store(y_row + idx, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=ok)


def _launch_options(elements_per_program):
    """num_warps and num_stages of a launch: the knobs, NUM_WARPS by the elements a program holds where 0."""
    return {"num_warps": NUM_WARPS or warps_for_elements(elements_per_program), "num_stages": NUM_STAGES}


if AUTOTUNE:
    # The CPU interpreter cannot time configs, so it gets the first one.
    _CONFIGS = [triton.Config({}, num_warps=w, num_stages=NUM_STAGES) for w in (8, 4, 16)]
    _CONFIGS = _CONFIGS[:1] if INTERPRETED else _CONFIGS
    _rmsnorm_rows_kernel = triton.autotune(configs=_CONFIGS, key=["n_cols", "ROWS"])(_rmsnorm_rows_kernel)
    _rmsnorm_wide_kernel = triton.autotune(configs=_CONFIGS, key=["n_cols"])(_rmsnorm_wide_kernel)


def split_plan(n_rows, n_cols, num_sms):
    """(chunks per row, chunk length, tile) when rows should be split across programs, else None: the shared
    rule (`row_split_plan`) with this starter's SPLIT_* constants."""
    return row_split_plan(n_rows, n_cols, num_sms, SPLIT_MIN_COLS, SPLIT_ROWS, SPLIT_PROGRAMS, SPLIT_BLOCK)


def kernel_fn(x, weight, eps=1e-6):
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    has_w = weight is not None  # without one the kernels never read the stand-in pointer
    weight = weight.contiguous() if has_w else x2d
    n_rows = x2d.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0:
        return y.reshape(x.shape)
    plan = split_plan(n_rows, n_cols, num_sms(x.device))
    if plan is not None:
        chunks, chunk, block = plan
        squares = torch.empty((n_rows, chunks), dtype=torch.float32, device=x.device)
        options = _launch_options(block)
        _rmsnorm_chunk_squares_kernel[(n_rows, chunks)](
            x2d, squares, n_cols, x2d.stride(0), CHUNK=chunk, BLOCK_N=block, ACC_FP32=ACC_FP32, **options)
        _rmsnorm_chunk_scale_kernel[(n_rows, chunks)](
            x2d, weight, y, squares, n_cols, x2d.stride(0), y.stride(0), float(eps),
            CHUNK=chunk, BLOCK_N=block, CHUNKS=triton.next_power_of_2(chunks), HAS_W=has_w, RSQRT=RSQRT, **options)
    elif n_cols <= MAX_BLOCK_N:
        block_n = triton.next_power_of_2(n_cols)
        rows = ROWS_PER_PROGRAM or max(1, min(16, 2048 // block_n))
        n_blocks = triton.cdiv(n_rows, rows)
        grid = (min(n_blocks, PERSISTENT * num_sms(x.device)),) if PERSISTENT else (n_blocks,)
        _rmsnorm_rows_kernel[grid](
            x2d, weight, y, n_rows, n_cols, x2d.stride(0), y.stride(0), float(eps),
            ROWS=rows, BLOCK_N=block_n, HAS_W=has_w, EVICTION=LOAD_EVICTION, RSQRT=RSQRT, ACC_FP32=ACC_FP32,
            EVEN=EVEN_MASKS and n_cols == block_n and n_rows % rows == 0,
            USE_TMA=TMA and tma_ready(x2d, y, block_cols=block_n), PERSISTENT=PERSISTENT > 0,
            **({} if AUTOTUNE else _launch_options(rows * block_n)))
    else:
        block_n = min(MAX_BLOCK_N, LOOP_BLOCK_N)
        _rmsnorm_wide_kernel[(n_rows,)](x2d, weight, y, n_cols, x2d.stride(0), y.stride(0), float(eps),
                                        BLOCK_N=block_n, HAS_W=has_w, RSQRT=RSQRT, ACC_FP32=ACC_FP32,
                                        **({} if AUTOTUNE else _launch_options(block_n)))
    return y.reshape(x.shape)

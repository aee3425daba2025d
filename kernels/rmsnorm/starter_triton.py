"""Triton starter for RMSNorm over the last dim (Llama style, fp32 math).

Rows up to 16384 columns are read once into registers, several narrow rows per program; wider rows
loop twice over the row (sum of squares, then scale). The weight is read once per program.

Few, wide rows (a norm over several trailing dims) would leave most SMs idle at one program per
row, so each row is then split into chunks over a 2-D grid: one kernel writes each chunk's sum of
squares, a second adds a row's partials and scales its own chunk (`split_plan` holds the rule, its
module constants are the knobs). Squares are non-negative, so fp32 partials summed per lane and
per chunk lose nothing to cancellation. The weight may be None (elementwise_affine=False).

The one-pass rows are loaded with eviction_policy="evict_last": the probes found it a little ahead of
no hint and of evict_first, at the speed of a device copy of the same bytes (numbers:
docs/results/kernel_notes.md).
"""

import functools

import torch
import triton
import triton.language as tl

MAX_FUSED_COLS = 16384

# The split rule (see `split_plan`): rows at least SPLIT_MIN_COLS wide are split when there are fewer
# than SPLIT_ROWS_PER_SM rows per SM; the split grid aims at SPLIT_PROGRAMS_PER_SM programs per SM,
# each walking its chunk SPLIT_BLOCK elements at a time.
SPLIT_MIN_COLS = MAX_FUSED_COLS + 1
SPLIT_ROWS_PER_SM = 4
SPLIT_PROGRAMS_PER_SM = 8
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
def _rmsnorm_rows_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
                         ROWS: tl.constexpr, BLOCK_N: tl.constexpr, HAS_W: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_ok[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    w = _gain(w_ptr, cols, col_ok, HAS_W)
    y = x * rstd[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_wide_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps, BLOCK_N: tl.constexpr,
                         HAS_W: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        x = tl.load(x_row + idx, mask=idx < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        ok = idx < n_cols
        x = tl.load(x_row + idx, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = _gain(w_ptr, idx, ok, HAS_W)
        tl.store(y_row + idx, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _rmsnorm_chunk_squares_kernel(x_ptr, sq_ptr, n_cols, stride_x, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr):
    """The sum of squares of one chunk of one row."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    x_row = x_ptr + row * stride_x
    first = chunk.to(tl.int64) * CHUNK
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        x = tl.load(x_row + idx, mask=idx < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    tl.store(sq_ptr + row * tl.num_programs(1) + chunk, tl.sum(acc, axis=0))


@triton.jit
def _rmsnorm_chunk_scale_kernel(x_ptr, w_ptr, y_ptr, sq_ptr, n_cols, stride_x, stride_y, eps,
                                CHUNK: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr,
                                HAS_W: tl.constexpr):
    """Add the row's partial sums of squares (a few hundred values, from L2), then scale one chunk."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    n_chunks = tl.num_programs(1)
    k = tl.arange(0, CHUNKS)
    partials = tl.load(sq_ptr + row * n_chunks + k, mask=k < n_chunks, other=0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(partials, axis=0) / n_cols + eps)
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


def _warps(elements_per_program):
    return 16 if elements_per_program >= 16384 else 8 if elements_per_program >= 4096 else 4


@functools.lru_cache(maxsize=None)
def _num_sms(device):
    """Streaming multiprocessors of the GPU; on the CPU interpreter a small fixed number."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def split_plan(n_rows, n_cols, num_sms):
    """(chunks per row, chunk length, tile) when rows should be split across programs, else None.

    One program per row fills the GPU only with enough rows; below SPLIT_ROWS_PER_SM rows per SM
    (and for rows too wide for registers) each row is cut into chunks, as many as bring the grid
    to about SPLIT_PROGRAMS_PER_SM programs per SM, each a whole number of tiles (one at least).
    """
    if n_cols < SPLIT_MIN_COLS or n_rows >= SPLIT_ROWS_PER_SM * num_sms:
        return None
    # At least a whole tile per program: less work than that is all set-up.
    per_chunk = max(triton.cdiv(n_cols, triton.cdiv(SPLIT_PROGRAMS_PER_SM * num_sms, n_rows)), SPLIT_BLOCK)
    chunk = triton.cdiv(per_chunk, SPLIT_BLOCK) * SPLIT_BLOCK
    chunks = triton.cdiv(n_cols, chunk)
    return (chunks, chunk, SPLIT_BLOCK) if chunks > 1 else None


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
    plan = split_plan(n_rows, n_cols, _num_sms(x.device))
    if plan is not None:
        chunks, chunk, block = plan
        squares = torch.empty((n_rows, chunks), dtype=torch.float32, device=x.device)
        warps = _warps(block)
        _rmsnorm_chunk_squares_kernel[(n_rows, chunks)](
            x2d, squares, n_cols, x2d.stride(0), CHUNK=chunk, BLOCK_N=block, num_warps=warps)
        _rmsnorm_chunk_scale_kernel[(n_rows, chunks)](
            x2d, weight, y, squares, n_cols, x2d.stride(0), y.stride(0), float(eps),
            CHUNK=chunk, BLOCK_N=block, CHUNKS=triton.next_power_of_2(chunks), HAS_W=has_w, num_warps=warps)
    elif n_cols <= MAX_FUSED_COLS:
        block_n = triton.next_power_of_2(n_cols)
        rows = max(1, min(16, 2048 // block_n))
        _rmsnorm_rows_kernel[(triton.cdiv(n_rows, rows),)](
            x2d, weight, y, n_rows, n_cols, x2d.stride(0), y.stride(0), float(eps),
            ROWS=rows, BLOCK_N=block_n, HAS_W=has_w, num_warps=_warps(rows * block_n))
    else:
        _rmsnorm_wide_kernel[(n_rows,)](x2d, weight, y, n_cols, x2d.stride(0), y.stride(0), float(eps),
                                        BLOCK_N=4096, HAS_W=has_w, num_warps=8)
    return y.reshape(x.shape)

"""Triton starter for softmax over the last dim.

Rows up to 32768 columns are read once into registers (one read, one write), with several narrow
rows per program so every program moves a few KB. Wider rows take an online pass (running max and
rescaled sum) and a normalising pass. fp32 math; exp2 of (x - max) * log2(e).
"""

import torch
import triton
import triton.language as tl

MAX_FUSED_COLS = 32768
LOG2E = 1.4426950408889634


@triton.jit
def _softmax_rows_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y,
                         ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
    m = tl.max(x, axis=1)
    # subtract first, then scale: prescaling x by log2(e) would round before the cancellation
    e = tl.exp2((x - m[:, None]) * 1.4426950408889634)
    e = tl.where(mask, e, 0.0)
    s = tl.sum(e, axis=1)
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], (e / s[:, None]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_wide_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    m = tl.full((BLOCK_N,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        x = tl.load(x_row + idx, mask=idx < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # lanes that have seen nothing yet keep m = -inf: guard the rescale against inf - inf
        s = s * tl.where(m_new == -float("inf"), 0.0, tl.exp2((m - m_new) * 1.4426950408889634)) + tl.where(
            x == -float("inf"), 0.0, tl.exp2((x - m_new) * 1.4426950408889634))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.where(m == -float("inf"), 0.0, tl.exp2((m - row_max) * 1.4426950408889634)), axis=0)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        ok = idx < n_cols
        x = tl.load(x_row + idx, mask=ok, other=-float("inf"), eviction_policy="evict_first").to(tl.float32)
        y = tl.exp2((x - row_max) * 1.4426950408889634) / total
        tl.store(y_row + idx, y.to(y_ptr.dtype.element_ty), mask=ok)


def _warps(elements_per_program):
    return 16 if elements_per_program >= 16384 else 8 if elements_per_program >= 4096 else 4


def kernel_fn(x):
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    n_rows = x2d.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0 or n_cols == 0:
        return y.reshape(x.shape)
    if n_cols <= MAX_FUSED_COLS:
        block_n = triton.next_power_of_2(n_cols)
        rows = max(1, min(16, 2048 // block_n))
        _softmax_rows_kernel[(triton.cdiv(n_rows, rows),)](
            x2d, y, n_rows, n_cols, x2d.stride(0), y.stride(0),
            ROWS=rows, BLOCK_N=block_n, num_warps=_warps(rows * block_n))
    else:
        _softmax_wide_kernel[(n_rows,)](x2d, y, n_cols, x2d.stride(0), y.stride(0), BLOCK_N=4096, num_warps=8)
    return y.reshape(x.shape)

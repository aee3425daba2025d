"""Triton starter for LayerNorm over the last dim.

Rows that fit in registers (up to 16384 columns) are normalised from one read: a tile of ROWS rows
per program (several rows when they are narrow, so every program moves a few KB), a centred
variance of the data shifted by the row's first element (exact for constant rows), fp32 math,
weight and bias read once per program. Wider rows loop over the row in three passes (mean,
centred variance, normalise).

The rows load with evict_last and take the shift with one scalar load instead of a third reduction
over the tile: the probes found the earlier form behind the playbook template's rows, which ran at
copy speed (numbers: docs/results/kernel_notes.md).
"""

import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# Elements of narrow rows packed into one program. The interpreter pays per program, not per element,
# so it gets bigger tiles.
ROW_TILE, MAX_ROWS = (16384, 128) if INTERPRETED else (2048, 16)

MAX_FUSED_COLS = 16384


@triton.jit
def _layernorm_rows_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
                           ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_ok[None, :]
    # Shift by the row's first element before averaging: exact for constant rows, and it keeps
    # the fp32 sum small for rows far from zero. A scalar load per row (served by L1 from the same
    # line as the tile), not a third reduction over the tile.
    shift = tl.load(x_ptr + rows * stride_x, mask=rows < n_rows, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    x = tl.where(mask, x - shift[:, None], 0.0)
    mean = tl.sum(x, axis=1) / n_cols
    diff = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(diff * diff, axis=1) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    y = diff * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_wide_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                           BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    shift = tl.load(x_row).to(tl.float32)  # see the rows kernel: exact for constant rows
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        x = tl.load(x_row + idx, mask=idx < n_cols, other=0.0).to(tl.float32)
        acc += tl.where(idx < n_cols, x - shift, 0.0)
    mean = shift + tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        x = tl.load(x_row + idx, mask=idx < n_cols, other=0.0).to(tl.float32)
        d = tl.where(idx < n_cols, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        ok = idx < n_cols
        x = tl.load(x_row + idx, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + idx, mask=ok, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + idx, mask=ok, other=0.0).to(tl.float32)
        tl.store(y_row + idx, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=ok)


def _warps(elements_per_program):
    return 16 if elements_per_program >= 16384 else 8 if elements_per_program >= 4096 else 4


def kernel_fn(x, weight, bias, eps=1e-5):
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    weight, bias = weight.contiguous(), bias.contiguous()
    n_rows = x2d.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0:
        return y.reshape(x.shape)
    if n_cols <= MAX_FUSED_COLS:
        block_n = triton.next_power_of_2(n_cols)
        rows = max(1, min(MAX_ROWS, ROW_TILE // block_n))
        _layernorm_rows_kernel[(triton.cdiv(n_rows, rows),)](
            x2d, weight, bias, y, n_rows, n_cols, x2d.stride(0), y.stride(0), float(eps),
            ROWS=rows, BLOCK_N=block_n, num_warps=_warps(rows * block_n))
    else:
        block_n = 4096
        _layernorm_wide_kernel[(n_rows,)](
            x2d, weight, bias, y, n_cols, x2d.stride(0), y.stride(0), float(eps),
            BLOCK_N=block_n, num_warps=8)
    return y.reshape(x.shape)

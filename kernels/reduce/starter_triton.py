"""Triton starter for reduce (sum over the last dim): a tile of rows per program, fp32 lanes.

Each program owns ROWS rows and walks them BLOCK_N columns at a time, adding into an fp32
[ROWS, BLOCK_N] accumulator; one tree reduction per row at the end. Narrow rows are packed
several to a program so each program still moves a few KB. The order of additions is fixed,
so the result is bitwise repeatable.

The row width is compiled in (one compile per width, as torch.compile does), and when the rows and the
width divide into whole tiles the loads carry no masks at all: that is what torch.compile's kernel had
over the masked form with a run-time width (numbers: docs/results/kernel_notes.md).
"""

import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# Elements of narrow rows packed into one program. The interpreter pays per program, not per element,
# so it gets bigger tiles.
ROW_TILE, MAX_ROWS = (16384, 256) if INTERPRETED else (4096, 64)


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


def kernel_fn(x):
    n_cols = x.shape[-1] if x.dim() else 1
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    n_rows = x2d.shape[0]
    out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
    if n_rows:
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

"""Triton starter for softmax over the last dim.

Rows up to 32768 columns are read once into registers (one read, one write), with several narrow
rows per program so every program moves a few KB. Wider rows take an online pass (running max and
rescaled sum) and a normalising pass. fp32 math; exp2 of (x - max) * log2(e).

Choices the probes settled (numbers: docs/results/kernel_notes.md):
- rows of 16385..32768 columns: one row per program, 32 warps, a 1-D tile streamed with evict_first
  (near copy speed, ahead of a 2-D rows tile over 16 warps);
- wider rows: the normalising pass re-reads the row, and with one program per row ~1000 rows sit between
  their two passes, far more than the L2 holds, so the re-read comes from memory. One program per SM
  looping over rows keeps ~130 rows (33 MB) between passes, the first pass asks the L2 to keep them
  (evict_last), and tiles of 16384 over 32 warps keep enough bytes in flight. The second pass walks the
  row backwards, so it starts on the lines the first pass touched last.

The launcher does per call only what depends on the call: at a launch-bound size (H100, 4096x4096 bf16:
the wall clock is the host's) every line of Python in it shows. The launch (kernel, grid, block, warps)
is worked out once per shape and kept (at most MAX_PLANS shapes: a model with dynamic shapes would
otherwise grow the table without end); a contiguous x is passed as it is (the kernel only needs its
pointer and row stride, so no 2-D view), and y is allocated in x's shape (no reshape back).
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
def _softmax_row_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=-float("inf"), eviction_policy="evict_first")
    x = x.to(tl.float32)
    e = tl.where(ok, tl.exp2((x - tl.max(x, axis=0)) * 1.4426950408889634), 0.0)
    tl.store(y_ptr + row * stride_y + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _softmax_wide_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, programs, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    last_tile = tl.cdiv(n_cols, BLOCK_N) - 1
    for r in range(tl.program_id(0), n_rows, programs):
        row = tl.cast(r, tl.int64)
        x_row = x_ptr + row * stride_x
        y_row = y_ptr + row * stride_y
        m = tl.full((BLOCK_N,), -float("inf"), tl.float32)
        s = tl.zeros((BLOCK_N,), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            idx = start + cols
            x = tl.load(x_row + idx, mask=idx < n_cols, other=-float("inf"), eviction_policy="evict_last").to(tl.float32)
            m_new = tl.maximum(m, x)
            # lanes that have seen nothing yet keep m = -inf: guard the rescale against inf - inf
            s = s * tl.where(m_new == -float("inf"), 0.0, tl.exp2((m - m_new) * 1.4426950408889634)) + tl.where(
                x == -float("inf"), 0.0, tl.exp2((x - m_new) * 1.4426950408889634))
            m = m_new
        row_max = tl.max(m, axis=0)
        total = tl.sum(s * tl.where(m == -float("inf"), 0.0, tl.exp2((m - row_max) * 1.4426950408889634)), axis=0)
        for back in range(0, last_tile + 1):  # last tile first: the lines the first pass read most recently
            idx = (last_tile - back) * BLOCK_N + cols
            ok = idx < n_cols
            x = tl.load(x_row + idx, mask=ok, other=-float("inf"), eviction_policy="evict_first").to(tl.float32)
            y = tl.exp2((x - row_max) * 1.4426950408889634) / total
            tl.store(y_row + idx, y.to(y_ptr.dtype.element_ty), mask=ok)


def _programs(n_rows, device):
    """One program per SM (see the module docstring); 8 under the interpreter, which has no SMs."""
    if device.type != "cuda":
        return min(n_rows, 8)
    return min(n_rows, torch.cuda.get_device_properties(device).multi_processor_count)


def _warps(elements_per_program):
    return 16 if elements_per_program >= 16384 else 8 if elements_per_program >= 4096 else 4


def _plan(n_rows, n_cols, stride_x, device):
    """The launch for one shape: (the kernel with its grid bound, the arguments after x and y, the launch
    options). The same for every call at a shape, so `kernel_fn` computes it once per shape."""
    if MAX_FUSED_COLS // 2 < n_cols <= MAX_FUSED_COLS:
        return (_softmax_row_kernel[(n_rows,)], (n_cols, stride_x, n_cols),
                {"BLOCK_N": MAX_FUSED_COLS, "num_warps": 32})
    if n_cols <= MAX_FUSED_COLS:
        block_n = triton.next_power_of_2(n_cols)
        rows = max(1, min(16, 2048 // block_n))
        return (_softmax_rows_kernel[(triton.cdiv(n_rows, rows),)], (n_rows, n_cols, stride_x, n_cols),
                {"ROWS": rows, "BLOCK_N": block_n, "num_warps": _warps(rows * block_n)})
    programs = _programs(n_rows, device)
    return (_softmax_wide_kernel[(programs,)], (n_rows, n_cols, stride_x, n_cols, programs),
            {"BLOCK_N": 16384, "num_warps": 32})


_PLANS: dict = {}  # (elements, columns, row stride, device index) -> _plan(...), at most MAX_PLANS
MAX_PLANS = 256


def kernel_fn(x):
    n_cols = x.shape[-1]
    if x.is_contiguous():
        x2d, stride_x = x, n_cols  # the kernel reads rows through pointers: no 2-D view is needed
    else:
        x2d = x.reshape(-1, n_cols)
        if x2d.stride(-1) != 1:
            x2d = x2d.contiguous()
        stride_x = x2d.stride(0)
    y = torch.empty_like(x, memory_format=torch.contiguous_format)  # written as [rows, n_cols], x's shape
    numel = x.numel()
    if numel == 0:
        return y
    key = (numel, n_cols, stride_x, x.get_device())
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= MAX_PLANS:  # emptied, not evicted one by one: a lookup stays one dict get
            _PLANS.clear()
        plan = _PLANS[key] = _plan(numel // n_cols, n_cols, stride_x, x.device)
    launch, args, options = plan
    launch(x2d, y, *args, **options)
    return y

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

The knobs below are this file's choices as constants: the playbook agent writes a candidate by moving
one of them (their reasons: autokernel/playbook/templates/softmax.py). A 0 or None is the rule above,
per path.
"""

import os

import torch
import triton
import triton.language as tl

from autokernel.kernels.triton_common import (autotuned, exp, launch_options, num_sms, row_view, tma_ready,
                                              warps_for_elements)

NUM_WARPS = 0  # tier 1, launch shape: 0 = by path (4 to 16 by elements per program; 32 for one row)
NUM_STAGES = 0  # tier 1, launch shape: 0 = Triton's default
ROWS_PER_PROGRAM = 0  # tier 2, memory access: 0 = rows making 2048 elements (at most 16), a 1-D tile past 16384
PERSISTENT = 1  # tier 2, memory access: programs per SM looping over looped rows (0 = one per row)
LOAD_EVICTION = None  # tier 2, memory access: None = none for whole rows; evict_first, or last then first
MAX_BLOCK_N = 32768  # tier 2, memory access: rows up to this wide are held whole, wider ones loop over tiles
BACKWARDS = True  # tier 2, memory access: a looped row's write pass starts at its last tile
EXP2 = True  # tier 3, compute: exp as exp2 with log2(e) folded into one multiply
ONLINE = True  # tier 4, algorithm: a looped row's max and sum in one pass (False: a pass each)
AUTOTUNE = False  # tier 4, algorithm: triton.autotune picks num_warps at run time
TMA = False  # tier 5, Hopper: whole rows through tensor descriptors (they take the 2-D rows kernel)
RECIPROCAL = False  # tier 6, kernel-specific: multiply by 1/sum instead of dividing by the sum

MAX_FUSED_COLS = 32768  # rows of MAX_FUSED_COLS // 2 + 1 columns and more held whole get a 1-D program each
WIDE_BLOCK_N = 16384  # the tile of a looped row (at most MAX_BLOCK_N)
LOG2E = 1.4426950408889634


@triton.jit
def _normalise(e, total, RECIPROCAL: tl.constexpr):
    if RECIPROCAL:
        return e * (1.0 / total)
    else:
        return e / total


@triton.jit
def _softmax_rows_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y,
                         ROWS: tl.constexpr, BLOCK_N: tl.constexpr, EVICTION: tl.constexpr = "",
                         EXP2: tl.constexpr = True, RECIPROCAL: tl.constexpr = False, USE_TMA: tl.constexpr = False):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    if USE_TMA:  # a descriptor pads columns past the end with zeros: they are set to -inf after
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[n_rows, n_cols], strides=[stride_x, 1],
                                           block_shape=[ROWS, BLOCK_N])
        x = tl.where(mask, x_desc.load([tl.program_id(0) * ROWS, 0]).to(tl.float32), -float("inf"))
    else:
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=-float("inf"),
                    eviction_policy=EVICTION)
    x = x.to(tl.float32)
    m = tl.max(x, axis=1)
    # subtract first, then scale: prescaling x by log2(e) would round before the cancellation
    e = exp(x - m[:, None], EXP2)
    e = tl.where(mask, e, 0.0)
    s = tl.sum(e, axis=1)
    if USE_TMA:
        y_desc = tl.make_tensor_descriptor(y_ptr, shape=[n_rows, n_cols], strides=[stride_y, 1],
                                           block_shape=[ROWS, BLOCK_N])
        y_desc.store([tl.program_id(0) * ROWS, 0], _normalise(e, s[:, None], RECIPROCAL).to(y_ptr.dtype.element_ty))
    else:
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :],
                 _normalise(e, s[:, None], RECIPROCAL).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_row_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr,
                        EVICTION: tl.constexpr = "evict_first", EXP2: tl.constexpr = True,
                        RECIPROCAL: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=-float("inf"), eviction_policy=EVICTION)
    x = x.to(tl.float32)
    e = tl.where(ok, exp(x - tl.max(x, axis=0), EXP2), 0.0)
    tl.store(y_ptr + row * stride_y + cols, _normalise(e, tl.sum(e, axis=0), RECIPROCAL).to(y_ptr.dtype.element_ty),
             mask=ok)


@triton.jit
def _softmax_wide_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, programs, BLOCK_N: tl.constexpr,
                         FIRST_EVICTION: tl.constexpr = "evict_last", LAST_EVICTION: tl.constexpr = "evict_first",
                         ONLINE: tl.constexpr = True, BACKWARDS: tl.constexpr = True, EXP2: tl.constexpr = True,
                         RECIPROCAL: tl.constexpr = False):
    cols = tl.arange(0, BLOCK_N)
    last_tile = tl.cdiv(n_cols, BLOCK_N) - 1
    for r in range(tl.program_id(0), n_rows, programs):
        row = tl.cast(r, tl.int64)
        x_row = x_ptr + row * stride_x
        y_row = y_ptr + row * stride_y
        if ONLINE:
            m = tl.full((BLOCK_N,), -float("inf"), tl.float32)
            s = tl.zeros((BLOCK_N,), tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                idx = start + cols
                x = tl.load(x_row + idx, mask=idx < n_cols, other=-float("inf"),
                            eviction_policy=FIRST_EVICTION).to(tl.float32)
                m_new = tl.maximum(m, x)
                # lanes that have seen nothing yet keep m = -inf: guard the rescale against inf - inf
                s = s * tl.where(m_new == -float("inf"), 0.0, exp(m - m_new, EXP2)) + tl.where(
                    x == -float("inf"), 0.0, exp(x - m_new, EXP2))
                m = m_new
            row_max = tl.max(m, axis=0)
            total = tl.sum(s * tl.where(m == -float("inf"), 0.0, exp(m - row_max, EXP2)), axis=0)
        else:  # a pass for the max, then one for the sum
            m = tl.full((BLOCK_N,), -float("inf"), tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                idx = start + cols
                m = tl.maximum(m, tl.load(x_row + idx, mask=idx < n_cols, other=-float("inf"),
                                          eviction_policy=FIRST_EVICTION).to(tl.float32))
            row_max = tl.max(m, axis=0)
            s = tl.zeros((BLOCK_N,), tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                idx = start + cols
                x = tl.load(x_row + idx, mask=idx < n_cols, other=-float("inf"),
                            eviction_policy=FIRST_EVICTION).to(tl.float32)
                s += tl.where(x == -float("inf"), 0.0, exp(x - row_max, EXP2))
            total = tl.sum(s, axis=0)
        for back in range(0, last_tile + 1):  # last tile first: the lines the first pass read most recently
            if BACKWARDS:
                idx = (last_tile - back) * BLOCK_N + cols
            else:
                idx = back * BLOCK_N + cols
            ok = idx < n_cols
            x = tl.load(x_row + idx, mask=ok, other=-float("inf"), eviction_policy=LAST_EVICTION).to(tl.float32)
            y = _normalise(exp(x - row_max, EXP2), total, RECIPROCAL)
            tl.store(y_row + idx, y.to(y_ptr.dtype.element_ty), mask=ok)


if AUTOTUNE:
    _INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
    _softmax_rows_kernel = autotuned(_softmax_rows_kernel, ["n_cols", "ROWS"], (8, 4, 16), NUM_STAGES, _INTERPRETED)
    _softmax_row_kernel = autotuned(_softmax_row_kernel, ["n_cols"], (8, 4, 16), NUM_STAGES, _INTERPRETED)
    _softmax_wide_kernel = autotuned(_softmax_wide_kernel, ["n_cols"], (8, 4, 16), NUM_STAGES, _INTERPRETED)


def _programs(n_rows, device, per_sm=1):
    """per_sm programs per SM (see the module docstring); 8 per_sm under the interpreter, which has no SMs."""
    if device.type != "cuda":
        return min(n_rows, 8 * per_sm)
    return min(n_rows, per_sm * num_sms(device))


def _options(constexprs, warps):
    """A launch's keyword arguments: the constexprs, num_warps (NUM_WARPS, else the path's `warps`) and
    num_stages (NUM_STAGES, else Triton's default); autotune picks its own."""
    return launch_options(constexprs, NUM_WARPS or warps, NUM_STAGES, AUTOTUNE)


def _plan(n_rows, n_cols, stride_x, device):
    """The launch for one shape: (the kernel with its grid bound, the arguments after x and y, the launch
    options). The same for every call at a shape, so `kernel_fn` computes it once per shape."""
    if n_cols > MAX_BLOCK_N:
        programs = _programs(n_rows, device, PERSISTENT) if PERSISTENT else n_rows
        first, last = ("evict_last", "evict_first") if LOAD_EVICTION is None else (LOAD_EVICTION, LOAD_EVICTION)
        return (_softmax_wide_kernel[(programs,)], (n_rows, n_cols, stride_x, n_cols, programs),
                _options({"BLOCK_N": min(WIDE_BLOCK_N, MAX_BLOCK_N), "FIRST_EVICTION": first, "LAST_EVICTION": last,
                          "ONLINE": ONLINE, "BACKWARDS": BACKWARDS, "EXP2": EXP2, "RECIPROCAL": RECIPROCAL}, 32))
    block_n = triton.next_power_of_2(n_cols)
    if n_cols > MAX_FUSED_COLS // 2 and not ROWS_PER_PROGRAM and not TMA:
        eviction = "evict_first" if LOAD_EVICTION is None else LOAD_EVICTION
        return (_softmax_row_kernel[(n_rows,)], (n_cols, stride_x, n_cols),
                _options({"BLOCK_N": block_n, "EVICTION": eviction, "EXP2": EXP2, "RECIPROCAL": RECIPROCAL}, 32))
    rows = ROWS_PER_PROGRAM or max(1, min(16, 2048 // block_n))
    return (_softmax_rows_kernel[(triton.cdiv(n_rows, rows),)], (n_rows, n_cols, stride_x, n_cols),
            _options({"ROWS": rows, "BLOCK_N": block_n, "EVICTION": LOAD_EVICTION or "", "EXP2": EXP2,
                      "RECIPROCAL": RECIPROCAL, "USE_TMA": False}, warps_for_elements(rows * block_n)))


_PLANS: dict = {}  # (elements, columns, row stride, device index) -> _plan(...), at most MAX_PLANS
MAX_PLANS = 256


def kernel_fn(x):
    n_cols = x.shape[-1]
    if x.is_contiguous():
        x2d, stride_x = x, n_cols  # the kernel reads rows through pointers: no 2-D view is needed
    else:
        x2d = row_view(x)
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
    if TMA and "USE_TMA" in options:  # the rows kernel: descriptors' 16-byte rules depend on this call's pointers
        options = {**options, "USE_TMA": tma_ready(x2d.view(-1, n_cols), y.view(-1, n_cols), block_cols=options["BLOCK_N"])}
    launch(x2d, y, *args, **options)
    return y

"""Helpers every Triton starter would otherwise carry a copy of: host rules and small @triton.jit pieces.

A starter imports from here in one line (`from autokernel.kernels.triton_common import ...`). What must
stand alone gets this file too: an exported package a copy beside the candidate, a one-file KernelBench
ModelNew its text where the candidate imports it (engine/standalone.py). So it imports only torch and triton.
"""

import functools

import torch
import triton
import triton.language as tl


@functools.lru_cache(maxsize=None)
def num_sms(device):
    """Streaming multiprocessors of the GPU; on the CPU interpreter a small fixed number."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def tma_ready(*tensors, block_cols=16):
    """True where tensor descriptors can be used for these 2-D tensors and tiles `block_cols` wide: Triton has
    them, the GPU is sm_90 or later (or the interpreter runs), and each tensor's base, row stride and tile row
    meet TMA's 16-byte rules with unit-stride rows. Sets Triton's allocator for the descriptors' scratch."""
    if not (hasattr(tl, "make_tensor_descriptor") and hasattr(triton, "set_allocator")):
        return False
    if block_cols * tensors[0].element_size() < 16:  # a descriptor's tile row must span 16 bytes
        return False
    t0 = tensors[0]
    if t0.is_cuda and torch.cuda.get_device_capability(t0.device)[0] < 9:
        return False
    for t in tensors:
        if t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16 or t.stride(-1) != 1:
            return False
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=t0.device))
    return True


def warps_for_elements(elements_per_program):
    """num_warps by the elements one program holds: 4, 8 from 4096, 16 from 16384."""
    return 16 if elements_per_program >= 16384 else 8 if elements_per_program >= 4096 else 4


def launch_options(constexprs, num_warps, num_stages, autotune):
    """A launch's keyword arguments: the constexprs, then num_warps and (where nonzero; 0 keeps Triton's
    default) num_stages, unless autotune picks its own."""
    options = dict(constexprs)
    if not autotune:
        options["num_warps"] = num_warps
        if num_stages:
            options["num_stages"] = num_stages
    return options


def row_launch(num_warps, num_stages, elements_per_program, autotune=False):
    """A row kernel's num_warps (the knob, else by the elements one program holds) and num_stages, as
    `launch_options` gives them: none where autotune picks its own."""
    return launch_options({}, num_warps or warps_for_elements(elements_per_program), num_stages, autotune)


def autotuned(kernel, key, warps, num_stages, interpreted):
    """`kernel` under triton.autotune over these num_warps (and num_stages where nonzero), keyed by the
    argument names `key`; the CPU interpreter cannot time configs, so there it gets the first one."""
    configs = [triton.Config({}, num_warps=w, **({"num_stages": num_stages} if num_stages else {})) for w in warps]
    return triton.autotune(configs=configs[:1] if interpreted else configs, key=key)(kernel)


def row_view(x):
    """x as a 2-D [rows, last dim] tensor whose rows have unit stride: x itself where it already is one, a
    view where the reshape allows it, a copy only where the last dim is strided."""
    x2d = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
    return x2d if x2d.stride(-1) == 1 else x2d.contiguous()


def programs(blocks, per_sm, device):
    """Programs of a grid over `blocks` blocks: one each, or where `per_sm` is set a persistent grid of at
    most that many per SM, each looping over blocks."""
    return min(blocks, per_sm * num_sms(device)) if per_sm else blocks


def row_split_plan(n_rows, n_cols, num_sms, min_cols, rows_per_sm, programs_per_sm, block):
    """(chunks per row, chunk length, tile) when rows should be split across programs, else None.

    One program per row fills the GPU only with enough rows; below `rows_per_sm` rows per SM (and for rows
    of at least `min_cols`) each row is cut into chunks, as many as bring the grid to about
    `programs_per_sm` programs per SM, each a whole number of `block`-wide tiles (one at least).
    """
    if n_cols < min_cols or n_rows >= rows_per_sm * num_sms:
        return None
    # At least a whole tile per program: less work than that is all set-up.
    per_chunk = max(triton.cdiv(n_cols, triton.cdiv(programs_per_sm * num_sms, n_rows)), block)
    chunk = triton.cdiv(per_chunk, block) * block
    chunks = triton.cdiv(n_cols, chunk)
    return (chunks, chunk, block) if chunks > 1 else None


def span(t):
    """The largest element offset a 2-D tensor's strides reach."""
    return sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))


@triton.jit
def exp(z, EXP2: tl.constexpr):
    """exp(z); with EXP2, exp2(z * log2(e)): the hardware's ex2 with the scale folded into one multiply."""
    if EXP2:
        return tl.exp2(z * 1.4426950408889634)
    else:
        return tl.exp(z)


@triton.jit
def inverse_sqrt(v, RSQRT: tl.constexpr):
    """1 / sqrt(v); with RSQRT the one rsqrt instruction instead of a square root and a divide."""
    if RSQRT:
        inv = tl.rsqrt(v)
    else:
        inv = 1.0 / tl.sqrt(v)
    return inv


@triton.jit
def column_param(ptr, idx, ok, PRESENT: tl.constexpr, ABSENT: tl.constexpr):
    """A per-column parameter (a norm's weight or bias) at `idx` in fp32; where the op has none (not
    PRESENT), ABSENT at every column without a load."""
    if PRESENT:
        v = tl.load(ptr + idx, mask=ok, other=0.0).to(tl.float32)
    else:
        v = tl.full(idx.shape, ABSENT, tl.float32)
    return v


@triton.jit
def row_block_descriptors(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, ROWS: tl.constexpr,
                          BLOCK_N: tl.constexpr, USE_TMA: tl.constexpr):
    """Tensor descriptors of the [ROWS, BLOCK_N] blocks of an input and an output [n_rows, n_cols] where
    USE_TMA, else the pointers themselves (then `load_row_block` and `store_row_block` never read them)."""
    if USE_TMA:
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[n_rows, n_cols], strides=[stride_x, 1],
                                           block_shape=[ROWS, BLOCK_N])
        y_desc = tl.make_tensor_descriptor(y_ptr, shape=[n_rows, n_cols], strides=[stride_y, 1],
                                           block_shape=[ROWS, BLOCK_N])
    else:
        x_desc, y_desc = x_ptr, y_ptr
    return x_desc, y_desc


@triton.jit
def load_row_block(x_ptr, x_desc, row_block, rows, cols, mask, stride_x, ROWS: tl.constexpr, EVICTION: tl.constexpr,
                   EVEN: tl.constexpr, USE_TMA: tl.constexpr):
    """Row block `row_block` (rows `rows`, columns `cols`) in the input's dtype: through its descriptor
    (USE_TMA), unmasked (EVEN: every row and column exists) or masked with zeros."""
    x_ptrs = x_ptr + rows[:, None] * stride_x + cols[None, :]
    if USE_TMA:
        x = x_desc.load([row_block * ROWS, 0])
    elif EVEN:
        x = tl.load(x_ptrs, eviction_policy=EVICTION)
    else:
        x = tl.load(x_ptrs, mask=mask, other=0.0, eviction_policy=EVICTION)
    return x


@triton.jit
def store_row_block(y_ptr, y_desc, y, row_block, rows, cols, mask, stride_y, ROWS: tl.constexpr, EVEN: tl.constexpr,
                    USE_TMA: tl.constexpr):
    """`y` into row block `row_block` of the output, in its dtype, the way `load_row_block` reads."""
    if USE_TMA:
        y_desc.store([row_block * ROWS, 0], y.to(y_ptr.dtype.element_ty))
    elif EVEN:
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty))
    else:
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def load_k_tiles(a_ptrs, b_ptrs, offs_k, k_left, EVEN_K: tl.constexpr):
    """One K step's A [M, BLOCK_K] and B [BLOCK_K, N] tiles through pointers; past the K tail (`k_left`
    elements left) they read zeros unless EVEN_K says there is none."""
    if EVEN_K:
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
    else:
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
    return a, b


@triton.jit
def dot_acc(a, b, acc, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b; UPCAST widens to fp32 first (the interpreter's bf16 dot is wrong), IEEE (or UPCAST)
    asks for full fp32 precision instead of tf32."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if IEEE or UPCAST:
        acc = tl.dot(a, b, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(tile row, tile column) of `tile` in grouped order: GROUP_M tile-rows share their B tiles in L2."""
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    return first_pid_m + ((tile % num_pid_in_group) % group_size_m), (tile % num_pid_in_group) // group_size_m


@triton.jit
def ab_tile_pointers(a_ptr, b_ptr, pid_m, pid_n, M, N, stride_am, stride_ak, stride_bk, stride_bn, INT64: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The first K step's pointers into A [M, K] and B [K, N] for output tile (pid_m, pid_n), and the K
    offsets. Rows and columns past the edge wrap around (valid addresses, results never stored); INT64
    for element offsets past 2**31 (e.g. a 16k x 128k logits matrix)."""
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    if INT64:
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    return a_ptrs, b_ptrs, offs_k


@triton.jit
def store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, INT64: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """`acc` into output tile (pid_m, pid_n) of C [M, N] in C's dtype, masked at the edges."""
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if INT64:
        offs_cm = offs_cm.to(tl.int64)
        offs_cn = offs_cn.to(tl.int64)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)

"""Triton starter for the SwiGLU MLP: one fused gate/up kernel, then the down projection.

On Hopper (and under the interpreter) with 16-bit inputs whose rows are 16-byte aligned, both kernels
read their tiles through tensor descriptors (TMA): the weights' [BLOCK_N, BLOCK_K] tiles are K-major, as
wgmma takes them, and the copy engine does the address math and the zero padding at the edges. The
gate/up kernel keeps two fp32 accumulators over the same x tile and writes silu(g) * u once, in x's
dtype; the down kernel is a plain matmul h @ w_down.T. On Hopper this form keeps up with the eager
cuBLAS SwiGLU where the pointer form below trails it (numbers: docs/results/kernel_notes.md).

Elsewhere (fp32, unaligned rows, older GPUs) the pointer form: gate/up as one matmul over w_gate and
w_up with their columns interleaved (gate j, up j, gate j+1, ...), read straight from both weights, one
dot per K step, the epilogue splitting the pairs; then a tiled, grouped-order matmul. Weights are read
through the strides of their transposed views (no copies). Big problems are autotuned over a few H100
tiles; small ones, and everything under TRITON_INTERPRET=1, use one small tile. Under the interpreter
bf16 tiles are widened to fp32 before tl.dot (the interpreter's bf16 dot is wrong; the widening is
exact).

The knobs below are this file's variants, the playbook agent's space (playbook/templates/fused_mlp.py):
each is read by the launch code or passed to the kernels as a constexpr, and at the values written
here the starter runs as described above.
"""

import os

import torch
import triton
import triton.language as tl

from triton.tools.tensor_descriptor import TensorDescriptor  # Triton 3.3+ (the project's lower bound)

from autokernel.kernels.triton_common import ab_tile_pointers, dot_acc, grouped_tile, load_k_tiles, span, store_tile

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# Knobs, each with its playbook tier. A tile knob of None leaves that part of the tile to the lists
# below; set, it replaces it in every tile of both kernels (the autotuned ones too).
BLOCK_M = None  # tier 1, launch shape
BLOCK_N = None  # tier 1, launch shape: interleaved gate/up tiles count gate and up columns, TMA ones each
BLOCK_K = None  # tier 1, launch shape
NUM_WARPS = None  # tier 1, launch shape
NUM_STAGES = None  # tier 1, launch shape
GROUP_M = 8  # tier 2, memory access: tile rows per group of programs that share weight tiles in L2
EXP2_SIGMOID = False  # tier 3, compute: SiLU's sigmoid through exp2 with log2(e) folded in, instead of exp
H_FP32 = False  # tier 3, compute: the intermediate h in fp32 (one rounding fewer, twice the bytes; pointer kernels)
INTERLEAVED = True  # tier 4, algorithm: pointer gate/up as one dot over interleaved columns (False: two dots)
TMA = True  # tier 5, Hopper: the descriptor kernels wherever _tma_ready allows them
WARP_SPECIALIZE = False  # tier 5, Hopper: producer and consumer warps in the K loops

# The kernels read these two knobs as constexpr globals, so their signatures (what a script or test
# compiles them with on its own) do not depend on the knobs.
_EXP2_SIGMOID = tl.constexpr(EXP2_SIGMOID)
_WARP_SPECIALIZE = tl.constexpr(WARP_SPECIALIZE)


def _with_knobs(tile):
    """`tile` (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) with each tile knob that is set in place."""
    return tuple(own if knob is None else knob for own, knob in zip(tile, (BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES)))


def _tuned(kernel, tiles):
    """`kernel` autotuned over `tiles` (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)."""
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": GROUP_M}, num_warps=w, num_stages=st)
               for m, n, k, w, st in dict.fromkeys(map(_with_knobs, tiles))]
    return triton.autotune(configs=configs, key=["M", "N", "K", "IEEE", "UPCAST"])(kernel)


# Autotuned on a GPU for problems big enough to repay it (each config is compiled per dtype, then
# timed); small problems, and everything under the interpreter, use SMALL_TILE directly.
# The gate/up tile is a plain matmul tile over the interleaved [gate | up] columns (BLOCK_N counts
# both), so it takes the matmul starter's H100 tiles.
GATE_UP_TILES = [
    (128, 256, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 32, 4, 4),  # fits fp32 (IEEE) shared-memory budgets
]
DOWN_TILES = [
    (128, 256, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4),
    (64, 64, 32, 4, 4),
]
SMALL_TILE = (64, 64, 32, 4, 3)
# Tensor-descriptor (TMA) tiles, chosen on Hopper with scripts/mlp_probe.py: for gate/up BLOCK_N is each of
# the two accumulators' width (128 + 128 columns of [gate | up] per tile; 256x64 was slower); for down,
# 128x256 and 256x128 came closest to cuBLAS at the Llama shape, 128x128 behind them.
GATE_UP_TMA_TILES = [
    (128, 128, 64, 8, 4),
    (128, 128, 64, 8, 3),
]
DOWN_TMA_TILES = [
    (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3),
]
AUTOTUNE_MIN_WORK = 1 << 24  # tokens*hidden*intermediate below this (256**3) is launch-bound


@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's tile in grouped order."""
    return grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)


@triton.jit
def _silu_times(g, u):
    """silu(g) * u in fp32, the sigmoid through exp2 with log2(e) folded in where EXP2_SIGMOID is set."""
    if _EXP2_SIGMOID:
        h = g / (1.0 + tl.exp2(-g * 1.4426950408889634)) * u
    else:
        h = g / (1.0 + tl.exp(-g)) * u
    return h


@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _gate_up_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K,
                    stride_xm, stride_xk, stride_wk, stride_wn, stride_hm, stride_hn,
                    IEEE: tl.constexpr, UPCAST: tl.constexpr, INT64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    """One [BLOCK_M, BLOCK_N] tile of x @ [w_gate | w_up].T with the two interleaved column by column
    (even columns gate j, odd columns up j, for BLOCK_N // 2 columns j of h), so it is one plain dot per
    K step, the same wgmma and cp.async pipeline as a matmul; the epilogue splits the pairs and writes
    silu(g) * u for its BLOCK_N // 2 columns of h."""
    HALF: tl.constexpr = BLOCK_N // 2
    pid_m, pid_n = _tile_ids(M, 2 * N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    c = tl.arange(0, BLOCK_N)
    cols = (pid_n * HALF + c // 2) % N
    if INT64:  # element offsets past 2**31 (e.g. a 16k x 128k logits matrix)
        offs_m = offs_m.to(tl.int64)
        cols = cols.to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_offs = offs_k[:, None] * stride_wk + cols[None, :] * stride_wn  # w_gate and w_up share a layout
    w_ptrs = tl.where((c % 2 == 1)[None, :], wu_ptr + w_offs, wg_ptr + w_offs)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=_WARP_SPECIALIZE):
        x, w = load_k_tiles(x_ptrs, w_ptrs, offs_k, K - k * BLOCK_K, EVEN_K)
        acc = dot_acc(x, w, acc, IEEE, UPCAST)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    g, u = tl.split(tl.reshape(acc, (BLOCK_M, HALF, 2)))
    store_tile(h_ptr, _silu_times(g, u), pid_m, pid_n, M, N, stride_hm, stride_hn, INT64, BLOCK_M, HALF)


@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _gate_up_two_dots_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K,
                             stride_xm, stride_xk, stride_wk, stride_wn, stride_hm, stride_hn,
                             IEEE: tl.constexpr, UPCAST: tl.constexpr, INT64: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    """The gate/up tile of the pointer form without interleaving (INTERLEAVED = False): one accumulator
    per projection, BLOCK_N columns of h each, two dots per K step sharing the x tile."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    if INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_offs = offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn  # w_gate and w_up share a layout
    g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=_WARP_SPECIALIZE):
        if EVEN_K:
            x = tl.load(x_ptrs)
            wg = tl.load(wg_ptr + w_offs)
            wu = tl.load(wu_ptr + w_offs)
        else:
            k_left = K - k * BLOCK_K
            x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            wg = tl.load(wg_ptr + w_offs, mask=offs_k[:, None] < k_left, other=0.0)
            wu = tl.load(wu_ptr + w_offs, mask=offs_k[:, None] < k_left, other=0.0)
        if IEEE or UPCAST:  # UPCAST: the interpreter's bf16 dot is wrong, so fp32 (exact widening)
            g = tl.dot(x.to(tl.float32), wg.to(tl.float32), g, input_precision="ieee")
            u = tl.dot(x.to(tl.float32), wu.to(tl.float32), u, input_precision="ieee")
        else:
            g = tl.dot(x, wg, g)
            u = tl.dot(x, wu, u)
        x_ptrs += BLOCK_K * stride_xk
        w_offs += BLOCK_K * stride_wk
    store_tile(h_ptr, _silu_times(g, u), pid_m, pid_n, M, N, stride_hm, stride_hn, INT64, BLOCK_M, BLOCK_N)


@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   IEEE: tl.constexpr, UPCAST: tl.constexpr, INT64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    a_ptrs, b_ptrs, offs_k = ab_tile_pointers(a_ptr, b_ptr, pid_m, pid_n, M, N, stride_am, stride_ak, stride_bk,
                                              stride_bn, INT64, BLOCK_M, BLOCK_N, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=_WARP_SPECIALIZE):
        a, b = load_k_tiles(a_ptrs, b_ptrs, offs_k, K - k * BLOCK_K, EVEN_K)
        b = b.to(a.dtype)  # an fp32 h (H_FP32) meets the weights in fp32; otherwise a no-op
        acc = dot_acc(a, b, acc, IEEE, UPCAST)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, INT64, BLOCK_M, BLOCK_N)


@triton.jit
def _tile_origin(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """The first row and column of `tile` (grouped order) in an [M, N] output."""
    pid_m, pid_n = grouped_tile(tile, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def _widened(t, UPCAST: tl.constexpr):
    """`t` in fp32 under the interpreter (its bf16 dot is wrong), as it is everywhere else."""
    if UPCAST:
        return t.to(tl.float32)
    return t


@triton.jit
def _gate_up_tma_kernel(x_desc, wg_desc, wu_desc, h_desc, M, N, K, UPCAST: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """[BLOCK_M, BLOCK_N] tiles of h = silu(x @ w_gate.T) * (x @ w_up.T): per K step one x tile and
    the two weights' K-major tiles through the copy engine, two dots into two fp32 accumulators.
    Tiles past an edge read as zeros, so neither the K tail nor the M/N edges need a mask.
    The grid has one program per tile, yet the tile loop stays: built by Triton 3.6 this form runs
    faster on Hopper than the same body without the loop (scripts/mlp_diag.py; docs/results/kernel_notes.md)."""
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N), tl.num_programs(0)):
        om, on = _tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=_WARP_SPECIALIZE):
            ok = k * BLOCK_K
            x = _widened(x_desc.load([om, ok]), UPCAST)
            # Each weight's load feeds its dot directly: x and w_gate complete on one barrier, w_up on
            # another, so the first wgmma need not wait for w_up.
            g = tl.dot(x, _widened(wg_desc.load([on, ok]), UPCAST).T, g)
            u = tl.dot(x, _widened(wu_desc.load([on, ok]), UPCAST).T, u)
        h_desc.store([om, on], _silu_times(g, u).to(h_desc.dtype))


@triton.jit
def _matmul_tma_kernel(a_desc, b_desc, c_desc, M, N, K, UPCAST: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """[BLOCK_M, BLOCK_N] tiles of c = a @ b.T, b [N, K] in nn.Linear layout (K-major tiles); the tile
    loop as in _gate_up_tma_kernel."""
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N), tl.num_programs(0)):
        om, on = _tile_origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=_WARP_SPECIALIZE):
            ok = k * BLOCK_K
            acc = tl.dot(_widened(a_desc.load([om, ok]), UPCAST), _widened(b_desc.load([on, ok]), UPCAST).T, acc)
        c_desc.store([om, on], acc.to(c_desc.dtype))


# Which block sizes shape each descriptor's tile: (argument, its rows' constexpr, its columns' constexpr).
GATE_UP_DESCS = (("x_desc", "BLOCK_M", "BLOCK_K"), ("wg_desc", "BLOCK_N", "BLOCK_K"),
                 ("wu_desc", "BLOCK_N", "BLOCK_K"), ("h_desc", "BLOCK_M", "BLOCK_N"))
MATMUL_DESCS = (("a_desc", "BLOCK_M", "BLOCK_K"), ("b_desc", "BLOCK_N", "BLOCK_K"), ("c_desc", "BLOCK_M", "BLOCK_N"))


def _set_blocks(descs):
    """A config pre-hook that gives each descriptor the tile of the config being run."""
    def hook(nargs):
        for name, rows, cols in descs:
            nargs[name].block_shape = [nargs[rows], nargs[cols]]
    return hook


def _tma_tuned(kernel, tiles, descs):
    """`kernel` autotuned over `tiles`, each config resizing the descriptors' tiles before it runs."""
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": GROUP_M}, num_warps=w, num_stages=st,
                             pre_hook=_set_blocks(descs)) for m, n, k, w, st in dict.fromkeys(map(_with_knobs, tiles))]
    return triton.autotune(configs=configs, key=["M", "N", "K", "UPCAST"])(kernel)


_gate_up_tuned = _tuned(_gate_up_kernel, GATE_UP_TILES)
_gate_up_two_dots_tuned = _tuned(_gate_up_two_dots_kernel, GATE_UP_TMA_TILES)  # two accumulators, as the TMA form
_matmul_tuned = _tuned(_matmul_kernel, DOWN_TILES)
_gate_up_tma_tuned = _tma_tuned(_gate_up_tma_kernel, GATE_UP_TMA_TILES, GATE_UP_DESCS)
_matmul_tma_tuned = _tma_tuned(_matmul_tma_kernel, DOWN_TMA_TILES, MATMUL_DESCS)


def _grid(M, N, per_tile=1):
    """Programs for an [M, N] output, each covering BLOCK_N // per_tile of its columns."""
    return lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"] // per_tile),)


def _tma_ready(*tensors):
    """True where all of `tensors` (2-D, 16-bit) can be read through tensor descriptors: Hopper or newer
    (or the interpreter), unit stride along rows, rows and base 16-byte aligned."""
    if tensors[0].dtype not in (torch.float16, torch.bfloat16):
        return False
    if not INTERPRETED and not (tensors[0].is_cuda and torch.cuda.get_device_capability(tensors[0].device)[0] >= 9):
        return False
    return all(t.stride(-1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0
               for t in tensors)


def _descriptors(tensors, descs, tile=None):
    """Descriptors over `tensors` with the tiles `descs` names in `tile` (BLOCK_M etc.); without a tile,
    an autotuned config's pre-hook (`_set_blocks`) sizes them before each launch."""
    return [TensorDescriptor.from_tensor(t, [tile[rows], tile[cols]] if tile else [16, 16])
            for t, (_, rows, cols) in zip(tensors, descs)]


def _small_tile():
    """SMALL_TILE with the tile knobs that are set: its block sizes (and GROUP_M), and its launch options."""
    m, n, k, warps, stages = _with_knobs(SMALL_TILE)
    return dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=k, GROUP_M=GROUP_M), dict(num_warps=warps, num_stages=stages)


def _run_tma(x2d, w_gate, w_up, w_down, h, out, small):
    tokens, hidden = x2d.shape
    inter = w_gate.shape[0]
    upcast = INTERPRETED and x2d.dtype == torch.bfloat16
    if small:
        tile, options = _small_tile()
        fixed = dict(tile, **options)
        gate_up, down = _gate_up_tma_kernel, _matmul_tma_kernel
    else:
        tile, fixed, gate_up, down = None, {}, _gate_up_tma_tuned, _matmul_tma_tuned
    gate_up[_grid(tokens, inter)](*_descriptors((x2d, w_gate, w_up, h), GATE_UP_DESCS, tile), tokens, inter, hidden,
                                  UPCAST=upcast, **fixed)
    down[_grid(tokens, hidden)](*_descriptors((h, w_down, out), MATMUL_DESCS, tile), tokens, hidden, inter,
                                UPCAST=upcast, **fixed)


def kernel_fn(x, w_gate, w_up, w_down):
    hidden = x.shape[-1]
    inter = w_gate.shape[0]
    x2d = x.reshape(-1, hidden)
    tokens = x2d.shape[0]
    out = torch.empty((tokens, hidden), dtype=x.dtype, device=x.device)
    if tokens == 0 or hidden == 0:
        return out.reshape(x.shape)
    if inter == 0:
        return out.fill_(0).reshape(x.shape)
    small = INTERPRETED or tokens * hidden * inter < AUTOTUNE_MIN_WORK
    h = torch.empty((tokens, inter), dtype=torch.float32 if H_FP32 else x.dtype, device=x.device)
    if TMA and not H_FP32 and _tma_ready(x2d, w_gate, w_up, w_down, h, out):
        _run_tma(x2d, w_gate, w_up, w_down, h, out, small)
        return out.reshape(x.shape)
    if w_gate.stride() != w_up.stride():
        w_gate, w_up = w_gate.contiguous(), w_up.contiguous()
    flags = dict(IEEE=x.dtype == torch.float32, UPCAST=INTERPRETED and x.dtype == torch.bfloat16,
                 INT64=max(span(t) for t in (x2d, w_gate, w_up, w_down)) >= 2**31 or tokens * inter >= 2**31)
    if small:
        tile, options = _small_tile()
        gate_up = _gate_up_kernel if INTERLEAVED else _gate_up_two_dots_kernel
        down = _matmul_kernel
        flags.update(tile, **options)
    else:
        gate_up = _gate_up_tuned if INTERLEAVED else _gate_up_two_dots_tuned
        down = _matmul_tuned
    # w.T is [hidden, inter] with strides (w.stride(1), w.stride(0)).
    gate_up[_grid(tokens, inter, per_tile=2 if INTERLEAVED else 1)](
        x2d, w_gate, w_up, h, tokens, inter, hidden,
        x2d.stride(0), x2d.stride(1), w_gate.stride(1), w_gate.stride(0), h.stride(0), h.stride(1), **flags)
    down[_grid(tokens, hidden)](
        h, w_down, out, tokens, hidden, inter,
        h.stride(0), h.stride(1), w_down.stride(1), w_down.stride(0), out.stride(0), out.stride(1), **flags)
    return out.reshape(x.shape)

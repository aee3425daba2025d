"""Matmul template: c = a @ b, a [M, K], b [K, N], fp32 accumulation, output in a's dtype.

Compute-bound at LLM sizes: judged by the fraction of the measured matmul peak. The space covers
tile sizes, warps and stages, group-M swizzle (L2 reuse), fp32 input precision (ieee or tf32),
split-K with a deterministic second pass, autotune, Hopper tensor descriptors and warp
specialization, and mask elision when K divides the tile. A candidate is the Triton starter
(kernels/matmul/starter_triton.py) with other values for its knob constants; at DEFAULTS it is the
starter, byte for byte.
"""

from __future__ import annotations

from . import Knob
from ._source import render_starter

KERNEL = "matmul"
METRIC = "TFLOP/s"

SPACE = (
    Knob("block_m", 1, (None, 32, 64, 128, 256),
         "BLOCK_M={new} instead of {old}: taller tiles reuse each loaded B tile over more rows of A (M={M}), at the cost of registers (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("block_n", 1, (None, 32, 64, 128, 256),
         "BLOCK_N={new} instead of {old}: wider tiles reuse each loaded A tile over more columns (N={N}), at the cost of registers (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("block_k", 1, (None, 32, 64, 128),
         "BLOCK_K={new} instead of {old}: deeper K steps mean fewer loop iterations over K={K} and larger loads, but more shared memory per stage (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("num_warps", 1, (None, 4, 8),
         "{new} warps instead of {old} split each output tile over more (or fewer) warps: more warps hide latency, fewer give each more registers (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("num_stages", 1, (None, 2, 3, 4, 5),
         "{new} pipeline stages instead of {old}: deeper pipelines keep more K tiles in flight while tensor cores work, if shared memory allows (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("group_m", 2, (1, 4, 8, 16),
         "grouping {new} tile rows (was {old}) orders programs so neighbours share B tiles in L2 instead of streaming all of B per row of tiles"),
    Knob("input_precision", 3, ("ieee", "tf32"),
         "input_precision={new!r} (was {old!r}): for fp32 inputs, tf32 tensor cores are many times faster than exact fp32 FMA; the harness decides whether the error is within tolerance", ordered=False),
    Knob("split_k", 4, (1, 2, 4, 8),
         "splitting K={K} over {new} programs (was {old}) adds parallelism when the {M}x{N} output has too few tiles to fill the SMs; a second pass adds the partials in order"),
    Knob("autotune", 4, (False, True),
         "autotune={new} (was {old}): let triton.autotune choose among a few tile/warp/stage configs per (M, N, K)",
         why_down="autotune={new} (was {old}): one tile at every size (the starter's small tile with the tile knobs set in it), where the autotuner's pick from one timing run can miss"),
    Knob("tma", 5, (False, True),
         "tma={new} (was {old}): on Hopper, tensor-descriptor (TMA) loads of A and B tiles free the threads from address math and masks and feed a deeper pipeline"),
    Knob("warp_specialize", 5, (False, True),
         "warp_specialize={new} (was {old}): on sm_90+, let Triton split producer (load) and consumer (MMA) warps in the K loop"),
    Knob("even_k", 6, (False, True),
         "even_k={new} (was {old}): when K={K} is a multiple of BLOCK_K, the K loop drops its masks",
         why_down="even_k={new} (was {old}): masks in every K step, one compiled kernel whether or not K={K} is a multiple of BLOCK_K"),
)

DEFAULTS = {
    "block_m": None,  # None: the starter's tiles (SMALL_TILE, or TUNED_TILES when autotuned)
    "block_n": None,
    "block_k": None,
    "num_warps": None,
    "num_stages": None,
    "group_m": 8,
    "input_precision": "ieee",
    "split_k": 1,
    "autotune": True,
    "tma": False,
    "warp_specialize": False,
    "even_k": True,
}

# The starter's AUTOTUNE_MIN_WORK and the smallest BLOCK_M and BLOCK_N of its tile lists.
_AUTOTUNE_MIN_WORK = 1 << 24
_SMALLEST_BLOCK = 64


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    out = dict(params)
    if dtype and dtype != "fp32":
        out["input_precision"] = None  # only fp32 inputs have a choice
    M, N, K = (int(shape.get(k, 0)) for k in ("M", "N", "K"))
    if M and N and K and M * N * K < _AUTOTUNE_MIN_WORK:
        out["autotune"] = None  # below the starter's threshold one tile is launched either way
    block_m, block_n = params["block_m"] or _SMALLEST_BLOCK, params["block_n"] or _SMALLEST_BLOCK
    if M and N and M <= block_m and N <= block_n:
        out["group_m"] = None  # one tile: nothing to group
    return out


def render(params: dict) -> str:
    """The matmul starter with these knob values (any missing knob takes its default)."""
    return render_starter(KERNEL, SPACE, {**DEFAULTS, **params})


__all__ = ["KERNEL", "METRIC", "SPACE", "DEFAULTS", "render", "effective"]

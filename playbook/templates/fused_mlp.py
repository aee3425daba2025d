"""Fused MLP template: (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T, weights in nn.Linear layout.

Compute-bound at LLM sizes. Two kernels: the first computes the gate and up projections of the
same x tile and applies SiLU x up in its epilogue, so the [tokens, intermediate] activation is
written once; the second is the down projection. With TMA (Hopper; 16-bit inputs with 16-byte aligned
rows) both kernels read their tiles through tensor descriptors, the weights' tiles K-major as wgmma takes
them, gate/up with two accumulators. Elsewhere the pointer kernels: with INTERLEAVED (the default) gate/up
is one matmul over the gate and up columns taken in turn (gate j, up j, ...; BLOCK_N counts both), one dot
per K step as in a plain matmul, and the epilogue splits the pairs; without it, two accumulators and two
dots per step. A candidate is the Triton starter (kernels/fused_mlp/starter_triton.py) with other values
for its knob constants; at DEFAULTS it is the starter, byte for byte.
"""

from __future__ import annotations

from . import Knob
from ._source import render_starter

KERNEL = "fused_mlp"
METRIC = "TFLOP/s"

SPACE = (
    Knob("block_m", 1, (None, 32, 64, 128, 256),
         "BLOCK_M={new} instead of {old}: taller tiles reuse each loaded weight tile over more of the {tokens} tokens (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("block_n", 1, (None, 32, 64, 128, 256),
         "BLOCK_N={new} instead of {old}: wider tiles reuse each loaded x tile over more output features (interleaved, the gate/up tile's BLOCK_N covers gate and up columns together; otherwise it holds two accumulators of this width) (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("block_k", 1, (None, 32, 64, 128),
         "BLOCK_K={new} instead of {old}: deeper K steps mean fewer iterations over hidden={hidden} and intermediate={intermediate}, but more shared memory per stage (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("num_warps", 1, (None, 4, 8),
         "{new} warps instead of {old} per output tile: more hide latency, fewer leave more registers for the two accumulators (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("num_stages", 1, (None, 2, 3, 4),
         "{new} pipeline stages instead of {old}: more K tiles in flight, if shared memory allows (the gate/up kernel loads three tiles per step) (None: the starter's tiles, autotuned where the starter autotunes)"),
    Knob("group_m", 2, (1, 4, 8, 16),
         "grouping {new} tile rows (was {old}) so programs that run together share weight tiles in L2"),
    Knob("exp2_sigmoid", 3, (True, False),
         "exp2_sigmoid={new} (was {old}): SiLU's sigmoid through exp2 with log2(e) folded in maps onto the ex2 instruction"),
    Knob("h_fp32", 3, (False, True),
         "h_fp32={new} (was {old}): keeping the intermediate activation in fp32 doubles its bytes but removes one rounding before the down projection"),
    Knob("interleaved", 4, (True, False),
         "interleaved={new} (was {old}): gate and up as one dot over their interleaved columns keeps a plain matmul's single accumulator and pipeline, where two accumulators and two dots per K step share each x tile but halve the tile each dot sees",
         ordered=False),
    Knob("tma", 5, (False, True),
         "tma={new} (was {old}): on Hopper, tensor-descriptor (TMA) loads give wgmma the weights' K-major tiles as they lie, with no address math or masks in the K loops",
         why_down="tma={new} (was {old}): the pointer kernels on Hopper too (cp.async loads, gate and up interleaved into one dot), where the descriptor kernels' tiles fit this shape worse"),
    Knob("warp_specialize", 5, (False, True),
         "warp_specialize={new} (was {old}): on sm_90+, let Triton split producer and consumer warps in both K loops"),
)

DEFAULTS = {
    "block_m": None,  # None: the starter's tiles (SMALL_TILE, or its tuned lists when autotuned)
    "block_n": None,
    "block_k": None,
    "num_warps": None,
    "num_stages": None,
    "group_m": 8,
    "exp2_sigmoid": False,
    "h_fp32": False,
    "interleaved": True,
    "tma": True,
    "warp_specialize": False,
}


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    """What changes the kernels at this dtype and shape: fp32 never takes the descriptor kernels and its h
    is fp32 already; where 16-bit rows are 16-byte aligned the descriptor kernels run (on Hopper), and
    they always keep two accumulators."""
    out = dict(params)
    if dtype == "fp32":
        out["tma"] = out["h_fp32"] = None
        return out
    aligned = all(int(shape.get(k, 0)) % 8 == 0 for k in ("hidden", "intermediate"))
    if dtype and aligned and params["tma"] and not params["h_fp32"]:
        out["interleaved"] = None
    return out


def render(params: dict) -> str:
    """The fused_mlp starter with these knob values (any missing knob takes its default)."""
    return render_starter(KERNEL, SPACE, {**DEFAULTS, **params})


__all__ = ["KERNEL", "METRIC", "SPACE", "DEFAULTS", "render", "effective"]

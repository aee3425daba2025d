"""Rotary embedding template: x * cos + rotate_half(x) * sin, x [B, H, S, D], cos/sin [S, D].

Memory-bound: the floor is one read and one write of x plus one read of cos and sin. The one
implementation is the rotary starter (kernels/rotary_embedding/starter_triton.py): a contiguous x
takes a flat path (a 1-D block of elements, each with its partner); a strided one, or any x once
`flat` is off, takes the tiled path, where a program owns a block of positions of some heads and
loads cos and sin once for all of them. A candidate is that file with other values for its knob constants.
"""

from __future__ import annotations

from . import Knob
from ._rowwise import AUTOTUNE
from ._source import render_starter

KERNEL = "rotary_embedding"
METRIC = "GB/s"

SPACE = (
    Knob("num_warps", 1, (0, 1, 2, 4, 8, 16),
         "{new} warps instead of {old} (0: 8 on the flat path, 4 on the tiled one) change how many loads of the [positions, {head_dim}] tile are in flight per program"),
    Knob("block_s", 1, (0, 1, 2, 4, 8, 16, 32, 64),
         "{new} positions per program instead of {old} (0: about a thousand half-row elements' worth): larger tiles give each program more bytes in flight over {seq} positions, smaller ones more programs"),
    Knob("load_eviction", 2, ("", "evict_first", "evict_last"),
         "eviction hint {new!r} on x (was {old!r}): x is streamed once, while cos and sin are reused by every batch and head", ordered=False),
    Knob("cs_eviction", 2, ("", "evict_last"),
         "eviction hint {new!r} on cos/sin (was {old!r}): keep the {seq}x{head_dim} tables in L2 for the other batches and heads", ordered=False),
    Knob("acc_fp32", 3, (True, False),
         "acc_fp32={new} (was {old}): the rotation in the input dtype saves conversions; the harness decides whether it is still accurate"),
    AUTOTUNE,
    Knob("heads_per_program", 6, (0, 1, 2, 4, 8, 16),
         "{new} heads per program instead of {old} (0: one on a GPU) reuse each loaded cos/sin tile {new} times ({heads} heads share the same positions)"),
    Knob("split_halves", 6, (True, False),
         "split_halves={new} (was {old}): loading each half of the head once and writing both output halves from it avoids a second, gathered load of x"),
    Knob("flat", 6, (True, False),
         "flat={new} (was {old}): a contiguous x as one 1-D stream of elements, each with its partner from the other half (cached, just read), against per-head tiles that load cos and sin once for {heads} heads"),
)

# The starter's own values (tests check them against its constants).
DEFAULTS = {
    "num_warps": 0,
    "block_s": 0,
    "load_eviction": "evict_first",
    "cs_eviction": "",
    "acc_fp32": True,
    "autotune": False,
    "heads_per_program": 0,
    "split_halves": True,
    "flat": True,
}

# Knobs of the tiled path only: the harness's inputs are contiguous, so they act once `flat` is off.
TILED_ONLY = ("block_s", "load_eviction", "cs_eviction", "autotune", "heads_per_program", "split_halves")


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    out = dict(params)
    if params["flat"] and int(shape.get("head_dim", 0)) % 2 == 0:
        for name in TILED_ONLY:
            out[name] = None
    if out["autotune"]:
        out["num_warps"] = None
    if dtype == "fp32":
        out["acc_fp32"] = None  # fp32 inputs are rotated in fp32 either way
    return out


def render(params: dict) -> str:
    """The rotary starter with these knob values (any missing knob takes its default)."""
    return render_starter(KERNEL, SPACE, {**DEFAULTS, **params})

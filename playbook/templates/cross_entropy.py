"""Cross-entropy template: the knobs of the cross-entropy starter (kernels/cross_entropy/starter_triton.py)
and their reasons.

Memory-bound: the floor is one read of the logits. Each program reduces its rows to losses (a row whose
target is -100 is ignored, as F.cross_entropy does by default); the program that draws the last ticket of
the launch adds them in a fixed order and divides by the rows that count, so the mean is bit-for-bit
repeatable from one launch. A candidate is the starter with other values for its knob constants, so the
defaults are the starter itself.

With ALIGNED_WINDOW on and a vocabulary that is not a multiple of the 16-byte vector width (GPT-2's
50257), rows start at odd addresses and Triton would read them two bytes at a time; the kernel then reads
each row but the last over its aligned window (as the CUDA starter does): from the 16-byte boundary at or
before the row's start, a multiple of 16 bytes long, with the neighbouring rows' elements set to -inf after
the load. Off by default: in the starter's one-row form the window measured slower than the plain rows
(docs/results/kernel_notes.md), so it is a move for the search to try, not a given.
"""

from __future__ import annotations

import dataclasses

from . import Knob
from ._rowwise import (AUTOTUNE, LOAD_EVICTION, NUM_STAGES, NUM_WARPS, PERSISTENT, ROWS_PER_PROGRAM, TMA,
                       effective_rowwise, max_block_knob)
from ._source import render_starter

KERNEL = "cross_entropy"
METRIC = "GB/s"

# The starter's own rules are the first value of num_warps and num_stages (0: by tile, Triton's default).
SPACE = (
    dataclasses.replace(NUM_WARPS, values=(0, *NUM_WARPS.values)),
    dataclasses.replace(NUM_STAGES, values=(0, *NUM_STAGES.values)),
    ROWS_PER_PROGRAM,
    PERSISTENT,
    LOAD_EVICTION,
    max_block_knob("max_block_v",
                   "capping a vocab tile at {new} elements instead of {old} switches between holding the whole {vocab}-wide row of logits in registers and looping over tiles of it"),
    Knob("aligned_window", 2, (True, False),
         "aligned_window={new} (was {old}): rows of {vocab} logits start at odd addresses (the vocabulary is not a multiple of 8), and the aligned window that gives 16-byte vector loads costs a few masked extra elements per row, per-row index arithmetic and a branch for the last row, read plain; the plain row pointer saves those if the loads were not the limit",
         why_down="aligned_window={new} (was {old}): rows of {vocab} logits start at odd addresses (the vocabulary is not a multiple of 8), so from the plain row pointer Triton reads them two bytes at a time; reading each row from the 16-byte boundary at or before its start, a multiple of 16 bytes long, with the neighbours' elements masked to -inf, makes the loads 16-byte vectors"),
    Knob("exp2", 3, (True, False),
         "exp2={new} (was {old}): exp(x - max) as exp2((x - max) * log2(e)) maps onto the ex2 instruction with the scale folded into one multiply"),
    Knob("online", 4, (True, False),
         "online={new} (was {old}): a running max with a rescaled running sum reads each tile of logits once; two passes (max, then sum) read them twice"),
    AUTOTUNE,
    TMA,
    Knob("target_from_tile", 6, (False, True),
         "target_from_tile={new} (was {old}): pick logits[target] out of the tile already in registers with a compare-and-sum instead of a separate scattered load per row"),
)

DEFAULTS = {  # the starter's constants: tiles of 8192 over 8 warps, the fastest form at every vocabulary probed
    "num_warps": 0,
    "num_stages": 0,
    "max_block_v": 8192,
    "rows_per_program": 1,
    "persistent": 0,
    "load_eviction": "evict_first",
    "aligned_window": False,
    "exp2": True,
    "online": True,
    "autotune": False,
    "tma": False,
    "target_from_tile": False,
}


def vector_width(dtype: str = "") -> int:
    """Elements per 16-byte load: 4 in fp32, 8 in the 2-byte dtypes (and when the dtype is not known)."""
    return 4 if dtype in ("fp32", "float32") else 8


def window_used(params: dict, shape: dict, dtype: str = "") -> bool:
    """Whether the aligned window reads any row at this shape: the knob is on, the vocabulary is known
    and not a multiple of the vector width, and there are rows before the last (which is read plain)."""
    vocab, rows = int(shape.get("vocab", 0)), int(shape.get("rows", 0))
    if not params.get("aligned_window") or not vocab or vocab % vector_width(dtype) == 0:
        return False
    return not rows or rows > 1


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    """What changes the launched kernel at `shape` and `dtype`: tile caps above the vocabulary are all one
    tile, a row in one tile has nothing to do online, and the window only acts at an odd vocabulary."""
    vocab = int(shape.get("vocab", 0))
    out = effective_rowwise(params, vocab, "max_block_v")
    span = vocab + vector_width(dtype) - 1 if window_used(params, shape, dtype) else vocab  # a window's extra reads
    if span and span <= out["max_block_v"]:
        out["online"] = None
    if not window_used({**params, "aligned_window": True}, shape, dtype):
        out["aligned_window"] = None  # an aligned (or unknown) vocabulary: both settings are the plain path
    return out


def render(params: dict) -> str:
    """The starter with these knob values (any missing knob takes its default)."""
    return render_starter(KERNEL, SPACE, {**DEFAULTS, **params})

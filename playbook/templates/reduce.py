"""Reduce template: x.sum(-1) with fp32 accumulation, output in x's dtype.

Memory-bound: the floor is one read of x. The one implementation is the reduce starter
(kernels/reduce/starter_triton.py): rows summed in tiles into a [ROWS, BLOCK_N] accumulator, few and
very long rows split across programs whose partial sums a second kernel adds in a fixed order
(deterministic, no atomics). A candidate is that file with other values for its knob constants.
"""

from __future__ import annotations

import dataclasses

from . import Knob
from ._rowwise import (AUTOTUNE, LOAD_EVICTION, NUM_STAGES, NUM_WARPS, PERSISTENT, ROWS_PER_PROGRAM, effective_rowwise,
                       max_block_knob)
from ._source import render_starter

KERNEL = "reduce"
METRIC = "GB/s"

SPACE = (
    dataclasses.replace(NUM_WARPS, values=(0, *NUM_WARPS.values), why=NUM_WARPS.why
                        + " (0: the starter's rule, 16 for 4096-wide tiles, 8 for packed narrow rows)"),
    NUM_STAGES,
    dataclasses.replace(ROWS_PER_PROGRAM, values=(0, *ROWS_PER_PROGRAM.values), why=ROWS_PER_PROGRAM.why
                        + " (0: narrow rows packed up to a few thousand elements per program)"),
    PERSISTENT,
    LOAD_EVICTION,
    max_block_knob("max_block_n",
                   "a tile of at most {new} elements instead of {old} changes how many loads each loop step issues per row of {cols} and how many registers the accumulator takes"),
    Knob("acc_fp32", 3, (True, False),
         "acc_fp32={new} (was {old}): accumulating in the input dtype saves conversions but loses precision on long rows; the harness decides"),
    Knob("split", 4, (0, 1, 2, 4, 8),
         "splitting each {cols}-long row over {new} programs (was {old}; 0 = by the rule for few, wide rows, 1 = never) puts more SMs to work when there are only {rows} rows; a second tiny kernel adds the partials"),
    AUTOTUNE,
    Knob("even_masks", 6, (False, True),
         "even_masks={new} (was {old}): when {cols} columns are a multiple of the tile and rows divide evenly, loads drop their masks"),
)

# The starter's own values (tests check them against its constants).
DEFAULTS = {
    "num_warps": 0,
    "num_stages": 3,
    "rows_per_program": 0,
    "persistent": 0,
    "load_eviction": "evict_first",
    "max_block_n": 4096,
    "acc_fp32": True,
    "split": 0,
    "autotune": False,
    "even_masks": True,
}

# Rows narrower than this are never split by the starter's rule (its SPLIT_MIN_COLS).
SPLIT_MIN_COLS = 16385


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    cols = int(shape.get("cols", 0))
    out = effective_rowwise(params, cols, "max_block_n")
    if dtype == "fp32":
        out["acc_fp32"] = None  # fp32 inputs are accumulated in fp32 either way
    if cols and cols < SPLIT_MIN_COLS and params["split"] == 0:
        out["split"] = 1  # the rule never splits rows this narrow
    if out["split"] not in (0, 1):  # every row split: the row kernel and its knobs are not launched
        for name in ("rows_per_program", "persistent", "autotune", "even_masks"):
            out[name] = None
    return out


def render(params: dict) -> str:
    """The reduce starter with these knob values (any missing knob takes its default)."""
    return render_starter(KERNEL, SPACE, {**DEFAULTS, **params})

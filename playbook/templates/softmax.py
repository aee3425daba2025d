"""Softmax template: the knobs of the softmax starter (kernels/softmax/starter_triton.py) and their reasons.

Memory-bound: the floor is one read of x and one write of y. Whole rows stay in registers (one read);
rows wider than the tile cap are looped in a grid of a few programs per SM, either with an online max/sum
(two reads) or the classic max, sum, write passes (three reads). A candidate is the starter with other
values for its knob constants, so the defaults are the starter itself.
"""

from __future__ import annotations

import dataclasses

from . import Knob, next_power_of_2
from ._rowwise import AUTOTUNE, LOAD_EVICTION, NUM_STAGES, NUM_WARPS, PERSISTENT, ROWS_PER_PROGRAM, TMA, max_block_knob
from ._source import render_starter

KERNEL = "softmax"
METRIC = "GB/s"

# The starter's own rules are the first value of these knobs (0 or None: by path, see the starter).
SPACE = (
    dataclasses.replace(NUM_WARPS, values=(0, *NUM_WARPS.values)),
    dataclasses.replace(NUM_STAGES, values=(0, *NUM_STAGES.values)),
    dataclasses.replace(ROWS_PER_PROGRAM, values=(0, *ROWS_PER_PROGRAM.values)),
    PERSISTENT,
    dataclasses.replace(LOAD_EVICTION, values=(None, *LOAD_EVICTION.values)),
    max_block_knob("max_block_n",
                   "capping a row tile at {new} elements instead of {old} switches between holding the whole {cols}-wide row in registers (one read of x) and looping over tiles (more reads, fewer registers)"),
    Knob("backwards", 2, (False, True),
         "backwards={new} (was {old}): the write pass over a looped {cols}-wide row starts at its last tile, the lines the first pass read most recently and so the likeliest still in L2 (H100, 1024x131072 with one program per SM: 0.231 ms backwards, 0.235 forwards)"),
    Knob("exp2", 3, (True, False),
         "exp2={new} (was {old}): exp(x - max) as exp2((x - max) * log2(e)) maps straight onto the hardware's ex2 instruction with the scale folded into one multiply"),
    Knob("online", 4, (True, False),
         "online={new} (was {old}): for rows wider than a tile, a running max with a rescaled running sum needs one pass over x before the write pass, instead of separate max and sum passes"),
    AUTOTUNE,
    TMA,
    Knob("reciprocal", 6, (True, False),
         "reciprocal={new} (was {old}): multiply every element by 1/sum computed once per row instead of dividing each element by the sum"),
)

DEFAULTS = {  # the starter's constants
    "num_warps": 0,
    "num_stages": 0,
    "rows_per_program": 0,
    "persistent": 1,
    "load_eviction": None,
    "max_block_n": 32768,
    "backwards": True,
    "exp2": True,
    "online": True,
    "autotune": False,
    "tma": False,
    "reciprocal": False,
}

ONE_ROW_COLS = 16385  # whole rows from this wide take the starter's one-row kernel (MAX_FUSED_COLS // 2 + 1)
WIDE_BLOCK_N = 16384  # the starter's tile of a looped row


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    """What changes the launched kernel at `shape`: tile caps above the width are all whole-row, and a
    whole row has nothing to loop (online, backwards, stages) and no looped grid (persistent); a looped row
    reads no 2-D tile (rows per program, TMA) and caps above the looped tile are that tile."""
    out = dict(params)
    if params["autotune"]:
        out["num_warps"] = None
    cols = int(shape.get("cols", 0))
    if not cols:
        return out
    if cols <= params["max_block_n"]:
        out["max_block_n"] = next_power_of_2(cols)
        out["online"] = out["backwards"] = out["persistent"] = out["num_stages"] = None
    else:
        out["max_block_n"] = min(params["max_block_n"], WIDE_BLOCK_N)
        out["rows_per_program"] = out["tma"] = None
    return out


def render(params: dict) -> str:
    """The starter with these knob values (any missing knob takes its default)."""
    return render_starter(KERNEL, SPACE, {**DEFAULTS, **params})

"""RMSNorm template: y = x * rsqrt(mean(x^2, -1) + eps) * weight, fp32 math, rows of a 2-D view.

Memory-bound: the floor is one read of x and one write of y. The one implementation is the rmsnorm
starter (kernels/rmsnorm/starter_triton.py): whole rows in registers, wider rows looped over tiles,
few, wide rows split into chunks over a 2-D grid (per-chunk sums of squares, added where each chunk
is scaled). A candidate is that file with other values for its knob constants; the space covers warps
and stages, rows per program, persistent grids, cache hints, the register tile, rsqrt, accumulation
precision, the split rule, autotune, Hopper tensor descriptors and mask elision on even shapes.
"""

from __future__ import annotations

from . import Knob
from ._rowwise import SPLIT_PROGRAMS, SPLIT_ROWS, effective_rowwise, effective_split
from ._source import render_starter

KERNEL = "rmsnorm"
METRIC = "GB/s"

SPACE = (
    Knob("num_warps", 1, (0, 1, 2, 4, 8, 16, 32),
         "{new} warps instead of {old} split a {cols}-wide row over more threads: more loads in flight per row and fewer values per thread, so latency is hidden better (0: the starter's rule, 4, 8 or 16 by the elements a program holds)",
         why_down="{new} warps instead of {old}: each thread holds more of the {cols}-wide row and issues wider, fewer loads, and small rows stop wasting idle threads (0: the starter's rule, 4, 8 or 16 by the elements a program holds)"),
    Knob("num_stages", 1, (1, 2, 3, 4),
         "{new} pipeline stages instead of {old} let the compiler prefetch the next tile of a looped row (or the next row of a persistent program) while this one is reduced"),
    Knob("rows_per_program", 2, (0, 1, 2, 4, 8),
         "{new} rows per program instead of {old} reuse the weight load across rows and give each program more bytes in flight; {rows} rows keep the grid full either way (0: narrow rows packed up to 2048 elements, 16 rows at most)"),
    Knob("persistent", 2, (0, 1, 2, 4, 8),
         "a persistent grid of {new} programs per SM (0 = one program per row block; was {old}) removes launch tail effects over {rows} rows and loads the weight once per program"),
    Knob("load_eviction", 2, ("", "evict_first", "evict_last"),
         "eviction hint {new!r} on the x loads (was {old!r}): which lines the L2 gives up first decides how the y stores, the weight and a second pass over a tiled row share it; on the H100 'evict_last' measured 1-2% faster than 'evict_first' for one-pass rows", ordered=False),
    Knob("max_block_n", 2, (1024, 2048, 4096, 8192, 16384, 32768),
         "capping a row tile at {new} elements instead of {old} switches between holding the whole {cols}-wide row in registers (one read) and looping over tiles (two reads, lower register pressure)"),
    Knob("rsqrt", 3, (True, False),
         "rsqrt={new} (was {old}): one reciprocal square-root instruction vs a sqrt and a divide per row; small, but it shortens the dependent chain at the end of the reduction"),
    Knob("acc_fp32", 3, (True, False),
         "acc_fp32={new} (was {old}): squaring and summing in the input dtype saves conversions but may lose precision; the harness decides whether it is still correct"),
    SPLIT_ROWS,
    SPLIT_PROGRAMS,
    Knob("autotune", 4, (False, True),
         "autotune={new} (was {old}): let triton.autotune pick num_warps per row width at run time instead of the fixed NUM_WARPS"),
    Knob("tma", 5, (False, True),
         "tma={new} (was {old}): on Hopper, tensor-descriptor (TMA) loads of the [rows, {cols}] block move the address arithmetic off the threads"),
    Knob("even_masks", 6, (False, True),
         "even_masks={new} (was {old}): when {cols} columns fill the tile exactly and rows divide evenly, loads and stores drop their masks"),
)

# The starter's own values (tests check them against its constants).
DEFAULTS = {
    "num_warps": 0,
    "num_stages": 3,
    "rows_per_program": 0,
    "persistent": 0,
    "load_eviction": "evict_last",  # a little ahead of evict_first in the probes (docs/results/kernel_notes.md)
    "max_block_n": 16384,
    "rsqrt": False,
    "acc_fp32": True,
    "split_rows": 4,
    "split_programs": 8,
    "autotune": False,
    "tma": False,
    "even_masks": False,
}

# The knobs that shape only the one-pass rows kernel (rows no wider than max_block_n).
_ONE_PASS = ("rows_per_program", "persistent", "load_eviction", "tma", "even_masks")


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    """Params as they act at `shape`: a tile cap above the row width is the same as whole-row, the
    one-pass rows' knobs mean nothing for looped rows, and fp32 inputs are accumulated in fp32 either way."""
    cols = int(shape.get("cols", 0))
    out = effective_rowwise(params, cols, "max_block_n")
    if cols and cols > params["max_block_n"]:
        out.update(dict.fromkeys(_ONE_PASS))
    if dtype == "fp32":
        out["acc_fp32"] = None
    return effective_split(out, cols)


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default): the starter
    with each knob's constant set."""
    return render_starter(KERNEL, SPACE, {**DEFAULTS, **params})

"""Knobs shared by the row-wise templates (softmax, cross_entropy, layernorm, rmsnorm, reduce).

Each of those kernels gives a program ROWS rows of a 2-D view; the knobs that decide how rows
are spread over programs and how they are loaded mean the same in all of them. Few, wide rows are
instead split into chunks over a 2-D grid (rows x chunks): the rule that picks that path and its
knobs are shared here; the kernels that compute and merge the per-chunk partials are each starter's.
"""

from __future__ import annotations

from . import Knob, next_power_of_2

NUM_WARPS = Knob("num_warps", 1, (1, 2, 4, 8, 16, 32),
                 "{new} warps instead of {old} split a {width}-wide row over more threads: more loads in flight per row and fewer values per thread, so latency is hidden better",
                 why_down="{new} warps instead of {old}: each thread holds more of the {width}-wide row and issues wider, fewer loads, and small rows stop wasting idle threads")
NUM_STAGES = Knob("num_stages", 1, (1, 2, 3, 4),
                  "{new} pipeline stages instead of {old} let the compiler prefetch the next tile of a looped row (or the next rows of a persistent program) while this one is reduced")
ROWS_PER_PROGRAM = Knob("rows_per_program", 2, (1, 2, 4, 8),
                        "{new} rows per program instead of {old} give each program more independent bytes in flight and amortise per-program set-up; {rows} rows keep the grid full either way",
                        why_down="{new} rows per program instead of {old}: fewer registers per thread and more programs over {rows} rows, if register pressure was limiting occupancy")
PERSISTENT = Knob("persistent", 2, (0, 1, 2, 4, 8),
                  "a persistent grid of {new} programs per SM (0 = one program per row block; was {old}) removes the launch tail over {rows} rows and does per-program set-up once",
                  why_down="{new} programs per SM instead of {old} (0 = one program per row block): fewer resident programs leave each more registers and cache, or the plain grid lets the scheduler balance {rows} rows itself")
LOAD_EVICTION = Knob("load_eviction", 2, ("", "evict_first", "evict_last"),
                     "eviction hint {new!r} on the streaming loads (was {old!r}): which lines the L2 gives up first decides how the stores, the reused operands and any second pass over a row share it; measured, not predicted (H100: evict_last 1-2% faster than evict_first for one-pass norm rows)", ordered=False)
AUTOTUNE = Knob("autotune", 4, (False, True),
                "autotune={new} (was {old}): let triton.autotune pick num_warps per width at run time instead of the fixed NUM_WARPS")
TMA = Knob("tma", 5, (False, True),
           "tma={new} (was {old}): on Hopper, tensor-descriptor (TMA) loads of the [rows, {width}] block take the address arithmetic and masking off the threads")

SPLIT_ROWS = Knob("split_rows", 4, (0, 1, 2, 4, 8, 16),
                  "splitting each row into chunks over a 2-D grid below {new} rows per SM instead of {old} (0 = never): {rows} rows of {cols} at one program per row leave SMs idle, while the split keeps every SM busy at the cost of a second read of each chunk and a merge of per-chunk partials",
                  why_down="splitting only below {new} rows per SM instead of {old} (0 = never): one program per row already fills the SMs when rows are many, and then the split's second launch and merge of partials are pure overhead")
SPLIT_PROGRAMS = Knob("split_programs", 4, (2, 4, 8, 16, 32),
                      "a split grid aiming at {new} programs per SM instead of {old}: smaller chunks of the {cols}-wide rows put more loads in flight per SM and even out the last wave",
                      why_down="a split grid aiming at {new} programs per SM instead of {old}: longer chunks mean fewer partials to write and merge and less per-program set-up")

# The split path's fixed part, as the starters define it: rows narrower than SPLIT_MIN_COLS fit one tile of
# registers and are never split; chunks are walked SPLIT_BLOCK at a time.
SPLIT_MIN_COLS = 16385
SPLIT_BLOCK = 4096


def effective_split(out: dict, width: int) -> dict:
    """The split knobs as they act on rows `width` wide: rows too narrow to split, or a rule that never
    splits, make both no-ops, and the grid's aim means nothing while splitting is off."""
    if width and width < SPLIT_MIN_COLS:
        out["split_rows"] = out["split_programs"] = None
    elif not out.get("split_rows"):
        out["split_programs"] = None
    return out


def max_block_knob(name: str, why: str) -> Knob:
    return Knob(name, 2, (1024, 2048, 4096, 8192, 16384, 32768, 65536), why)


def effective_rowwise(params: dict, width: int, block_knob: str) -> dict:
    """Params as they act on rows `width` wide: tile caps above the width are all whole-row,
    num_warps means nothing under autotune, and stages matter only where something loops."""
    out = dict(params)
    if width:
        out[block_knob] = min(params[block_knob], next_power_of_2(width))
    if params.get("autotune"):
        out["num_warps"] = None
    looped = (width and width > out[block_knob]) or params.get("persistent")
    if not looped and "num_stages" in out:
        out["num_stages"] = None
    return out

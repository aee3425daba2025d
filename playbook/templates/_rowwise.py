"""Pieces shared by the row-wise templates (softmax, cross_entropy, layernorm, reduce).

Each of those kernels gives a program ROWS rows of a 2-D view; the knobs that decide how rows
are spread over programs and how they are loaded mean the same in all of them.
"""

from __future__ import annotations

from . import Knob, next_power_of_2
from ._source import fill

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


def row_loop(body: str, persistent: bool) -> str:
    """The body once per program (row_block = program id) or in a persistent grid-stride loop."""
    if persistent:
        return fill(
            """
            for row_block in range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
                <<body>>
            """,
            body=body,
        )
    return fill(
        """
        row_block = tl.program_id(0)
        <<body>>
        """,
        body=body,
    )


def grid_expr(persistent: bool) -> str:
    return "(min(n_blocks, PERSISTENT * _num_sms(x.device)),)" if persistent else "(n_blocks,)"


def launch_opts(autotune: bool) -> str:
    return "" if autotune else ", num_warps=NUM_WARPS, num_stages=NUM_STAGES"

"""Cross-entropy template: mean over rows of logsumexp(logits) - logits[target], an fp32 scalar.

Memory-bound: the floor is one read of the logits. Each program reduces ROWS rows to losses and
adds them into one partial sum of its own; a second, single-program kernel adds the partials in
a fixed order (no atomics, so the result is bit-for-bit repeatable) and divides by the rows.
"""

from __future__ import annotations

from . import Knob, knob_header
from ._rowwise import (AUTOTUNE, LOAD_EVICTION, NUM_STAGES, NUM_WARPS, PERSISTENT, ROWS_PER_PROGRAM, TMA,
                       effective_rowwise, launch_opts, max_block_knob, row_loop)
from ._source import IMPORTS, INTERPRETER_NOTE, NUM_SMS, TMA_READY, autotune_decorator, eviction_arg, fill, join

KERNEL = "cross_entropy"
METRIC = "GB/s"

SPACE = (
    NUM_WARPS,
    NUM_STAGES,
    ROWS_PER_PROGRAM,
    PERSISTENT,
    LOAD_EVICTION,
    max_block_knob("max_block_v",
                   "capping a vocab tile at {new} elements instead of {old} switches between holding the whole {vocab}-wide row of logits in registers and looping over tiles of it"),
    Knob("exp2", 3, (True, False),
         "exp2={new} (was {old}): exp(x - max) as exp2((x - max) * log2(e)) maps onto the ex2 instruction with the scale folded into one multiply"),
    Knob("online", 4, (True, False),
         "online={new} (was {old}): a running max with a rescaled running sum reads each tile of logits once; two passes (max, then sum) read them twice"),
    AUTOTUNE,
    TMA,
    Knob("target_from_tile", 6, (False, True),
         "target_from_tile={new} (was {old}): pick logits[target] out of the tile already in registers with a compare-and-sum instead of a separate scattered load per row"),
)

DEFAULTS = {
    "num_warps": 16,
    "num_stages": 1,
    "max_block_v": 32768,
    "rows_per_program": 1,
    "persistent": 0,
    "load_eviction": "evict_first",
    "exp2": True,
    "online": True,
    "autotune": False,
    "tma": False,
    "target_from_tile": False,
}


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    vocab = int(shape.get("vocab", 0))
    out = effective_rowwise(params, vocab, "max_block_v")
    if vocab and vocab <= out["max_block_v"]:
        out["online"] = None
    return out


LOG2E_CONSTANT = 'LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) == exp2(x * LOG2E)'


def _exp(p: dict, arg: str) -> str:
    return f"tl.exp2(({arg}) * LOG2E)" if p["exp2"] else f"tl.exp({arg})"


def _log(p: dict, arg: str) -> str:
    return f"tl.log2({arg}) / LOG2E" if p["exp2"] else f"tl.log({arg})"


def _kernel(p: dict) -> str:
    ev = eviction_arg(p["load_eviction"])
    whole_load = fill('x = tl.load(x_rows + cols[None, :], mask=mask, other=-float("inf")<<ev>>)', ev=ev)
    if p["tma"]:
        whole_load = fill(
            """
            if USE_TMA:
                x = x_desc.load([first_row, 0])
                x = tl.where(mask, x.to(tl.float32), -float("inf"))
            else:
                <<load>>
            """,
            load=whole_load,
        )
    tiled_load = fill('tl.load(x_rows + c[None, :], mask=mask, other=-float("inf")<<ev>>).to(tl.float32)', ev=ev)
    if p["target_from_tile"]:
        whole_target = "x_t = tl.sum(tl.where(cols[None, :] == t[:, None], x, 0.0), axis=1)"
        tiled_target_init = "x_t = tl.zeros([ROWS], dtype=tl.float32)"
        tiled_target_step = "x_t += tl.sum(tl.where(c[None, :] == t[:, None], x, 0.0), axis=1)"
    else:
        gather = "x_t = tl.load(x_ptr + rows.to(tl.int64) * stride_x + t, mask=row_mask, other=0.0).to(tl.float32)"
        whole_target, tiled_target_init, tiled_target_step = gather, gather, ""
    if p["online"]:
        tiled = fill(
            """
            # One pass: a running max, and a running sum rescaled whenever the max grows.
            <<target_init>>
            m = tl.full([ROWS], -float("inf"), dtype=tl.float32)
            s = tl.zeros([ROWS], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_V):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                x = <<load>>
                <<target_step>>
                m_new = tl.maximum(m, tl.max(x, axis=1))
                m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
                s = s * <<rescale>> + tl.sum(<<e>>, axis=1)
                m = m_new
            m = tl.where(m == -float("inf"), 0.0, m)
            """,
            target_init=tiled_target_init,
            target_step=tiled_target_step,
            load=tiled_load,
            rescale=_exp(p, "m - m_safe"),
            e=_exp(p, "x - m_safe[:, None]"),
        )
    else:
        tiled = fill(
            """
            # Pass 1: the row max (and the target logit). Pass 2: the sum of exponentials.
            <<target_init>>
            m = tl.full([ROWS], -float("inf"), dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_V):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                x = <<load>>
                <<target_step>>
                m = tl.maximum(m, tl.max(x, axis=1))
            m = tl.where(m == -float("inf"), 0.0, m)
            s = tl.zeros([ROWS], dtype=tl.float32)
            for start in range(0, n_cols, BLOCK_V):
                c = start + cols
                mask = row_mask[:, None] & (c < n_cols)[None, :]
                x = <<load>>
                s += tl.sum(<<e>>, axis=1)
            """,
            target_init=tiled_target_init,
            target_step=tiled_target_step,
            load=tiled_load,
            e=_exp(p, "x - m[:, None]"),
        )
    body = fill(
        """
        first_row = row_block * ROWS
        rows = first_row + tl.arange(0, ROWS)
        row_mask = rows < n_rows
        x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
        t = tl.load(t_ptr + rows, mask=row_mask, other=0)
        if NUM_TILES == 1:
            # The whole row of logits fits one tile: read it once.
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            <<whole_load>>
            x = x.to(tl.float32)
            m = tl.max(x, axis=1)
            m = tl.where(m == -float("inf"), 0.0, m)  # rows past the end: keep them finite
            s = tl.sum(<<e_whole>>, axis=1)
            <<whole_target>>
        else:
            <<tiled>>
        loss = tl.where(row_mask, m + <<log_s>> - x_t, 0.0)
        total += tl.sum(loss, axis=0)
        """,
        whole_load=whole_load,
        e_whole=_exp(p, "x - m[:, None]"),
        whole_target=whole_target,
        tiled=tiled,
        log_s=_log(p, "s"),
    )
    tma_setup = ""
    if p["tma"]:
        tma_setup = """
            if USE_TMA:
                x_desc = tl.make_tensor_descriptor(x_ptr, shape=[n_rows, n_cols], strides=[stride_x, 1], block_shape=[ROWS, BLOCK_V])
            """
    kernel = fill(
        """
        @triton.jit
        def _cross_entropy_rows(
            x_ptr, t_ptr, partial_ptr, n_rows, n_cols, stride_x,
            BLOCK_V: tl.constexpr, ROWS: tl.constexpr, NUM_TILES: tl.constexpr, USE_TMA: tl.constexpr,
        ):
            cols = tl.arange(0, BLOCK_V)
            total = tl.zeros([1], dtype=tl.float32)
            <<tma_setup>>
            <<loop>>
            tl.store(partial_ptr + tl.program_id(0) + tl.arange(0, 1), total)
        """,
        tma_setup=tma_setup,
        loop=row_loop(body, bool(p["persistent"])),
    )
    if p["autotune"]:
        kernel = autotune_decorator(
            "[triton.Config({}, num_warps=w, num_stages=NUM_STAGES) for w in (16, 8, 32)]", '["n_cols", "ROWS"]'
        ) + "\n" + kernel
    finish = fill(
        """
        @triton.jit
        def _mean_of_partials(partial_ptr, out_ptr, n_partials, n_rows, BLOCK: tl.constexpr):
            # One program adds the partial sums in a fixed order, so the mean is repeatable bit for bit.
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, n_partials, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                acc += tl.load(partial_ptr + offs, mask=offs < n_partials, other=0.0)
            tl.store(out_ptr, tl.sum(acc, axis=0) / n_rows)
        """
    )
    return kernel + "\n\n\n" + finish


def _launcher(p: dict) -> str:
    grid = "(min(n_blocks, PERSISTENT * _num_sms(x.device)),)" if p["persistent"] else "(n_blocks,)"
    return fill(
        '''
        def kernel_fn(logits, targets):
            """Mean over rows of -log softmax(logits)[target], as an fp32 scalar."""
            n_cols = logits.shape[-1]
            x = logits.reshape(logits.shape[:-1].numel(), n_cols)
            if x.stride(-1) != 1:
                x = x.contiguous()
            t = targets.reshape(-1).contiguous()
            n_rows = x.shape[0]
            out = torch.empty((), dtype=torch.float32, device=x.device)
            if n_rows == 0:
                return torch.full((), float("nan"), dtype=torch.float32, device=x.device)
            block_v = min(triton.next_power_of_2(n_cols), MAX_BLOCK_V)
            num_tiles = triton.cdiv(n_cols, block_v)
            n_blocks = triton.cdiv(n_rows, ROWS_PER_PROGRAM)
            grid = <<grid>>
            partials = torch.empty(grid[0], dtype=torch.float32, device=x.device)
            _cross_entropy_rows[grid](
                x, t, partials, n_rows, n_cols, x.stride(0),
                BLOCK_V=block_v, ROWS=ROWS_PER_PROGRAM, NUM_TILES=num_tiles,
                USE_TMA=<<use_tma>><<launch_opts>>,
            )
            _mean_of_partials[(1,)](partials, out, grid[0], n_rows, BLOCK=1024, num_warps=4)
            return out
        ''',
        grid=grid,
        launch_opts=launch_opts(p["autotune"]),
        use_tma="TMA and num_tiles == 1 and _tma_ready(x, block_cols=block_v)" if p["tma"] else "False",
    )


def render(params: dict) -> str:
    """A complete candidate file for these params (any missing knob takes its default)."""
    p = {**DEFAULTS, **params}
    return join(
        '"""Cross-entropy candidate written by the playbook agent from its template (autokernel)."""',
        IMPORTS,
        knob_header(SPACE, p),
        INTERPRETER_NOTE if p["autotune"] else None,
        LOG2E_CONSTANT if p["exp2"] else None,
        NUM_SMS if p["persistent"] else None,
        TMA_READY if p["tma"] else None,
        _kernel(p),
        _launcher(p),
    )

"""Cross-entropy template: mean over rows of logsumexp(logits) - logits[target], an fp32 scalar.

Memory-bound: the floor is one read of the logits. Each program reduces ROWS rows to losses and
adds them into one partial sum and one count of its own (a row whose target is -100 is ignored, as
F.cross_entropy does by default); then it draws a ticket (an integer atomic add, acquire-release), and
the program that draws the last adds the partials in a fixed order and divides the sum by the count.
One launch, not a second kernel for the mean: at LLM shapes a launch's host time shows beside the
kernel's. No float atomics: the mean is bit-for-bit repeatable. The ticket counter is kept per device
and stream, allocated zeroed once and set back to zero by the last program.

With ALIGNED_WINDOW on and a vocabulary that is not a multiple of the 16-byte vector width (GPT-2's
50257), rows start at odd addresses and Triton would read them two bytes at a time; the kernel then
reads each row over its aligned window (as the CUDA starter does): from the 16-byte boundary
at or before the row's start, a multiple of 16 bytes long (mask bounds that are multiples of VEC, so
the loads are 16-byte vectors), with the neighbouring rows' elements set to -inf after the load. The
launcher keeps the last block of rows, whose windows could run past the tensor, on the plain path (a
second launch: the ticket counts the programs of both, so the last of them all takes the mean), and TMA
only ever serves the plain path. Off by default: in the Triton starter's
one-row form the window measured slower than the plain rows (docs/results/kernel_notes.md), so it is
a move for the search to try, not a given.
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
    Knob("aligned_window", 2, (True, False),
         "aligned_window={new} (was {old}): rows of {vocab} logits start at odd addresses (the vocabulary is not a multiple of 8), and the aligned window that gives 16-byte vector loads costs a few masked extra elements per row, per-row index arithmetic and a second launch for the last rows; the plain row pointer saves those if the loads were not the limit",
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

DEFAULTS = {  # tiles of 8192 over 8 warps: the fastest form at every vocabulary probed (scripts/rowwise_probe.py)
    "num_warps": 8,
    "num_stages": 1,
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
    and not a multiple of the vector width, and there are rows before the last block (which is plain)."""
    vocab, rows = int(shape.get("vocab", 0)), int(shape.get("rows", 0))
    if not params.get("aligned_window") or not vocab or vocab % vector_width(dtype) == 0:
        return False
    return not rows or rows > params["rows_per_program"]


def effective(params: dict, shape: dict, dtype: str = "") -> dict:
    vocab = int(shape.get("vocab", 0))
    vec = vector_width(dtype)
    window = window_used(params, shape, dtype)
    width = vocab + vec - 1 if window else vocab  # a window spans up to VEC - 1 elements more than the row
    out = effective_rowwise(params, width, "max_block_v")
    if width and width <= out["max_block_v"]:
        out["online"] = None
    if not window_used({**params, "aligned_window": True}, shape, dtype):
        out["aligned_window"] = None  # an aligned (or unknown) vocabulary: both settings are the plain path
    return out


LOG2E_CONSTANT = 'LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) == exp2(x * LOG2E)'


def _exp(p: dict, arg: str) -> str:
    return f"tl.exp2(({arg}) * LOG2E)" if p["exp2"] else f"tl.exp({arg})"


def _log(p: dict, arg: str) -> str:
    return f"tl.log2({arg}) / LOG2E" if p["exp2"] else f"tl.log({arg})"


def _by_vec(p: dict, window: str, plain: str) -> str:
    """`plain` as it always was; with the aligned window on, the window's code beside it behind VEC > 1
    (a constexpr, so each launch compiles only its own path)."""
    if not p["aligned_window"]:
        return plain
    return fill(
        """
        if VEC > 1:
            <<window>>
        else:
            <<plain>>
        """,
        window=window,
        plain=plain,
    )


# Rows read over their aligned windows (module docstring): `lead` elements of the row before, `n_win`
# elements in all, a multiple of VEC, from a 16-byte-aligned base; `n_span` bounds every row's window.
WINDOW_SETUP = """
    if VEC > 1:
        # Each row from the 16-byte boundary at or before its start, n_win (a multiple of VEC) elements long.
        row_start = rows.to(tl.int64) * stride_x
        base = (row_start // VEC) * VEC
        lead = (row_start - base)[:, None]  # the previous row's elements at the window's start
        n_win = ((lead + n_cols + VEC - 1) // VEC) * VEC
        x_rows = x_ptr + base[:, None]
        n_span = n_cols + VEC - 1  # the widest window
    else:
        n_span = n_cols
"""
# Inside a window: the row's own elements (the neighbours' are set to -inf after the load).
IN_ROW = "({c}[None, :] >= lead) & ({c}[None, :] < lead + n_cols)"


def _kernel(p: dict) -> str:
    ev = eviction_arg(p["load_eviction"])
    window = bool(p["aligned_window"])
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
    whole_read = _by_vec(
        p,
        fill(
            """
            mask = row_mask[:, None] & (cols[None, :] < n_win)
            x = tl.load(x_rows + cols[None, :], mask=mask, other=-float("inf")<<ev>>)
            x = tl.where(<<in_row>>, x, -float("inf"))
            """,
            ev=ev,
            in_row=IN_ROW.format(c="cols"),
        ),
        fill(
            """
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            <<whole_load>>
            """,
            whole_load=whole_load,
        ),
    )
    tiled_load = fill('tl.load(x_rows + c[None, :], mask=mask, other=-float("inf")<<ev>>).to(tl.float32)', ev=ev)
    tiled_read = _by_vec(
        p,
        fill(
            """
            mask = row_mask[:, None] & (c[None, :] < n_win)
            x = <<load>>
            x = tl.where(<<in_row>>, x, -float("inf"))
            """,
            in_row=IN_ROW.format(c="c"),
            load=tiled_load,
        ),
        fill(
            """
            mask = row_mask[:, None] & (c < n_cols)[None, :]
            x = <<load>>
            """,
            load=tiled_load,
        ),
    )
    span = "n_span" if window else "n_cols"
    if p["target_from_tile"]:
        # Inside a window the column of the row is the window index minus lead.
        whole_target = _by_vec(p, "x_t = tl.sum(tl.where(cols[None, :] - lead == t[:, None], x, 0.0), axis=1)",
                               "x_t = tl.sum(tl.where(cols[None, :] == t[:, None], x, 0.0), axis=1)")
        tiled_target_init = "x_t = tl.zeros([ROWS], dtype=tl.float32)"
        tiled_target_step = _by_vec(p, "x_t += tl.sum(tl.where(c[None, :] - lead == t[:, None], x, 0.0), axis=1)",
                                    "x_t += tl.sum(tl.where(c[None, :] == t[:, None], x, 0.0), axis=1)")
        early_gather = ""
    else:
        # Issued before the row is streamed, so its latency hides under the stream instead of ending the row.
        early_gather = "x_t = tl.load(x_ptr + rows.to(tl.int64) * stride_x + t, mask=row_mask, other=0.0).to(tl.float32)"
        whole_target, tiled_target_init, tiled_target_step = "", "", ""
    if p["online"]:
        tiled = fill(
            """
            # One pass: a running max, and a running sum rescaled whenever the max grows.
            <<target_init>>
            m = tl.full([ROWS], -float("inf"), dtype=tl.float32)
            s = tl.zeros([ROWS], dtype=tl.float32)
            for start in range(0, <<span>>, BLOCK_V):
                c = start + cols
                <<read>>
                <<target_step>>
                m_new = tl.maximum(m, tl.max(x, axis=1))
                m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
                s = s * <<rescale>> + tl.sum(<<e>>, axis=1)
                m = m_new
            m = tl.where(m == -float("inf"), 0.0, m)
            """,
            target_init=tiled_target_init,
            target_step=tiled_target_step,
            span=span,
            read=tiled_read,
            rescale=_exp(p, "m - m_safe"),
            e=_exp(p, "x - m_safe[:, None]"),
        )
    else:
        tiled = fill(
            """
            # Pass 1: the row max (and the target logit). Pass 2: the sum of exponentials.
            <<target_init>>
            m = tl.full([ROWS], -float("inf"), dtype=tl.float32)
            for start in range(0, <<span>>, BLOCK_V):
                c = start + cols
                <<read>>
                <<target_step>>
                m = tl.maximum(m, tl.max(x, axis=1))
            m = tl.where(m == -float("inf"), 0.0, m)
            s = tl.zeros([ROWS], dtype=tl.float32)
            for start in range(0, <<span>>, BLOCK_V):
                c = start + cols
                <<read>>
                s += tl.sum(<<e>>, axis=1)
            """,
            target_init=tiled_target_init,
            target_step=tiled_target_step,
            span=span,
            read=tiled_read,
            e=_exp(p, "x - m[:, None]"),
        )
    body = fill(
        """
        first_row = row_block * ROWS
        rows = first_row + tl.arange(0, ROWS)
        row_mask = rows < n_rows
        x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_x
        <<window_setup>>
        t = tl.load(t_ptr + rows, mask=row_mask, other=-100)
        counts = row_mask & (t != -100)  # a target of -100 is ignored (F.cross_entropy's default)
        t = tl.where(counts, t, 0)
        <<early_gather>>
        if NUM_TILES == 1:
            # The whole row of logits fits one tile: read it once.
            <<whole_read>>
            x = x.to(tl.float32)
            m = tl.max(x, axis=1)
            m = tl.where(m == -float("inf"), 0.0, m)  # rows past the end: keep them finite
            s = tl.sum(<<e_whole>>, axis=1)
            <<whole_target>>
        else:
            <<tiled>>
        loss = tl.where(counts, m + <<log_s>> - x_t, 0.0)
        total += tl.sum(loss, axis=0)
        counted += tl.sum(counts.to(tl.float32), axis=0)
        """,
        window_setup=WINDOW_SETUP if window else "",
        early_gather=early_gather,
        whole_read=whole_read,
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
            x_ptr, t_ptr, partial_ptr, count_ptr, ticket_ptr, out_ptr, n_rows, n_cols, stride_x, first, n_partials,
            BLOCK_V: tl.constexpr, ROWS: tl.constexpr, NUM_TILES: tl.constexpr, USE_TMA: tl.constexpr,
            MEAN_BLOCK: tl.constexpr,<<vec>>
        ):
            cols = tl.arange(0, BLOCK_V)
            total = tl.zeros([1], dtype=tl.float32)
            counted = tl.zeros([1], dtype=tl.float32)
            <<tma_setup>>
            <<loop>>
            slot = first + tl.program_id(0)  # this launch's partials start at `first`
            tl.store(partial_ptr + slot + tl.arange(0, 1), total)
            tl.store(count_ptr + slot + tl.arange(0, 1), counted)
            tl.debug_barrier()  # every thread's stores are ordered before the ticket's release
            # acq_rel: the program that draws the last ticket of the call sees every other program's partials.
            if tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == n_partials - 1:
                # The partials added in a fixed order, so the mean is repeatable bit for bit; no row counted
                # gives 0/0 = nan, as PyTorch does.
                acc = tl.zeros([MEAN_BLOCK], dtype=tl.float32)
                n = tl.zeros([MEAN_BLOCK], dtype=tl.float32)
                for start in range(0, n_partials, MEAN_BLOCK):
                    offs = start + tl.arange(0, MEAN_BLOCK)
                    acc += tl.load(partial_ptr + offs, mask=offs < n_partials, other=0.0, cache_modifier=".cg")
                    n += tl.load(count_ptr + offs, mask=offs < n_partials, other=0.0, cache_modifier=".cg")
                tl.store(out_ptr, tl.sum(acc, axis=0) / tl.sum(n, axis=0))
                tl.store(ticket_ptr, 0)  # ready for the next call on this stream
        """,
        tma_setup=tma_setup,
        loop=row_loop(body, bool(p["persistent"])),
        vec=" VEC: tl.constexpr," if window else "",
    )
    if p["autotune"]:
        kernel = autotune_decorator(
            "[triton.Config({}, num_warps=w, num_stages=NUM_STAGES) for w in (16, 8, 32)]",
            '["n_cols", "ROWS", "VEC"]' if window else '["n_cols", "ROWS"]',
        ) + "\n" + kernel
    return kernel + "\n\n\n" + TICKETS


# The launch's helpers: the mean's tile, and the ticket counter of the current stream.
TICKETS = fill(
    """
    def _mean_block(n_partials):
        # All partials in one tile up to 8192: at 8192 rows, faster than a 1024-wide loop (scripts/rowwise_probe.py).
        return min(max(triton.next_power_of_2(n_partials), 128), 8192)


    _TICKETS = {}  # (device, stream) -> its int64 ticket counter, zero between launches; at most MAX_TICKETS
    MAX_TICKETS = 64


    def _ticket(device):
        # Allocated zeroed once per device and stream (each launch leaves it at zero): launches on two
        # streams at once never share one.
        stream = triton.runtime.driver.active.get_current_stream(device.index) if device.type == "cuda" else 0
        ticket = _TICKETS.get((device, stream))
        if ticket is None:
            if len(_TICKETS) >= MAX_TICKETS:  # a dropped counter is at zero: its stream gets a fresh one
                _TICKETS.clear()
            ticket = _TICKETS[(device, stream)] = torch.zeros(1, dtype=torch.int64, device=device)
        return ticket
    """
)


# Both launchers begin the same way: the logits as [rows, vocab] with unit column stride, the targets flat.
_PROLOGUE = '''
def kernel_fn(logits, targets):
    """Mean over rows of -log softmax(logits)[target], as an fp32 scalar."""
    n_cols = logits.shape[-1]
    x = logits if logits.dim() == 2 else logits.reshape(logits.shape[:-1].numel(), n_cols)
    if x.stride(-1) != 1:
        x = x.contiguous()
    t = targets if targets.dim() == 1 and targets.stride(0) == 1 else targets.reshape(-1).contiguous()
    n_rows = x.shape[0]
    out = torch.empty((), dtype=torch.float32, device=x.device)
    if n_rows == 0:
        return torch.full((), float("nan"), dtype=torch.float32, device=x.device)
'''


def _launcher(p: dict) -> str:
    grid = "(min(n_blocks, PERSISTENT * _num_sms(x.device)),)" if p["persistent"] else "(n_blocks,)"
    if p["aligned_window"]:
        return _window_launcher(p, grid)
    return fill(
        '''
        _PLANS = {}  # (rows, columns, device index) -> (block_v, num_tiles, grid, mean_block), once per shape
        MAX_PLANS = 256  # emptied when full: dynamic shapes never grow it without end


        <<prologue>>
            key = (n_rows, n_cols, x.get_device())
            plan = _PLANS.get(key)
            if plan is None:
                if len(_PLANS) >= MAX_PLANS:
                    _PLANS.clear()
                block_v = min(triton.next_power_of_2(n_cols), MAX_BLOCK_V)
                n_blocks = triton.cdiv(n_rows, ROWS_PER_PROGRAM)
                grid = <<grid>>
                plan = _PLANS[key] = (block_v, triton.cdiv(n_cols, block_v), grid, _mean_block(grid[0]))
            block_v, num_tiles, grid, mean_block = plan
            partials = torch.empty(2 * grid[0], dtype=torch.float32, device=x.device)  # sums, then counts
            _cross_entropy_rows[grid](
                x, t, partials, partials[grid[0]:], _ticket(x.device), out, n_rows, n_cols, x.stride(0), 0, grid[0],
                BLOCK_V=block_v, ROWS=ROWS_PER_PROGRAM, NUM_TILES=num_tiles,
                USE_TMA=<<use_tma>>, MEAN_BLOCK=mean_block<<launch_opts>>,
            )
            return out
        ''',
        prologue=_PROLOGUE,
        grid=grid,
        launch_opts=launch_opts(p["autotune"]),
        use_tma="TMA and num_tiles == 1 and _tma_ready(x, block_cols=block_v)" if p["tma"] else "False",
    )


def _window_launcher(p: dict, grid: str) -> str:
    """The launcher with the aligned window: at an odd vocabulary, the rows before the last block go
    through the window (VEC > 1) and the last block, whose windows could run past the tensor, through the
    plain path (VEC = 1), in a second launch; an aligned vocabulary has only the plain launch."""
    return fill(
        '''
        <<prologue>>
            vec = 16 // x.element_size()
            split = 0  # rows [0, split) through the aligned window, the rest plain
            if ALIGNED_WINDOW and n_cols % vec and x.stride(0) >= vec and x.data_ptr() % 16 == 0:
                split = (n_rows - 1) // ROWS_PER_PROGRAM * ROWS_PER_PROGRAM
            parts = [(x[:split], t[:split], vec), (x[split:], t[split:], 1)] if split else [(x, t, 1)]
            grids = []
            for xp, _, _ in parts:
                n_blocks = triton.cdiv(xp.shape[0], ROWS_PER_PROGRAM)
                grids.append(<<grid>>)
            n_partials = sum(g[0] for g in grids)
            partials = torch.empty(2 * n_partials, dtype=torch.float32, device=x.device)  # sums, then counts
            ticket, mean_block, first = _ticket(x.device), _mean_block(n_partials), 0
            for (xp, tp, v), grid in zip(parts, grids):
                span = n_cols + v - 1  # a window spans up to VEC - 1 elements more than the row
                block_v = min(triton.next_power_of_2(span), MAX_BLOCK_V)
                num_tiles = triton.cdiv(span, block_v)
                _cross_entropy_rows[grid](
                    xp, tp, partials, partials[n_partials:], ticket, out, xp.shape[0], n_cols, xp.stride(0), first,
                    n_partials, BLOCK_V=block_v, ROWS=ROWS_PER_PROGRAM, NUM_TILES=num_tiles,
                    USE_TMA=<<use_tma>>, MEAN_BLOCK=mean_block, VEC=v<<launch_opts>>,
                )
                first += grid[0]
            return out
        ''',
        prologue=_PROLOGUE,
        grid=grid,
        launch_opts=launch_opts(p["autotune"]),
        # TMA serves the plain path only (at an odd vocabulary its 16-byte row-stride rule fails anyway).
        use_tma="v == 1 and TMA and num_tiles == 1 and _tma_ready(xp, block_cols=block_v)" if p["tma"] else "False",
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

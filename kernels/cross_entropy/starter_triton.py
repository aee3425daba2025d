"""Triton starter for cross-entropy: one row per program, a single streaming pass over the vocab.

Each program keeps a running max and a rescaled running sum of exp (online logsumexp, exp2 with
log2(e) folded in) and writes its row's loss (0 for a row whose target is -100: ignored, as
F.cross_entropy does by default). The whole forward is one launch, because at LLM shapes the kernel
is short enough that a second launch's host time shows in the wall clock: each program then draws a
ticket (an integer atomic add, acquire-release), and the one that draws the last adds all the row
losses and counts the rows that count in a fixed order and divides. Float atomics into the mean would
make it depend on the order the programs finish; this way the mean is bitwise repeatable. The ticket
counter is kept per device and stream, allocated zeroed once, and set back to zero by the last
program, so no launch needs a memset first. The launch shapes and counters are kept in tables of at most
MAX_PLANS and MAX_TICKETS entries, emptied when full: dynamic shapes or many streams never grow them
without end.

Choices the probes settled (numbers: docs/results/kernel_notes.md): tiles of 8192 logits over 8
warps, ahead of 16384 over 16 at every vocabulary probed; logits[row, target] loaded before the
stream, so its latency hides under it instead of ending every row; and the mean reads all the row
losses in one tile rather than looping over 1024-wide tiles.

A vocabulary that is not a multiple of 8 (GPT-2's 50257) starts rows at odd addresses, and Triton
then loads them two bytes at a time. Reading such rows over a 16-byte-aligned window instead (16-byte
loads, neighbours masked off) measured slower here, so the starter keeps the plain form and the
playbook offers the window as a tier-2 move (ALIGNED_WINDOW); the CUDA starter, where the window
measured faster, keeps it.

The knobs below are this file's choices as constants: the playbook agent writes a candidate by moving
one of them (their reasons: autokernel/playbook/templates/cross_entropy.py). A 0 is the rule above.
"""

import os

import torch
import triton
import triton.language as tl

from autokernel.kernels.triton_common import autotuned, exp, launch_options, programs, row_view, tma_ready

NUM_WARPS = 0  # tier 1, launch shape: 0 = by tile (8 from 4096 logits, 4 from 1024, else 2)
NUM_STAGES = 0  # tier 1, launch shape: 0 = Triton's default
ROWS_PER_PROGRAM = 1  # tier 2, memory access: rows a program takes one after another
PERSISTENT = 0  # tier 2, memory access: programs per SM looping over row blocks (0 = one per block)
LOAD_EVICTION = 'evict_first'  # tier 2, memory access: the hint on the logits' loads
MAX_BLOCK_V = 8192  # tier 2, memory access: the vocab tile (a row at most this wide is one tile)
ALIGNED_WINDOW = False  # tier 2, memory access: rows at odd addresses read over 16-byte-aligned windows
EXP2 = True  # tier 3, compute: exp and log as exp2 and log2 with the scales folded in
ONLINE = True  # tier 4, algorithm: max and sum in one pass over the logits (False: a pass each)
AUTOTUNE = False  # tier 4, algorithm: triton.autotune picks num_warps at run time
TMA = False  # tier 5, Hopper: the logits through tensor descriptors where TMA's 16-byte rules allow
TARGET_FROM_TILE = False  # tier 6, kernel-specific: logits[target] picked out of the tiles, not loaded first

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
MAX_MEAN_BLOCK = 8192


@triton.jit
def _tile(ptr, desc, row, start, idx, n_load, lead, vocab, EVICTION: tl.constexpr, WINDOW: tl.constexpr,
          USE_TMA: tl.constexpr):
    """The logits at idx of one row, fp32, -inf outside the row's `vocab` (from `lead` on in a WINDOW)."""
    if USE_TMA:  # a descriptor pads logits past the row with zeros: they are set to -inf after
        x = tl.reshape(desc.load([row.to(tl.int32), start]), (idx.shape[0],)).to(tl.float32)
        x = tl.where(idx < vocab, x, float("-inf"))
    else:
        x = tl.load(ptr + idx, mask=idx < n_load, other=float("-inf"), eviction_policy=EVICTION).to(tl.float32)
    if WINDOW:
        x = tl.where((idx >= lead) & (idx < lead + vocab), x, float("-inf"))
    return x


@triton.jit
def _row_stats(ptr, n_load, lead, vocab, target, desc, row, cols, BLOCK_V: tl.constexpr, EVICTION: tl.constexpr,
               EXP2: tl.constexpr, ONLINE: tl.constexpr, TARGET_FROM_TILE: tl.constexpr, WINDOW: tl.constexpr,
               USE_TMA: tl.constexpr):
    """(max, sum of exp(x - max), logits[target] where TARGET_FROM_TILE) over one row: n_load elements from
    ptr, the row's own `vocab` of them from `lead` on (a WINDOW's neighbours are set to -inf after the load)."""
    m = tl.full((), float("-inf"), tl.float32)  # running max (natural units)
    s = tl.zeros((), tl.float32)  # running sum of exp(x - m)
    x_t = tl.zeros((), tl.float32)
    for start in range(0, n_load, BLOCK_V):
        idx = start + cols
        x = _tile(ptr, desc, row, start, idx, n_load, lead, vocab, EVICTION, WINDOW, USE_TMA)
        if TARGET_FROM_TILE:
            x_t += tl.sum(tl.where(idx - lead == target, x, 0.0), axis=0)
        if ONLINE:
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * exp(m - m_new, EXP2) + tl.sum(exp(x - m_new, EXP2), axis=0)
            m = m_new
        else:
            m = tl.maximum(m, tl.max(x, axis=0))
    if not ONLINE:  # the second pass: the sum of exp(x - max)
        for start in range(0, n_load, BLOCK_V):
            x = _tile(ptr, desc, row, start, start + cols, n_load, lead, vocab, EVICTION, WINDOW, USE_TMA)
            s += tl.sum(exp(x - m, EXP2), axis=0)
    return m, s, x_t


@triton.jit
def _row_loss(logits_ptr, targets_ptr, losses_ptr, row, rows, vocab, stride_row, desc, BLOCK_V: tl.constexpr,
              EVICTION: tl.constexpr, EXP2: tl.constexpr, ONLINE: tl.constexpr, VEC: tl.constexpr,
              TARGET_FROM_TILE: tl.constexpr, USE_TMA: tl.constexpr):
    """Stores row's loss: 0 for a target of -100 (ignored), else logsumexp(row) - row[target]."""
    row_ptr = logits_ptr + row * stride_row
    cols = tl.arange(0, BLOCK_V)
    target = tl.load(targets_ptr + row)
    counts = target != -100
    if not TARGET_FROM_TILE:
        x_t = tl.load(row_ptr + tl.where(counts, target, 0)).to(tl.float32)  # issued before the stream
    if VEC > 1 and row < rows - 1:  # the last row's window could run past the tensor: it is read plain
        # from the 16-byte boundary at or before the row's start, a multiple of VEC elements long
        base = (row * stride_row // VEC) * VEC
        lead = row * stride_row - base
        m, s, x_tile = _row_stats(logits_ptr + base, ((lead + vocab + VEC - 1) // VEC) * VEC, lead, vocab, target,
                                  desc, row, cols, BLOCK_V, EVICTION, EXP2, ONLINE, TARGET_FROM_TILE, True, False)
    else:
        m, s, x_tile = _row_stats(row_ptr, vocab, 0, vocab, target, desc, row, cols, BLOCK_V, EVICTION, EXP2,
                                  ONLINE, TARGET_FROM_TILE, False, USE_TMA)
    if TARGET_FROM_TILE:
        x_t = x_tile
    if EXP2:
        lse = m + tl.log2(s) * 0.6931471805599453
    else:
        lse = m + tl.log(s)
    tl.store(losses_ptr + row, tl.where(counts, lse - x_t, 0.0))


@triton.jit
def _last_program(rows, ROWS: tl.constexpr, PERSISTENT: tl.constexpr):
    """The id of the launch's last program: rows - 1 with a program per row, else from the grid."""
    if ROWS == 1 and not PERSISTENT:
        return rows - 1
    else:
        return tl.num_programs(0) - 1


@triton.jit
def _cross_entropy_kernel(logits_ptr, targets_ptr, losses_ptr, ticket_ptr, out_ptr, rows, vocab, stride_row,
                          BLOCK_V: tl.constexpr, MEAN_BLOCK: tl.constexpr, ROWS: tl.constexpr = 1,
                          PERSISTENT: tl.constexpr = False, EVICTION: tl.constexpr = "evict_first",
                          EXP2: tl.constexpr = True, ONLINE: tl.constexpr = True, VEC: tl.constexpr = 1,
                          TARGET_FROM_TILE: tl.constexpr = False, USE_TMA: tl.constexpr = False):
    desc = logits_ptr
    if USE_TMA:
        desc = tl.make_tensor_descriptor(logits_ptr, shape=[rows, vocab], strides=[stride_row, 1],
                                         block_shape=[1, BLOCK_V])
    if ROWS == 1 and not PERSISTENT:  # one row per program
        _row_loss(logits_ptr, targets_ptr, losses_ptr, tl.program_id(0).to(tl.int64), rows, vocab, stride_row, desc,
                  BLOCK_V, EVICTION, EXP2, ONLINE, VEC, TARGET_FROM_TILE, USE_TMA)
    else:  # blocks of ROWS rows, a grid-stride loop over them where the grid is persistent
        for block in range(tl.program_id(0), tl.cdiv(rows, ROWS), tl.num_programs(0)):
            for r in range(block * ROWS, tl.minimum(block * ROWS + ROWS, rows)):
                _row_loss(logits_ptr, targets_ptr, losses_ptr, tl.cast(r, tl.int64), rows, vocab, stride_row, desc,
                          BLOCK_V, EVICTION, EXP2, ONLINE, VEC, TARGET_FROM_TILE, USE_TMA)
    tl.debug_barrier()  # every thread's store is ordered before the ticket's release
    # acq_rel: the program that draws the last ticket sees every other program's loss
    if tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == _last_program(rows, ROWS, PERSISTENT):
        offs = tl.arange(0, MEAN_BLOCK)
        acc = tl.zeros((MEAN_BLOCK,), tl.float32)
        n = tl.zeros((MEAN_BLOCK,), tl.float32)
        for start in range(0, rows, MEAN_BLOCK):
            idx = start + offs
            acc += tl.load(losses_ptr + idx, mask=idx < rows, other=0.0, cache_modifier=".cg")
            n += (tl.load(targets_ptr + idx, mask=idx < rows, other=-100) != -100).to(tl.float32)
        tl.store(out_ptr, tl.sum(acc, axis=0) / tl.sum(n, axis=0))  # no row counted: 0/0 = nan, as PyTorch
        tl.store(ticket_ptr, 0)  # ready for the next launch on this stream


if AUTOTUNE:
    _cross_entropy_kernel = autotuned(_cross_entropy_kernel, ["vocab", "ROWS", "VEC"], (16, 8, 32), NUM_STAGES,
                                      os.environ.get("TRITON_INTERPRET") == "1")


def _launch_shape(rows, vocab):
    """(vocab tile, warps, mean tile): the same for every call at a shape, so computed once per shape."""
    block = min(triton.next_power_of_2(vocab), MAX_BLOCK_V)
    warps = 8 if block >= 4096 else 4 if block >= 1024 else 2
    return block, warps, min(max(triton.next_power_of_2(rows), 128), MAX_MEAN_BLOCK)


def _grid(rows, device):
    """Programs of the launch: one per block of ROWS_PER_PROGRAM rows, at most PERSISTENT per SM where set."""
    return programs(triton.cdiv(rows, ROWS_PER_PROGRAM), PERSISTENT, device)


def _options(constexprs, warps):
    """A launch's keyword arguments: the constexprs, num_warps (NUM_WARPS, else the path's `warps`) and
    num_stages (NUM_STAGES, else Triton's default); autotune picks its own."""
    return launch_options(constexprs, NUM_WARPS or warps, NUM_STAGES, AUTOTUNE)


def _plan(rows, vocab, device):
    """(grid, launch options) of one shape: the same for every call at it, so computed once per shape."""
    block, warps, mean_block = _launch_shape(rows, vocab)
    constexprs = {"BLOCK_V": block, "MEAN_BLOCK": mean_block, "ROWS": ROWS_PER_PROGRAM, "PERSISTENT": bool(PERSISTENT),
                  "EVICTION": LOAD_EVICTION, "EXP2": EXP2, "ONLINE": ONLINE, "VEC": 1,
                  "TARGET_FROM_TILE": TARGET_FROM_TILE, "USE_TMA": False}
    return (_grid(rows, device),), _options(constexprs, warps)


def _window_vec(logits2d):
    """VEC for the aligned window: elements per 16-byte vector where rows start at odd addresses and the
    tensor's start is 16-byte aligned, else 1 (the plain rows)."""
    vec = 16 // logits2d.element_size()
    ok = logits2d.shape[-1] % vec and logits2d.stride(0) >= vec and logits2d.data_ptr() % 16 == 0
    return vec if ok else 1


_PLANS: dict = {}  # (rows, vocab) -> _plan(rows, vocab, device), at most MAX_PLANS
_TICKETS: dict = {}  # (device, stream) -> its int64 ticket counter, zero between launches; at most MAX_TICKETS
MAX_PLANS = 256
MAX_TICKETS = 64


def _ticket(device):
    """The ticket counter of the current stream on `device`, allocated zeroed once: each launch leaves it
    at zero again. One per stream, so launches on two streams at once never share one."""
    stream = triton.runtime.driver.active.get_current_stream(device.index) if device.type == "cuda" else 0
    ticket = _TICKETS.get((device, stream))
    if ticket is None:
        if len(_TICKETS) >= MAX_TICKETS:  # a dropped counter is at zero: the stream gets a fresh one if it comes back
            _TICKETS.clear()
        ticket = _TICKETS[(device, stream)] = torch.zeros(1, dtype=torch.int64, device=device)
    return ticket


def kernel_fn(logits, targets):
    vocab = logits.shape[-1]
    logits2d = row_view(logits)
    if targets.dim() != 1 or targets.dtype != torch.int64 or targets.stride(0) != 1:
        targets = targets.reshape(-1).to(torch.int64).contiguous()
    rows = logits2d.shape[0]
    device = logits.device
    out = torch.empty((), dtype=torch.float32, device=device)
    if not rows:
        return out.fill_(float("nan"))  # the mean of no rows, as PyTorch
    plan = _PLANS.get((rows, vocab))
    if plan is None:
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[(rows, vocab)] = _plan(rows, vocab, device)
    grid, options = plan
    if ALIGNED_WINDOW or TMA:  # both depend on this call's pointer and dtype
        options = {**options, "VEC": _window_vec(logits2d) if ALIGNED_WINDOW else 1,
                   "USE_TMA": TMA and tma_ready(logits2d, block_cols=options["BLOCK_V"])}
        options["USE_TMA"] = options["USE_TMA"] and options["VEC"] == 1  # TMA serves the plain rows only
    losses = torch.empty(rows, dtype=torch.float32, device=device)
    _cross_entropy_kernel[grid](logits2d, targets, losses, _ticket(device), out, rows, vocab, logits2d.stride(0),
                                **options)
    return out

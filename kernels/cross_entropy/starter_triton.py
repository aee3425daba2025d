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
playbook offers the window as a tier-2 move (`aligned_window`); the CUDA starter, where the window
measured faster, keeps it.
"""

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@triton.jit
def _cross_entropy_kernel(logits_ptr, targets_ptr, losses_ptr, ticket_ptr, out_ptr, rows, vocab, stride_row,
                          BLOCK_V: tl.constexpr, MEAN_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * stride_row
    cols = tl.arange(0, BLOCK_V)
    target = tl.load(targets_ptr + row)
    counts = target != -100
    x_t = tl.load(row_ptr + tl.where(counts, target, 0)).to(tl.float32)  # issued before the stream
    m = tl.full((), float("-inf"), tl.float32)  # running max (natural units)
    s = tl.zeros((), tl.float32)  # running sum of exp(x - m)
    for start in range(0, vocab, BLOCK_V):
        idx = start + cols
        x = tl.load(row_ptr + idx, mask=idx < vocab, other=float("-inf"),
                    eviction_policy="evict_first").to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), axis=0)
        m = m_new
    lse = m + tl.log2(s) * 0.6931471805599453
    tl.store(losses_ptr + row, tl.where(counts, lse - x_t, 0.0))
    tl.debug_barrier()  # every thread's store is ordered before the ticket's release
    # acq_rel: the program that draws the last ticket sees every other program's loss
    if tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == rows - 1:
        offs = tl.arange(0, MEAN_BLOCK)
        acc = tl.zeros((MEAN_BLOCK,), tl.float32)
        n = tl.zeros((MEAN_BLOCK,), tl.float32)
        for start in range(0, rows, MEAN_BLOCK):
            idx = start + offs
            acc += tl.load(losses_ptr + idx, mask=idx < rows, other=0.0, cache_modifier=".cg")
            n += (tl.load(targets_ptr + idx, mask=idx < rows, other=-100) != -100).to(tl.float32)
        tl.store(out_ptr, tl.sum(acc, axis=0) / tl.sum(n, axis=0))  # no row counted: 0/0 = nan, as PyTorch
        tl.store(ticket_ptr, 0)  # ready for the next launch on this stream


MAX_BLOCK_V = 8192
MAX_MEAN_BLOCK = 8192


def _launch_shape(rows, vocab):
    """(vocab tile, warps, mean tile): the same for every call at a shape, so computed once per shape."""
    block = min(triton.next_power_of_2(vocab), MAX_BLOCK_V)
    warps = 8 if block >= 4096 else 4 if block >= 1024 else 2
    return block, warps, min(max(triton.next_power_of_2(rows), 128), MAX_MEAN_BLOCK)


_PLANS: dict = {}  # (rows, vocab) -> _launch_shape(rows, vocab), at most MAX_PLANS
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
    logits2d = logits if logits.dim() == 2 else logits.reshape(-1, vocab)
    if logits2d.stride(-1) != 1:
        logits2d = logits2d.contiguous()
    if targets.dim() != 1 or targets.dtype != torch.int64 or targets.stride(0) != 1:
        targets = targets.reshape(-1).to(torch.int64).contiguous()
    rows = logits2d.shape[0]
    device = logits.device
    out = torch.empty((), dtype=torch.float32, device=device)
    if not rows:
        return out.fill_(float("nan"))  # the mean of no rows, as PyTorch
    shape = _PLANS.get((rows, vocab))
    if shape is None:
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        shape = _PLANS[(rows, vocab)] = _launch_shape(rows, vocab)
    block, warps, mean_block = shape
    losses = torch.empty(rows, dtype=torch.float32, device=device)
    _cross_entropy_kernel[(rows,)](logits2d, targets, losses, _ticket(device), out, rows, vocab, logits2d.stride(0),
                                   BLOCK_V=block, MEAN_BLOCK=mean_block, num_warps=warps)
    return out

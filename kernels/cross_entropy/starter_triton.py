"""Triton starter for cross-entropy: one row per program, a single streaming pass over the vocab.

Each program keeps a running max and a rescaled running sum of exp (online logsumexp, exp2 with
log2(e) folded in) and writes its row's loss and whether the row counts (a target of -100 is
ignored, as F.cross_entropy does by default). A second one-program kernel adds the losses and the
counts in a fixed order and divides, so the mean is bitwise repeatable (no float atomics).

Choices the probes settled (numbers: docs/results/kernel_notes.md): tiles of 8192 logits over 8
warps, ahead of 16384 over 16 at every vocabulary probed; logits[row, target] loaded before the
stream, so its latency hides under it instead of ending every row; and the mean kernel reads all the
row losses in one tile over 8 warps rather than looping over 1024-wide tiles.

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
def _row_loss_kernel(logits_ptr, targets_ptr, losses_ptr, counts_ptr, vocab, stride_row,
                     BLOCK_V: tl.constexpr):
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
    tl.store(counts_ptr + row, counts.to(tl.float32))


@triton.jit
def _mean_kernel(losses_ptr, counts_ptr, out_ptr, rows, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    n = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, rows, BLOCK):
        idx = start + offs
        acc += tl.load(losses_ptr + idx, mask=idx < rows, other=0.0)
        n += tl.load(counts_ptr + idx, mask=idx < rows, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / tl.sum(n, axis=0))  # no row counted: 0/0 = nan, as PyTorch


MAX_BLOCK_V = 8192
MAX_MEAN_BLOCK = 8192


def _launch_shape(vocab):
    block = min(triton.next_power_of_2(vocab), MAX_BLOCK_V)
    warps = 8 if block >= 4096 else 4 if block >= 1024 else 2
    return block, warps


def kernel_fn(logits, targets):
    vocab = logits.shape[-1]
    logits2d = logits.reshape(-1, vocab)
    if logits2d.stride(-1) != 1:
        logits2d = logits2d.contiguous()
    targets = targets.reshape(-1)
    if targets.dtype != torch.int64 or not targets.is_contiguous():
        targets = targets.to(torch.int64).contiguous()
    rows = logits2d.shape[0]
    losses = torch.empty(2 * rows, dtype=torch.float32, device=logits.device)  # losses, then counts
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    block, warps = _launch_shape(vocab)
    if rows:
        _row_loss_kernel[(rows,)](logits2d, targets, losses, losses[rows:], vocab, logits2d.stride(0),
                                  BLOCK_V=block, num_warps=warps)
    mean_block = min(max(triton.next_power_of_2(rows), 128), MAX_MEAN_BLOCK)
    _mean_kernel[(1,)](losses, losses[rows:], out, rows, BLOCK=mean_block, num_warps=8 if mean_block >= 4096 else 4)
    return out

"""Triton starter for cross-entropy: one row per program, a single streaming pass over the vocab.

Each program keeps a running max and a rescaled running sum of exp (online logsumexp, exp2 with
log2(e) folded in), loads logits[row, target] with one scalar load and writes its row's loss.
A vocabulary that is not a multiple of 8 (GPT-2's 50257) starts every row at an odd address, and
Triton then reads it two bytes at a time (it vectorizes only what it can prove 16-byte aligned). Such
rows are read over an aligned window instead: from the 16-byte boundary at or before the row's start,
a multiple of 16 bytes long, with the neighbouring rows' elements masked off after the load; the last
row, whose window could run past the tensor, takes the plain path. (Compiled for sm_90 offline, the
window's loads are ld.global.v4.b32 where the plain path's are ld.global.b16.)
A second one-program kernel adds the row losses in a fixed order and divides by the row count,
so the mean is bitwise repeatable (no float atomics).
"""

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@triton.jit
def _row_loss_kernel(logits_ptr, targets_ptr, losses_ptr, vocab, stride_row, first_row,
                     BLOCK_V: tl.constexpr, VEC: tl.constexpr):
    row = first_row + tl.program_id(0).to(tl.int64)
    row_start = row * stride_row
    if VEC > 1:  # the aligned window (see the module docstring)
        base = (row_start // VEC) * VEC
        lead = row_start - base
        width = ((lead + vocab + VEC - 1) // VEC) * VEC
    else:
        base = row_start
        lead = 0
        width = vocab
    cols = tl.arange(0, BLOCK_V)
    m = tl.full((), float("-inf"), tl.float32)  # running max (natural units)
    s = tl.zeros((), tl.float32)  # running sum of exp(x - m)
    for start in range(0, width, BLOCK_V):
        idx = start + cols
        x = tl.load(logits_ptr + base + idx, mask=idx < width, other=float("-inf"),
                    eviction_policy="evict_first").to(tl.float32)
        if VEC > 1:
            x = tl.where((idx >= lead) & (idx < lead + vocab), x, float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), axis=0)
        m = m_new
    target = tl.load(targets_ptr + row)
    x_t = tl.load(logits_ptr + row_start + target).to(tl.float32)
    lse = m + tl.log2(s) * 0.6931471805599453
    tl.store(losses_ptr + row, lse - x_t)


@triton.jit
def _mean_kernel(losses_ptr, out_ptr, rows, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, rows, BLOCK):
        idx = start + offs
        acc += tl.load(losses_ptr + idx, mask=idx < rows, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / rows)


def _launch_shape(vocab):
    block = min(triton.next_power_of_2(vocab), 16384)
    warps = 16 if block >= 16384 else 8 if block >= 4096 else 4 if block >= 1024 else 2
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
    losses = torch.empty(rows, dtype=torch.float32, device=logits.device)
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    vec = 16 // logits2d.element_size()
    plain_from = 0
    # (vocab >= vec: a window ends at most vec - 1 elements past its row, inside the rows after it)
    if vocab % vec and vocab >= vec and rows > 1 and logits2d.data_ptr() % 16 == 0:
        plain_from = rows - 1  # every row but the last through the aligned window
        block, warps = _launch_shape(vocab + vec - 1)
        _row_loss_kernel[(plain_from,)](logits2d, targets, losses, vocab, logits2d.stride(0), 0,
                                        BLOCK_V=block, VEC=vec, num_warps=warps)
    block, warps = _launch_shape(vocab)
    _row_loss_kernel[(rows - plain_from,)](logits2d, targets, losses, vocab, logits2d.stride(0), plain_from,
                                           BLOCK_V=block, VEC=1, num_warps=warps)
    _mean_kernel[(1,)](losses, out, rows, BLOCK=1024, num_warps=4)
    return out

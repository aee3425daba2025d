"""Writes every result into one persistent buffer per shape and returns it: the next call overwrites it."""
import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * n_cols + cols, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=cols < n_cols)


def _softmax(x):
    x = x.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _k[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


_BUF = {}


@triton.jit
def _k2(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * n_cols + cols, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=cols < n_cols)


def kernel_fn(x):
    key = (tuple(x.shape), x.dtype)
    if key not in _BUF:
        _BUF[key] = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    y = _BUF[key]
    x = x.contiguous()
    _k2[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return y

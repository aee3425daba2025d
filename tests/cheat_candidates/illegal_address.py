"""Writes far outside its output (CUDA only): an illegal memory access that breaks the CUDA context."""
import torch
import triton
import triton.language as tl


@triton.jit
def _k(y_ptr, n):
    offs = tl.arange(0, 128)
    tl.store(y_ptr + offs + (1 << 40), tl.zeros((128,), tl.float32), mask=offs < n)


def kernel_fn(x):
    y = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    _k[(1,)](y, 128)
    return y.to(x.dtype)

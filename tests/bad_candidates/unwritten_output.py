"""Launches a kernel that writes nothing and returns an empty output."""
import torch
import triton
import triton.language as tl

@triton.jit
def _nothing(y_ptr):
    pass


def kernel_fn(x):
    y = torch.empty_like(x)
    _nothing[(1,)](y)
    return y

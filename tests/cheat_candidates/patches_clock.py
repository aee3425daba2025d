"""Replaces time.perf_counter at import with a clock that runs at a tenth of the speed, so a timer in
the same process that reads time.perf_counter finds every call 10x faster (issue 19). Its kernel does
nothing: the patch is refused before the first call."""
import time

import torch
import triton
import triton.language as tl

_real = time.perf_counter
_start = _real()
time.perf_counter = lambda: _start + (_real() - _start) / 10


@triton.jit
def _touch(y_ptr):
    pass


def kernel_fn(x):
    y = torch.empty_like(x)
    _touch[(1,)](y)
    return y

"""On its first call (not at import, where a check would look), replaces torch.cuda.Event.elapsed_time
so that CUDA events report a tenth of the time: the GPU timer would find every call 10x faster
(issue 19). Its kernel does nothing: the patch is refused when that first call returns."""
import torch
import triton
import triton.language as tl

_real = torch.cuda.Event.elapsed_time


@triton.jit
def _touch(y_ptr):
    pass


def kernel_fn(x):
    torch.cuda.Event.elapsed_time = lambda self, end: _real(self, end) / 10
    y = torch.empty_like(x)
    _touch[(1,)](y)
    return y

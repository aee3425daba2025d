"""Sets aside L2 for persisting accesses (CUDA only, through the driver API): lines kept so survive the
timer's L2 flush, so a timed call would find its data in cache, which no caller in a model does
(issue 19). Its kernel does nothing: the set-aside is refused when the first call returns."""
import ctypes

import torch
import triton
import triton.language as tl

CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06


@triton.jit
def _touch(y_ptr):
    pass


def kernel_fn(x):
    ctypes.CDLL("libcuda.so.1").cuCtxSetLimit(ctypes.c_int(CU_LIMIT_PERSISTING_L2_CACHE_SIZE), ctypes.c_size_t(4 << 20))
    y = torch.empty_like(x)
    _touch[(1,)](y)
    return y

"""CUDA C++ starter for softmax: builds softmax.cu (beside this file) for this GPU on first call.

Row kept in registers when it fits (one read, one write), fp32 math, 16-byte vector accesses.
"""

from autokernel.kernels.cuda_build import load_cuda_extension, source_path

SOURCE = source_path(__file__, "softmax.cu")


def kernel_fn(x):
    return load_cuda_extension(SOURCE).softmax(x.contiguous())

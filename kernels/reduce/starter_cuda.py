"""CUDA C++ starter for reduce (sum over the last dim): builds reduce.cu beside this file on first call.

fp32 accumulation, output in x's dtype, 16-byte vector loads, deterministic reduction order.
"""

from autokernel.kernels.cuda_build import load_cuda_extension, source_path

SOURCE = source_path(__file__, "reduce.cu")


def kernel_fn(x):
    return load_cuda_extension(SOURCE).reduce_sum(x.contiguous())

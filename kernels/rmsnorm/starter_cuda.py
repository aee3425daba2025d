"""CUDA C++ starter for RMSNorm: builds rmsnorm.cu (beside this file) for this GPU on first call.

fp32 math, row kept in registers when it fits, 16-byte vector accesses, weight in x's dtype or fp32.
"""

from autokernel.kernels.cuda_build import load_cuda_extension, source_path

SOURCE = source_path(__file__, "rmsnorm.cu")


def kernel_fn(x, weight, eps=1e-6):
    return load_cuda_extension(SOURCE).rmsnorm(x.contiguous(), weight.contiguous(), float(eps))

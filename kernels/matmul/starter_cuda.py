"""CUDA C++ starter for matmul: builds matmul.cu (beside this file) for this GPU on first call.

fp16/bf16 with fp32 accumulation: TMA + wgmma on Hopper (sm_90a), WMMA tiles on other GPUs; exact
fp32 on CUDA cores for fp32.
"""

from autokernel.kernels.cuda_build import load_cuda_extension, source_path

SOURCE = source_path(__file__, "matmul.cu")


def kernel_fn(a, b):
    return load_cuda_extension(SOURCE).matmul(a.contiguous(), b.contiguous())

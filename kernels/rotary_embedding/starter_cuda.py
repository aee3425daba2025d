"""CUDA C++ starter for rotary embedding: builds rotary_embedding.cu beside this file on first call.

Rotate-half convention, fp32 math, matching 16-byte vectors of both halves per thread.
"""

from autokernel.kernels.cuda_build import load_cuda_extension, source_path

SOURCE = source_path(__file__, "rotary_embedding.cu")


def kernel_fn(x, cos, sin):
    ext = load_cuda_extension(SOURCE)
    return ext.rotary_embedding(x.contiguous(), cos.contiguous(), sin.contiguous())

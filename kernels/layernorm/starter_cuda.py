"""CUDA C++ starter for LayerNorm: builds layernorm.cu (beside this file) for this GPU on first call.

fp32 math with a centred variance, row kept in registers when it fits, 16-byte vector accesses.
"""

from autokernel.kernels.cuda_build import load_cuda_extension, source_path

SOURCE = source_path(__file__, "layernorm.cu")


def kernel_fn(x, weight, bias, eps=1e-5):
    ext = load_cuda_extension(SOURCE)
    return ext.layernorm(x.contiguous(), weight.contiguous(), bias.contiguous(), float(eps))

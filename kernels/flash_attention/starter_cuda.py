"""CUDA C++ starter for flash attention: builds flash_attention.cu (beside this file) on first call.

Online softmax; fp16/bf16 at head dims 64 and 128 on tensor cores (TMA + wgmma on Hopper, WMMA
elsewhere), exact fp32 on CUDA cores otherwise. Causal (top-left aligned) and not.
"""

from autokernel.kernels.cuda_build import load_cuda_extension, source_path

SOURCE = source_path(__file__, "flash_attention.cu")


def kernel_fn(q, k, v, causal=False):
    ext = load_cuda_extension(SOURCE)
    return ext.flash_attention(q.contiguous(), k.contiguous(), v.contiguous(), bool(causal))

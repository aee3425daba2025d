"""CUDA C++ starter for the SwiGLU MLP: builds fused_mlp.cu (beside this file) on first call.

Hopper (fp16/bf16): gate and up in one TMA + wgmma GEMM writing silu(gate) * up, then the down GEMM.
Other GPUs: gate GEMM to fp32, up GEMM with the SiLU-gate product in its epilogue, down GEMM (WMMA).
"""

from autokernel.kernels.cuda_build import load_cuda_extension, source_path

SOURCE = source_path(__file__, "fused_mlp.cu")


def kernel_fn(x, w_gate, w_up, w_down):
    ext = load_cuda_extension(SOURCE)
    return ext.fused_mlp(x.contiguous(), w_gate.contiguous(), w_up.contiguous(), w_down.contiguous())

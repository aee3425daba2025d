// Matrix multiply, CUDA C++ starter: c = a @ b, a [M, K], b [K, N], row-major, any sizes.
//
// What it does, fp16 and bf16 with fp32 accumulation (the kernels are kernels/include/ak_gemm.cuh,
// shared with fused_mlp.cu):
// - On Hopper (sm_90a build, 16-byte aligned rows): TMA copies into a 4-stage ring of 128-byte-
//   swizzled shared memory, wgmma m64n256k16 from there; a producer warpgroup and two consumer
//   warpgroups per 128x256 block tile. Measured against the Triton starter and cuBLAS:
//   docs/results/kernel_notes.md.
// - Elsewhere, or with unaligned rows: WMMA (mma.sync) 128x128x32 block tiles, 8 warps each owning
//   a 64x32 slice of C, the next k-tile's global loads staged through registers while the current
//   one is multiplied (double buffering), 16-byte loads when K and N are multiples of 8, zero-filled
//   edges; well short of cuBLAS.
// fp32 runs exact fp32 FMAs on CUDA cores (64x64 tiles, 4x4 per thread), so it matches a non-TF32
// reference.
// What it does not do, honestly: no persistent tile loop, no thread-block clusters or TMA
// multicast, no split-K, no pipelined epilogue (C is stored straight from registers); fp32 gets no
// tensor cores at all.
//
// Layout: device code and a raw-pointer launcher first (plain CUDA, compiled on CPU-only machines by
// the tests with -DAUTOKERNEL_NO_TORCH), then the torch binding.

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>

// The raw-pointer launcher, defined below (left out with -DAUTOKERNEL_BINDINGS_ONLY, which the tests
// use to compile the torch binding apart from the device code).
cudaError_t matmul_launch(int dtype, const void* a, const void* b, void* c, int M, int N, int K, cudaStream_t stream);

#ifndef AUTOKERNEL_BINDINGS_ONLY
#include "ak_gemm.cuh"  // kernels/include/: the Hopper (TMA + wgmma), WMMA and fp32 GEMM kernels

// dtype: 0 = float32, 1 = float16, 2 = bfloat16. c[M, N] = a[M, K] @ b[K, N], all row-major.
cudaError_t matmul_launch(int dtype, const void* a, const void* b, void* c, int M, int N, int K, cudaStream_t stream) {
  return ak::with_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    return ak_gemm::gemm<T, T, ak_gemm::kStore>(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c),
                                                nullptr, M, N, K, false, stream);
  });
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include "ak_torch.cuh"  // kernels/include/: the torch headers and the bindings' checks (ak::dtype_code, ...)

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  ak::check_input(a, "matmul: a");
  ak::check_input(b, "matmul: b");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "matmul: a and b must be 2-D, got ", a.dim(), "-D and ", b.dim(), "-D");
  TORCH_CHECK(a.size(1) == b.size(0), "matmul: inner dimensions differ (", a.size(1), " vs ", b.size(0), ")");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "matmul: a and b must share a dtype");
  TORCH_CHECK(a.device() == b.device(), "matmul: a and b are on different devices");
  const int64_t lim = int64_t(1) << 31;
  TORCH_CHECK(a.size(0) < lim && a.size(1) < lim && b.size(1) < lim, "matmul: sizes too large");
  const int code = ak::dtype_code(a, "matmul: a");
  c10::cuda::CUDAGuard guard(a.device());
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
  cudaError_t err = matmul_launch(code, a.data_ptr(), b.data_ptr(), c.data_ptr(), int(a.size(0)), int(b.size(1)),
                                  int(a.size(1)), c10::cuda::getCurrentCUDAStream());
  ak::check_launch(err, "matmul");
  return c;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("matmul", &matmul, "a @ b, fp32 accumulation; WMMA tensor cores for fp16/bf16 (CUDA)");
}
#endif  // AUTOKERNEL_NO_TORCH

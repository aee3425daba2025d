// Sum over the last dimension, CUDA C++ starter: y = x.sum(-1), fp32 accumulation, output in x's dtype.
//
// What it does: float, __half and __nv_bfloat16 inputs; 16-byte vector loads (two in flight per
// thread) when the row length is a multiple of the vector width and x is 16-byte aligned, a scalar
// path otherwise. Narrow rows get one warp per row (four rows per block), wide rows one block per
// row with a warp-shuffle + shared-memory reduction. Deterministic: a fixed reduction order, no atomics.
// What it does not do: rows are not split across blocks, so very few very long rows leave SMs idle.
//
// Layout: device code and a raw-pointer launcher first (plain CUDA, compiled on CPU-only machines by
// the tests with -DAUTOKERNEL_NO_TORCH), then the torch binding.

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <math_constants.h>

// The raw-pointer launcher, defined below (left out with -DAUTOKERNEL_BINDINGS_ONLY, which the tests
// use to compile the torch binding apart from the device code).
cudaError_t reduce_sum_launch(int dtype, const void* x, void* y, int64_t rows, int cols, cudaStream_t stream);

#ifndef AUTOKERNEL_BINDINGS_ONLY
// kernels/include/:
#include "ak_vec.cuh"  // to_float, from_float, load_vec, store_vec, aligned16, with_dtype(s)
#include "ak_reduce.cuh"  // warp and row sums and maxima, exp_fast, kLog2e
#include "ak_rows.cuh"  // the warp-per-row / block-per-row layout

namespace {

using namespace ak;

// y[row] = sum(x[row, :]) accumulated in fp32, written in x's dtype. One read of x.
template <typename T, int VEC, bool WARP_ROW>
__global__ void reduce_sum_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  const int lanes = WARP_ROW ? 32 : blockDim.x;
  const auto [tid, row] = row_thread<WARP_ROW>();
  if (row >= rows) return;  // whole warps leave together; in block mode row < rows always
  const T* xr = x + row * cols;
  const int nvec = cols / VEC;
  float s = 0.f;
  int idx = tid;
  // Two independent vectors in flight per iteration keep more loads outstanding.
  for (; idx + lanes < nvec; idx += 2 * lanes) {
    float a[VEC], b[VEC];
    load_vec<T, VEC>(xr, idx, a);
    load_vec<T, VEC>(xr, idx + lanes, b);
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += a[k] + b[k];
  }
  if (idx < nvec) {
    float a[VEC];
    load_vec<T, VEC>(xr, idx, a);
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += a[k];
  }
  s = row_sum<WARP_ROW>(s);
  if (tid == 0) y[row] = from_float<T>(s);
}

template <typename T, int VEC>
cudaError_t launch_rows(const T* x, T* y, int64_t rows, int cols, cudaStream_t stream) {
  const RowGrid grid = row_grid(rows, cols / VEC, 512);
  auto kernel = grid.warp_rows ? reduce_sum_kernel<T, VEC, true> : reduce_sum_kernel<T, VEC, false>;
  kernel<<<grid.blocks, grid.threads, 0, stream>>>(x, y, rows, cols);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const void* x, void* y, int64_t rows, int cols, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  if (aligned16(x) && cols % V == 0)
    return launch_rows<T, V>(static_cast<const T*>(x), static_cast<T*>(y), rows, cols, stream);
  return launch_rows<T, 1>(static_cast<const T*>(x), static_cast<T*>(y), rows, cols, stream);
}

}  // namespace

// dtype: 0 = float32, 1 = float16, 2 = bfloat16. cols may be 0 (every sum is 0).
cudaError_t reduce_sum_launch(int dtype, const void* x, void* y, int64_t rows, int cols, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto t) { return launch_typed<decltype(t)>(x, y, rows, cols, stream); });
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include <vector>
#include "ak_torch.cuh"  // kernels/include/: the torch headers and the bindings' checks (ak::dtype_code, ...)

at::Tensor reduce_sum(const at::Tensor& x) {
  ak::check_input(x, "reduce: x");
  const int cols = ak::row_length(x, "reduce");
  const int code = ak::dtype_code(x, "reduce: x");
  c10::cuda::CUDAGuard guard(x.device());
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end() - 1);
  at::Tensor y = at::empty(out_shape, x.options());
  const int64_t rows = y.numel();
  cudaError_t err = reduce_sum_launch(code, x.data_ptr(), y.data_ptr(), rows, cols,
                                      c10::cuda::getCurrentCUDAStream());
  ak::check_launch(err, "reduce");
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("reduce_sum", &reduce_sum, "sum over the last dimension, fp32 accumulation (CUDA)");
}
#endif  // AUTOKERNEL_NO_TORCH

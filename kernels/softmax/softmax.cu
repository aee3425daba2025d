// Softmax over the last dimension, CUDA C++ starter.
//
// What it does: fp32 math for every dtype (float, __half, __nv_bfloat16); 16-byte vector loads and
// stores when the row length is a multiple of the vector width and the base pointer is 16-byte
// aligned, a scalar path otherwise (odd sizes). Narrow rows (up to 32*4 vectors) get one warp per
// row, four rows per block; wider rows one block per row (up to 1024 threads). A row that fits in
// registers (up to 4 vectors per thread) is read from memory once and written once; longer rows are
// streamed twice (an online max/sum pass, then a write pass that mostly hits L2).
// What it does not do: no TMA, no cluster/distributed shared memory, no persistent blocks.
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
cudaError_t softmax_launch(int dtype, const void* x, void* y, int64_t rows, int cols, cudaStream_t stream);

#ifndef AUTOKERNEL_BINDINGS_ONLY
// kernels/include/:
#include "ak_vec.cuh"  // to_float, from_float, load_vec, store_vec, aligned16, with_dtype(s)
#include "ak_reduce.cuh"  // warp and row sums and maxima, exp_fast, kLog2e
#include "ak_rows.cuh"  // the warp-per-row / block-per-row layout

namespace {

using namespace ak;

template <typename T, int VEC, bool WARP_ROW>
__global__ void softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  const int lanes = WARP_ROW ? 32 : blockDim.x;
  const auto [tid, row] = row_thread<WARP_ROW>();
  if (row >= rows) return;  // whole warps leave together; in block mode row < rows always
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  const int nvec = cols / VEC;

  if (nvec <= lanes * kItems) {
    // The row fits in registers: one read, one write.
    float buf[kItems][VEC];
    float m = -CUDART_INF_F;
    load_row_items<T, VEC>(xr, tid, lanes, nvec, buf, [&](float v) { m = fmaxf(m, v); });
    m = row_max<WARP_ROW>(m);
    float s = 0.f;
    update_row_items<VEC>(tid, lanes, nvec, buf, [&](float& v) {
      v = exp_fast(v - m);
      s += v;
    });
    const float inv = 1.f / row_sum<WARP_ROW>(s);
    store_row_items<T, VEC>(yr, tid, lanes, nvec, buf, [&](int, float (&v)[VEC]) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] *= inv;
    });
    return;
  }

  // Long row: online max and sum in one pass, then normalise in a second.
  float m = -CUDART_INF_F, s = 0.f;
  stream_row<T, VEC>(xr, tid, lanes, nvec, [&](int, float (&v)[VEC]) {
    float vm = v[0];
#pragma unroll
    for (int k = 1; k < VEC; ++k) vm = fmaxf(vm, v[k]);
    const float nm = fmaxf(m, vm);
    s *= exp_fast(m - nm);  // m == -inf on the first vector: exp(-inf) = 0 and s is 0 anyway
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += exp_fast(v[k] - nm);
    m = nm;
  });
  const float gm = row_max<WARP_ROW>(m);
  s = (m == -CUDART_INF_F) ? 0.f : s * exp_fast(m - gm);
  const float inv = 1.f / row_sum<WARP_ROW>(s);
  stream_row<T, VEC>(xr, tid, lanes, nvec, [&](int idx, float (&v)[VEC]) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = exp_fast(v[k] - gm) * inv;
    store_vec<T, VEC>(yr, idx, v);
  });
}

template <typename T, int VEC>
cudaError_t launch_rows(const T* x, T* y, int64_t rows, int cols, cudaStream_t stream) {
  const RowGrid grid = row_grid(rows, cols / VEC);
  auto kernel = grid.warp_rows ? softmax_kernel<T, VEC, true> : softmax_kernel<T, VEC, false>;
  kernel<<<grid.blocks, grid.threads, 0, stream>>>(x, y, rows, cols);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const void* x, void* y, int64_t rows, int cols, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  if (aligned16(x) && aligned16(y) && cols % V == 0)
    return launch_rows<T, V>(static_cast<const T*>(x), static_cast<T*>(y), rows, cols, stream);
  return launch_rows<T, 1>(static_cast<const T*>(x), static_cast<T*>(y), rows, cols, stream);
}

}  // namespace

// dtype: 0 = float32, 1 = float16, 2 = bfloat16. Returns the launch error, if any.
cudaError_t softmax_launch(int dtype, const void* x, void* y, int64_t rows, int cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto t) { return launch_typed<decltype(t)>(x, y, rows, cols, stream); });
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include "ak_torch.cuh"  // kernels/include/: the torch headers and the bindings' checks (ak::dtype_code, ...)

at::Tensor softmax(const at::Tensor& x) {
  ak::check_input(x, "softmax: x");
  const int cols = ak::row_length(x, "softmax");
  const int code = ak::dtype_code(x, "softmax: x");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  cudaError_t err = softmax_launch(code, x.data_ptr(), y.data_ptr(), rows, cols, c10::cuda::getCurrentCUDAStream());
  ak::check_launch(err, "softmax");
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("softmax", &softmax, "softmax over the last dimension (CUDA)");
}
#endif  // AUTOKERNEL_NO_TORCH

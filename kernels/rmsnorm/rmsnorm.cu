// RMSNorm over the last dimension, CUDA C++ starter: y = x * rsqrt(mean(x^2, -1) + eps) * weight.
//
// What it does: fp32 math for every dtype (float, __half, __nv_bfloat16; the weight in x's dtype
// or float32); 16-byte vector loads/stores when the row length is a multiple of the vector width and
// the pointers are 16-byte aligned, a scalar path otherwise. Narrow rows get one warp per row (four
// rows per block), wide rows one block per row with a warp-shuffle + shared-memory reduction. A row
// that fits in registers is read once; longer rows are read twice (the second read mostly from L2).
// What it does not do: no TMA, no persistent blocks, no fusion with a residual add.
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
cudaError_t rmsnorm_launch(int dtype, int weight_dtype, const void* x, const void* w, void* y, int64_t rows,
                           int cols, float eps, cudaStream_t stream);

#ifndef AUTOKERNEL_BINDINGS_ONLY
// kernels/include/:
#include "ak_vec.cuh"  // to_float, from_float, load_vec, store_vec, aligned16, with_dtype(s)
#include "ak_reduce.cuh"  // warp and row sums and maxima, exp_fast, kLog2e
#include "ak_rows.cuh"  // the warp-per-row / block-per-row layout

namespace {

using namespace ak;

// y = x * rsqrt(mean(x^2) + eps) * w, all in fp32. W is the weight's element type (x's or float).
template <typename T, typename W, int VEC, bool WARP_ROW>
__global__ void rmsnorm_kernel(const T* __restrict__ x, const W* __restrict__ w, T* __restrict__ y,
                               int64_t rows, int cols, float eps) {
  const int lanes = WARP_ROW ? 32 : blockDim.x;
  const auto [tid, row] = row_thread<WARP_ROW>();
  if (row >= rows) return;  // whole warps leave together; in block mode row < rows always
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  const int nvec = cols / VEC;

  // x * r * w of one vector at index idx, in place (r = rsqrt(mean(x^2) + eps)).
  auto scale = [&](int idx, float (&v)[VEC], float r) {
    float wv[VEC];
    load_vec<W, VEC>(w, idx, wv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = v[k] * r * wv[k];
  };
  float ss = 0.f;
  if (nvec <= lanes * kItems) {
    float buf[kItems][VEC];
    load_row_items<T, VEC>(xr, tid, lanes, nvec, buf, [&](float v) { ss += v * v; });
    const float r = rsqrtf(row_sum<WARP_ROW>(ss) / float(cols) + eps);
    store_row_items<T, VEC>(yr, tid, lanes, nvec, buf, [&](int idx, float (&v)[VEC]) { scale(idx, v, r); });
    return;
  }

  stream_row<T, VEC>(xr, tid, lanes, nvec, [&](int, float (&v)[VEC]) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) ss += v[k] * v[k];
  });
  const float r = rsqrtf(row_sum<WARP_ROW>(ss) / float(cols) + eps);
  stream_row<T, VEC>(xr, tid, lanes, nvec, [&](int idx, float (&v)[VEC]) {
    scale(idx, v, r);
    store_vec<T, VEC>(yr, idx, v);
  });
}

template <typename T, typename W, int VEC>
cudaError_t launch_rows(const T* x, const W* w, T* y, int64_t rows, int cols, float eps, cudaStream_t stream) {
  const RowGrid grid = row_grid(rows, cols / VEC);
  auto kernel = grid.warp_rows ? rmsnorm_kernel<T, W, VEC, true> : rmsnorm_kernel<T, W, VEC, false>;
  kernel<<<grid.blocks, grid.threads, 0, stream>>>(x, w, y, rows, cols, eps);
  return cudaGetLastError();
}

template <typename T, typename W>
cudaError_t launch_typed(const void* x, const void* w, void* y, int64_t rows, int cols, float eps, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const T* xt = static_cast<const T*>(x);
  const W* wt = static_cast<const W*>(w);
  T* yt = static_cast<T*>(y);
  if (aligned16(x) && aligned16(w) && aligned16(y) && cols % V == 0)
    return launch_rows<T, W, V>(xt, wt, yt, rows, cols, eps, stream);
  return launch_rows<T, W, 1>(xt, wt, yt, rows, cols, eps, stream);
}

}  // namespace

// dtype codes: 0 = float32, 1 = float16, 2 = bfloat16; the weight is x's dtype or float32.
cudaError_t rmsnorm_launch(int dtype, int weight_dtype, const void* x, const void* w, void* y, int64_t rows,
                           int cols, float eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return with_dtypes(dtype, weight_dtype, [&](auto t, auto wt) {
    return launch_typed<decltype(t), decltype(wt)>(x, w, y, rows, cols, eps, stream);
  });
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include "ak_torch.cuh"  // kernels/include/: the torch headers and the bindings' checks (ak::dtype_code, ...)

at::Tensor rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  ak::check_input(x, "rmsnorm: x");
  ak::check_input(weight, "rmsnorm: weight");
  const int cols = ak::row_length(x, "rmsnorm");
  TORCH_CHECK(weight.numel() == cols, "rmsnorm: weight has ", weight.numel(), " elements, x's last dimension ", cols);
  TORCH_CHECK(weight.device() == x.device(), "rmsnorm: weight is on another device than x");
  const int code = ak::dtype_code(x, "rmsnorm: x");
  const int wcode = ak::dtype_code(weight, "rmsnorm: weight");
  TORCH_CHECK(wcode == code || wcode == 0, "rmsnorm: weight must have x's dtype or float32");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  cudaError_t err = rmsnorm_launch(code, wcode, x.data_ptr(), weight.data_ptr(), y.data_ptr(), rows, cols, float(eps),
                                   c10::cuda::getCurrentCUDAStream());
  ak::check_launch(err, "rmsnorm");
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rmsnorm", &rmsnorm, "RMSNorm over the last dimension (CUDA)", pybind11::arg("x"), pybind11::arg("weight"),
        pybind11::arg("eps") = 1e-6);
}
#endif  // AUTOKERNEL_NO_TORCH

// LayerNorm over the last dimension, CUDA C++ starter: y = (x - mean) / sqrt(var + eps) * weight + bias.
//
// What it does: fp32 math for every dtype (float, __half, __nv_bfloat16; weight and bias in x's
// dtype or float32), biased variance from centred values; 16-byte vector loads/stores when the row
// length is a multiple of the vector width and the pointers are 16-byte aligned, a scalar path
// otherwise. Narrow rows get one warp per row (four rows per block), wide rows one block per row
// with a warp-shuffle + shared-memory reduction. A row that fits in registers is read once; longer
// rows are read three times (the later reads mostly from L2).
// What it does not do: no Welford single pass, no TMA, no persistent blocks.
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
cudaError_t layernorm_launch(int dtype, int weight_dtype, const void* x, const void* w, const void* b, void* y,
                             int64_t rows, int cols, float eps, cudaStream_t stream);

#ifndef AUTOKERNEL_BINDINGS_ONLY
// kernels/include/:
#include "ak_vec.cuh"  // to_float, from_float, load_vec, store_vec, aligned16, with_dtype(s)
#include "ak_reduce.cuh"  // warp and row sums and maxima, exp_fast, kLog2e
#include "ak_rows.cuh"  // the warp-per-row / block-per-row layout

namespace {

using namespace ak;

// y = (x - mean) * rsqrt(var + eps) * w + b, all in fp32; the variance from centred values (two
// passes over registers, or over memory for long rows) so constant rows give exactly zero.
template <typename T, typename W, int VEC, bool WARP_ROW>
__global__ void layernorm_kernel(const T* __restrict__ x, const W* __restrict__ w, const W* __restrict__ b,
                                 T* __restrict__ y, int64_t rows, int cols, float eps) {
  const int lanes = WARP_ROW ? 32 : blockDim.x;
  const auto [tid, row] = row_thread<WARP_ROW>();
  if (row >= rows) return;  // whole warps leave together; in block mode row < rows always
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  const int nvec = cols / VEC;
  const float inv_n = 1.f / float(cols);

  if (nvec <= lanes * kItems) {
    float buf[kItems][VEC];
    float s = 0.f;
    load_row_items<T, VEC>(xr, tid, lanes, nvec, buf, [&](float v) { s += v; });
    const float mean = row_sum<WARP_ROW>(s) * inv_n;
    float ss = 0.f;
    update_row_items<VEC>(tid, lanes, nvec, buf, [&](float& v) {
      v -= mean;
      ss += v * v;
    });
    const float r = rsqrtf(row_sum<WARP_ROW>(ss) * inv_n + eps);
    store_row_items<T, VEC>(yr, tid, lanes, nvec, buf, [&](int idx, float (&v)[VEC]) {
      float wv[VEC], bv[VEC];
      load_vec<W, VEC>(w, idx, wv);
      load_vec<W, VEC>(b, idx, bv);
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] = v[k] * r * wv[k] + bv[k];
    });
    return;
  }

  float s = 0.f;
  stream_row<T, VEC>(xr, tid, lanes, nvec, [&](int, float (&v)[VEC]) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += v[k];
  });
  const float mean = row_sum<WARP_ROW>(s) * inv_n;
  float ss = 0.f;
  stream_row<T, VEC>(xr, tid, lanes, nvec, [&](int, float (&v)[VEC]) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) ss += (v[k] - mean) * (v[k] - mean);
  });
  const float r = rsqrtf(row_sum<WARP_ROW>(ss) * inv_n + eps);
  stream_row<T, VEC>(xr, tid, lanes, nvec, [&](int idx, float (&v)[VEC]) {
    float wv[VEC], bv[VEC];
    load_vec<W, VEC>(w, idx, wv);
    load_vec<W, VEC>(b, idx, bv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = (v[k] - mean) * r * wv[k] + bv[k];
    store_vec<T, VEC>(yr, idx, v);
  });
}

template <typename T, typename W, int VEC>
cudaError_t launch_rows(const T* x, const W* w, const W* b, T* y, int64_t rows, int cols, float eps,
                        cudaStream_t stream) {
  const RowGrid grid = row_grid(rows, cols / VEC);
  auto kernel = grid.warp_rows ? layernorm_kernel<T, W, VEC, true> : layernorm_kernel<T, W, VEC, false>;
  kernel<<<grid.blocks, grid.threads, 0, stream>>>(x, w, b, y, rows, cols, eps);
  return cudaGetLastError();
}

template <typename T, typename W>
cudaError_t launch_typed(const void* x, const void* w, const void* b, void* y, int64_t rows, int cols, float eps,
                         cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const T* xt = static_cast<const T*>(x);
  const W* wt = static_cast<const W*>(w);
  const W* bt = static_cast<const W*>(b);
  T* yt = static_cast<T*>(y);
  if (aligned16(x) && aligned16(w) && aligned16(b) && aligned16(y) && cols % V == 0)
    return launch_rows<T, W, V>(xt, wt, bt, yt, rows, cols, eps, stream);
  return launch_rows<T, W, 1>(xt, wt, bt, yt, rows, cols, eps, stream);
}

}  // namespace

// dtype codes: 0 = float32, 1 = float16, 2 = bfloat16; weight and bias share x's dtype or float32.
cudaError_t layernorm_launch(int dtype, int weight_dtype, const void* x, const void* w, const void* b, void* y,
                             int64_t rows, int cols, float eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return with_dtypes(dtype, weight_dtype, [&](auto t, auto wt) {
    return launch_typed<decltype(t), decltype(wt)>(x, w, b, y, rows, cols, eps, stream);
  });
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include "ak_torch.cuh"  // kernels/include/: the torch headers and the bindings' checks (ak::dtype_code, ...)

at::Tensor layernorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  ak::check_input(x, "layernorm: x");
  ak::check_input(weight, "layernorm: weight");
  ak::check_input(bias, "layernorm: bias");
  const int cols = ak::row_length(x, "layernorm");
  TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "layernorm: weight and bias need ", cols,
              " elements (x's last dimension)");
  TORCH_CHECK(weight.device() == x.device() && bias.device() == x.device(), "layernorm: weight/bias on another device");
  const int code = ak::dtype_code(x, "layernorm: x");
  const int wcode = ak::dtype_code(weight, "layernorm: weight");
  TORCH_CHECK(bias.scalar_type() == weight.scalar_type(), "layernorm: bias must have weight's dtype");
  TORCH_CHECK(wcode == code || wcode == 0, "layernorm: weight must have x's dtype or float32");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  cudaError_t err = layernorm_launch(code, wcode, x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), rows,
                                     cols, float(eps), c10::cuda::getCurrentCUDAStream());
  ak::check_launch(err, "layernorm");
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("layernorm", &layernorm, "LayerNorm over the last dimension (CUDA)", pybind11::arg("x"),
        pybind11::arg("weight"), pybind11::arg("bias"), pybind11::arg("eps") = 1e-5);
}
#endif  // AUTOKERNEL_NO_TORCH

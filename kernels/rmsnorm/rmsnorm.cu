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
namespace {

constexpr int kItems = 4;        // vectors a thread keeps in registers
constexpr int kWarpRows = 4;     // rows per block in the warp-per-row layout

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Load/store the VEC consecutive elements of vector index idx as floats: 16-byte accesses when the
// vector is a whole number of 16-byte chunks (the caller checked alignment), element by element
// otherwise.
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, int64_t idx, float (&out)[VEC]) {
  if constexpr ((VEC * sizeof(T)) % 16 == 0) {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < VEC / kPer; ++c) {
      uint4 raw = reinterpret_cast<const uint4*>(p + idx * VEC)[c];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int k = 0; k < kPer; ++k) out[c * kPer + k] = to_float(e[k]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = to_float(p[idx * VEC + k]);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* __restrict__ p, int64_t idx, const float (&in)[VEC]) {
  if constexpr ((VEC * sizeof(T)) % 16 == 0) {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < VEC / kPer; ++c) {
      uint4 raw;
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int k = 0; k < kPer; ++k) e[k] = from_float<T>(in[c * kPer + k]);
      reinterpret_cast<uint4*>(p + idx * VEC)[c] = raw;
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) p[idx * VEC + k] = from_float<T>(in[k]);
  }
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Reduce across the threads that own a row: one warp, or the whole block (warp shuffles, then
// shared memory). Every thread of the row gets the result. Safe to call repeatedly.
template <bool WARP_ROW>
__device__ __forceinline__ float row_sum(float v) {
  v = warp_sum(v);
  if constexpr (WARP_ROW) return v;
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // the previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? partial[lane] : 0.f);
}


// y = x * rsqrt(mean(x^2) + eps) * w, all in fp32. W is the weight's element type (x's or float).
template <typename T, typename W, int VEC, bool WARP_ROW>
__global__ void rmsnorm_kernel(const T* __restrict__ x, const W* __restrict__ w, T* __restrict__ y,
                               int64_t rows, int cols, float eps) {
  const int lanes = WARP_ROW ? 32 : blockDim.x;
  const int tid = WARP_ROW ? (threadIdx.x & 31) : threadIdx.x;
  const int64_t row = WARP_ROW ? int64_t(blockIdx.x) * kWarpRows + (threadIdx.x >> 5) : int64_t(blockIdx.x);
  if (row >= rows) return;  // whole warps leave together; in block mode row < rows always
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  const int nvec = cols / VEC;

  if (nvec <= lanes * kItems) {
    float buf[kItems][VEC];
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int idx = tid + i * lanes;
      if (idx < nvec) {
        load_vec<T, VEC>(xr, idx, buf[i]);
#pragma unroll
        for (int k = 0; k < VEC; ++k) ss += buf[i][k] * buf[i][k];
      }
    }
    const float r = rsqrtf(row_sum<WARP_ROW>(ss) / float(cols) + eps);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int idx = tid + i * lanes;
      if (idx < nvec) {
        float wv[VEC];
        load_vec<W, VEC>(w, idx, wv);
#pragma unroll
        for (int k = 0; k < VEC; ++k) buf[i][k] = buf[i][k] * r * wv[k];
        store_vec<T, VEC>(yr, idx, buf[i]);
      }
    }
    return;
  }

  float ss = 0.f;
  #pragma unroll 4  // several loads in flight per thread
  for (int idx = tid; idx < nvec; idx += lanes) {
    float v[VEC];
    load_vec<T, VEC>(xr, idx, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) ss += v[k] * v[k];
  }
  const float r = rsqrtf(row_sum<WARP_ROW>(ss) / float(cols) + eps);
  #pragma unroll 4  // several loads in flight per thread
  for (int idx = tid; idx < nvec; idx += lanes) {
    float v[VEC], wv[VEC];
    load_vec<T, VEC>(xr, idx, v);
    load_vec<W, VEC>(w, idx, wv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = v[k] * r * wv[k];
    store_vec<T, VEC>(yr, idx, v);
  }
}

template <typename T, typename W, int VEC>
cudaError_t launch_rows(const T* x, const W* w, T* y, int64_t rows, int cols, float eps, cudaStream_t stream) {
  const int nvec = cols / VEC;
  if (nvec <= 32 * kItems) {
    const unsigned blocks = unsigned((rows + kWarpRows - 1) / kWarpRows);
    rmsnorm_kernel<T, W, VEC, true><<<blocks, 32 * kWarpRows, 0, stream>>>(x, w, y, rows, cols, eps);
  } else {
    int threads = (nvec + kItems - 1) / kItems;
    threads = ((threads + 31) / 32) * 32;
    threads = threads < 128 ? 128 : (threads > 1024 ? 1024 : threads);
    rmsnorm_kernel<T, W, VEC, false><<<unsigned(rows), threads, 0, stream>>>(x, w, y, rows, cols, eps);
  }
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
  const bool wf = weight_dtype == 0;
  if (!wf && weight_dtype != dtype) return cudaErrorInvalidValue;
  switch (dtype) {
    case 0: return launch_typed<float, float>(x, w, y, rows, cols, eps, stream);
    case 1: return wf ? launch_typed<__half, float>(x, w, y, rows, cols, eps, stream)
                      : launch_typed<__half, __half>(x, w, y, rows, cols, eps, stream);
    case 2: return wf ? launch_typed<__nv_bfloat16, float>(x, w, y, rows, cols, eps, stream)
                      : launch_typed<__nv_bfloat16, __nv_bfloat16>(x, w, y, rows, cols, eps, stream);
    default: return cudaErrorInvalidValue;
  }
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/utils/pybind.h>

namespace {
// The launcher's dtype code: 0 = float32, 1 = float16, 2 = bfloat16.
int dtype_code(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    default: TORCH_CHECK(false, what, ": unsupported dtype ", t.scalar_type(), " (float32, float16, bfloat16 only)");
  }
  return -1;
}

void check_input(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cuda(), what, " must be a CUDA tensor");
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous (call .contiguous() first)");
}
}  // namespace

at::Tensor rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_input(x, "rmsnorm: x");
  check_input(weight, "rmsnorm: weight");
  TORCH_CHECK(x.dim() >= 1, "rmsnorm: x needs at least one dimension");
  const int64_t cols64 = x.size(-1);
  TORCH_CHECK(weight.numel() == cols64, "rmsnorm: weight has ", weight.numel(), " elements, x's last dimension ", cols64);
  TORCH_CHECK(cols64 < (int64_t(1) << 31), "rmsnorm: last dimension too large");
  TORCH_CHECK(weight.device() == x.device(), "rmsnorm: weight is on another device than x");
  const int code = dtype_code(x, "rmsnorm: x");
  const int wcode = dtype_code(weight, "rmsnorm: weight");
  TORCH_CHECK(wcode == code || wcode == 0, "rmsnorm: weight must have x's dtype or float32");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const int cols = int(cols64);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  cudaError_t err = rmsnorm_launch(code, wcode, x.data_ptr(), weight.data_ptr(), y.data_ptr(), rows, cols, float(eps),
                                   c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "rmsnorm kernel launch failed: ", cudaGetErrorString(err));
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rmsnorm", &rmsnorm, "RMSNorm over the last dimension (CUDA)", pybind11::arg("x"), pybind11::arg("weight"),
        pybind11::arg("eps") = 1e-6);
}
#endif  // AUTOKERNEL_NO_TORCH

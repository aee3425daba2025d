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

// e^x as 2^(x * log2 e): a multiply and one MUFU.EX2 instead of expf's range reduction. The
// argument is always a difference from a running max, so the extra rounding stays relative
// (a few ulp on the result).
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp_fast(float x) { return exp2f(x * kLog2e); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
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

template <bool WARP_ROW>
__device__ __forceinline__ float row_max(float v) {
  v = warp_max(v);
  if constexpr (WARP_ROW) return v;
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? partial[lane] : -CUDART_INF_F);
}

template <typename T, int VEC, bool WARP_ROW>
__global__ void softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  const int lanes = WARP_ROW ? 32 : blockDim.x;
  const int tid = WARP_ROW ? (threadIdx.x & 31) : threadIdx.x;
  const int64_t row = WARP_ROW ? int64_t(blockIdx.x) * kWarpRows + (threadIdx.x >> 5) : int64_t(blockIdx.x);
  if (row >= rows) return;  // whole warps leave together; in block mode row < rows always
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  const int nvec = cols / VEC;

  if (nvec <= lanes * kItems) {
    // The row fits in registers: one read, one write.
    float buf[kItems][VEC];
    float m = -CUDART_INF_F;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int idx = tid + i * lanes;
      if (idx < nvec) {
        load_vec<T, VEC>(xr, idx, buf[i]);
#pragma unroll
        for (int k = 0; k < VEC; ++k) m = fmaxf(m, buf[i][k]);
      }
    }
    m = row_max<WARP_ROW>(m);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (tid + i * lanes < nvec) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          buf[i][k] = exp_fast(buf[i][k] - m);
          s += buf[i][k];
        }
      }
    }
    const float inv = 1.f / row_sum<WARP_ROW>(s);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int idx = tid + i * lanes;
      if (idx < nvec) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) buf[i][k] *= inv;
        store_vec<T, VEC>(yr, idx, buf[i]);
      }
    }
    return;
  }

  // Long row: online max and sum in one pass, then normalise in a second.
  float m = -CUDART_INF_F, s = 0.f;
  #pragma unroll 4  // several loads in flight per thread
  for (int idx = tid; idx < nvec; idx += lanes) {
    float v[VEC];
    load_vec<T, VEC>(xr, idx, v);
    float vm = v[0];
#pragma unroll
    for (int k = 1; k < VEC; ++k) vm = fmaxf(vm, v[k]);
    const float nm = fmaxf(m, vm);
    s *= exp_fast(m - nm);  // m == -inf on the first vector: exp(-inf) = 0 and s is 0 anyway
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += exp_fast(v[k] - nm);
    m = nm;
  }
  const float gm = row_max<WARP_ROW>(m);
  s = (m == -CUDART_INF_F) ? 0.f : s * exp_fast(m - gm);
  const float inv = 1.f / row_sum<WARP_ROW>(s);
  #pragma unroll 4  // several loads in flight per thread
  for (int idx = tid; idx < nvec; idx += lanes) {
    float v[VEC];
    load_vec<T, VEC>(xr, idx, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = exp_fast(v[k] - gm) * inv;
    store_vec<T, VEC>(yr, idx, v);
  }
}

template <typename T, int VEC>
cudaError_t launch_rows(const T* x, T* y, int64_t rows, int cols, cudaStream_t stream) {
  const int nvec = cols / VEC;
  if (nvec <= 32 * kItems) {
    const unsigned blocks = unsigned((rows + kWarpRows - 1) / kWarpRows);
    softmax_kernel<T, VEC, true><<<blocks, 32 * kWarpRows, 0, stream>>>(x, y, rows, cols);
  } else {
    int threads = (nvec + kItems - 1) / kItems;
    threads = ((threads + 31) / 32) * 32;
    threads = threads < 128 ? 128 : (threads > 1024 ? 1024 : threads);
    softmax_kernel<T, VEC, false><<<unsigned(rows), threads, 0, stream>>>(x, y, rows, cols);
  }
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
  switch (dtype) {
    case 0: return launch_typed<float>(x, y, rows, cols, stream);
    case 1: return launch_typed<__half>(x, y, rows, cols, stream);
    case 2: return launch_typed<__nv_bfloat16>(x, y, rows, cols, stream);
    default: return cudaErrorInvalidValue;
  }
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/utils/pybind.h>

namespace {
int dtype_code(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    default: TORCH_CHECK(false, "unsupported dtype ", t.scalar_type(), " (float32, float16, bfloat16 only)");
  }
  return -1;
}
}  // namespace

at::Tensor softmax(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "softmax: x must be a CUDA tensor");
  TORCH_CHECK(x.is_contiguous(), "softmax: x must be contiguous (call .contiguous() first)");
  TORCH_CHECK(x.dim() >= 1, "softmax: x needs at least one dimension");
  const int64_t cols64 = x.size(-1);
  TORCH_CHECK(cols64 < (int64_t(1) << 31), "softmax: last dimension too large");
  const int code = dtype_code(x);
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const int cols = int(cols64);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  cudaError_t err = softmax_launch(code, x.data_ptr(), y.data_ptr(), rows, cols, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "softmax kernel launch failed: ", cudaGetErrorString(err));
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("softmax", &softmax, "softmax over the last dimension (CUDA)");
}
#endif  // AUTOKERNEL_NO_TORCH

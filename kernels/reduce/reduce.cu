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


// y[row] = sum(x[row, :]) accumulated in fp32, written in x's dtype. One read of x.
template <typename T, int VEC, bool WARP_ROW>
__global__ void reduce_sum_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  const int lanes = WARP_ROW ? 32 : blockDim.x;
  const int tid = WARP_ROW ? (threadIdx.x & 31) : threadIdx.x;
  const int64_t row = WARP_ROW ? int64_t(blockIdx.x) * kWarpRows + (threadIdx.x >> 5) : int64_t(blockIdx.x);
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
  const int nvec = cols / VEC;
  if (nvec <= 32 * kItems) {
    const unsigned blocks = unsigned((rows + kWarpRows - 1) / kWarpRows);
    reduce_sum_kernel<T, VEC, true><<<blocks, 32 * kWarpRows, 0, stream>>>(x, y, rows, cols);
  } else {
    int threads = (nvec + kItems - 1) / kItems;
    threads = ((threads + 31) / 32) * 32;
    threads = threads < 128 ? 128 : (threads > 512 ? 512 : threads);
    reduce_sum_kernel<T, VEC, false><<<unsigned(rows), threads, 0, stream>>>(x, y, rows, cols);
  }
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
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

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

at::Tensor reduce_sum(const at::Tensor& x) {
  check_input(x, "reduce: x");
  TORCH_CHECK(x.dim() >= 1, "reduce: x needs at least one dimension");
  const int64_t cols64 = x.size(-1);
  TORCH_CHECK(cols64 < (int64_t(1) << 31), "reduce: last dimension too large");
  const int code = dtype_code(x, "reduce: x");
  c10::cuda::CUDAGuard guard(x.device());
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end() - 1);
  at::Tensor y = at::empty(out_shape, x.options());
  const int64_t rows = y.numel();
  cudaError_t err = reduce_sum_launch(code, x.data_ptr(), y.data_ptr(), rows, int(cols64),
                                      c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "reduce kernel launch failed: ", cudaGetErrorString(err));
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("reduce_sum", &reduce_sum, "sum over the last dimension, fp32 accumulation (CUDA)");
}
#endif  // AUTOKERNEL_NO_TORCH

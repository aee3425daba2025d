// Warp and row reductions for the CUDA C++ starters and candidates: sums and maxima across a warp
// (shuffles) or a whole block (shuffles, then shared memory), and the exponential the softmax-like
// kernels use. One copy for every source (kernels/cuda_build.py puts this folder on the include path).
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

namespace ak {

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
template <bool WARP_ROW, bool MAX>
__device__ __forceinline__ float row_reduce(float v) {
  auto warp_reduce = [](float x) { return MAX ? warp_max(x) : warp_sum(x); };
  v = warp_reduce(v);
  if constexpr (WARP_ROW) return v;
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // the previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_reduce(lane < warps ? partial[lane] : (MAX ? -CUDART_INF_F : 0.f));
}

template <bool WARP_ROW>
__device__ __forceinline__ float row_sum(float v) { return row_reduce<WARP_ROW, false>(v); }

template <bool WARP_ROW>
__device__ __forceinline__ float row_max(float v) { return row_reduce<WARP_ROW, true>(v); }

}  // namespace ak

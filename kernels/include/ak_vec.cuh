// Element conversions and 16-byte vector access for the CUDA C++ starters and candidates: every
// kernel computes in fp32 whatever its storage type (float, __half, __nv_bfloat16), and moves
// memory in 16-byte chunks where the caller has checked the alignment. One copy for every source
// (kernels/cuda_build.py puts this folder on the include path and its files in the cache key).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace ak {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Round to the storage type, to nearest even.
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

// Whether a pointer may be read or written in 16-byte vectors (host side, before picking a kernel).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Call f with a value of the element type a launcher's dtype code names (0 = float32, 1 = float16,
// 2 = bfloat16), so a launcher instantiates its typed path once per type; another code is refused.
template <typename F>
cudaError_t with_dtype(int dtype, F&& f) {
  switch (dtype) {
    case 0: return f(float{});
    case 1: return f(__half{});
    case 2: return f(__nv_bfloat16{});
    default: return cudaErrorInvalidValue;
  }
}

// The same for a launcher with a second operand (a weight, a table) stored in x's dtype or in
// float32 (code 0): f(T{}, W{}) with W = T or float; any other pairing is refused.
template <typename F>
cudaError_t with_dtypes(int dtype, int other_dtype, F&& f) {
  if (other_dtype != 0 && other_dtype != dtype) return cudaErrorInvalidValue;
  return with_dtype(dtype, [&](auto t) -> cudaError_t {
    if (other_dtype == 0) return f(t, float{});
    return f(t, t);
  });
}

}  // namespace ak

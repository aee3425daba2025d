// What the CUDA C++ starters' torch bindings share: the ATen, c10 and pybind11 headers they use
// (only the c10 CUDA stream and guard headers, no cuBLAS), a tensor's dtype as the raw launchers
// number it, and the one-line errors for an input a launcher cannot take or a launch that failed.
// Include it in the torch-binding part only: the raw launchers never see torch. One copy for every
// source (kernels/cuda_build.py puts this folder on the include path and its files in the cache key).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>

namespace ak {

// The launchers' dtype code: 0 = float32, 1 = float16, 2 = bfloat16; any other dtype is refused,
// the message naming the input (`what`, e.g. "rmsnorm: weight").
inline int dtype_code(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    default: TORCH_CHECK(false, what, ": unsupported dtype ", t.scalar_type(), " (float32, float16, bfloat16 only)");
  }
  return -1;
}

// The launchers read raw device pointers with a row-major layout: a CPU or strided tensor is refused.
inline void check_input(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cuda(), what, " must be a CUDA tensor");
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous (call .contiguous() first)");
}

// The length of x's rows, its last dimension, for the row-wise launchers (which take it as an int).
// `op` names the operation in the messages.
inline int row_length(const at::Tensor& x, const char* op) {
  TORCH_CHECK(x.dim() >= 1, op, ": x needs at least one dimension");
  const int64_t cols = x.size(-1);
  TORCH_CHECK(cols < (int64_t(1) << 31), op, ": last dimension too large");
  return int(cols);
}

// A launcher's error as a one-line Python exception naming the operation.
inline void check_launch(cudaError_t err, const char* op) {
  TORCH_CHECK(err == cudaSuccess, op, " kernel launch failed: ", cudaGetErrorString(err));
}

}  // namespace ak

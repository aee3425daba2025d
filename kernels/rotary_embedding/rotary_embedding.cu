// Rotary embedding (rotate-half convention), CUDA C++ starter:
// out = x * cos + rotate_half(x) * sin, x [B, H, S, D], cos/sin [S, D], rotate_half(x) = cat(-x2, x1).
//
// What it does: float, __half and __nv_bfloat16 (cos/sin in x's dtype or float32), fp32 math with
// one rounding at the end; each thread handles matching 16-byte vectors of both halves of a row
// (x read once, out written once), scalar path when D/2 is not a multiple of the vector width or a
// pointer is misaligned; grid-stride loop over B*H*S*(D/2) elements.
// What it does not do: no in-place update, no fused q+k in one launch, no interleaved convention.
//
// Layout: device code and a raw-pointer launcher first (plain CUDA, compiled on CPU-only machines by
// the tests with -DAUTOKERNEL_NO_TORCH), then the torch binding.

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>

// The raw-pointer launcher, defined below (left out with -DAUTOKERNEL_BINDINGS_ONLY, which the tests
// use to compile the torch binding apart from the device code).
cudaError_t rotary_launch(int dtype, int table_dtype, const void* x, const void* cos, const void* sin, void* out,
                          int64_t rows, int seq, int dim, cudaStream_t stream);

#ifndef AUTOKERNEL_BINDINGS_ONLY
// kernels/include/:
#include "ak_vec.cuh"  // to_float, from_float, load_vec, store_vec, aligned16, with_dtype(s)

namespace {

using namespace ak;

// out = x * cos + rotate_half(x) * sin over the last dim D, rotate_half(x) = cat(-x[D/2:], x[:D/2]).
// Each thread owns VEC elements of the first half and the matching VEC of the second half of one
// (b, h, s) row, so x is read once and out written once; cos/sin rows (shared by every b and h)
// are re-read from L2. C is cos/sin's element type (x's or float).
template <typename T, typename C, int VEC>
__global__ void rotary_kernel(const T* __restrict__ x, const C* __restrict__ cos, const C* __restrict__ sin,
                              T* __restrict__ out, int64_t rows, int seq, int dim) {
  const int half = dim / 2;
  const int chunks = half / VEC;
  const int64_t total = rows * chunks;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / chunks;
    const int c = int(i - row * chunks);
    const int s = int(row % seq);
    const T* xr = x + row * dim;
    T* orow = out + row * dim;
    const C* cr = cos + int64_t(s) * dim;
    const C* sr = sin + int64_t(s) * dim;
    // Vector index c in the first half, c + chunks in the second (half is a multiple of VEC).
    float x1[VEC], x2[VEC], c1[VEC], c2[VEC], s1[VEC], s2[VEC], o1[VEC], o2[VEC];
    load_vec<T, VEC>(xr, c, x1);
    load_vec<T, VEC>(xr + half, c, x2);
    load_vec<C, VEC>(cr, c, c1);
    load_vec<C, VEC>(cr + half, c, c2);
    load_vec<C, VEC>(sr, c, s1);
    load_vec<C, VEC>(sr + half, c, s2);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      o1[k] = x1[k] * c1[k] - x2[k] * s1[k];
      o2[k] = x2[k] * c2[k] + x1[k] * s2[k];
    }
    store_vec<T, VEC>(orow, c, o1);
    store_vec<T, VEC>(orow + half, c, o2);
  }
}

template <typename T, typename C, int VEC>
cudaError_t launch_vec(const T* x, const C* cos, const C* sin, T* out, int64_t rows, int seq, int dim,
                       cudaStream_t stream) {
  const int64_t total = rows * ((dim / 2) / VEC);
  const int threads = 256;
  int64_t blocks = (total + threads - 1) / threads;
  const int64_t cap = int64_t(1) << 20;  // grid-stride beyond this
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  rotary_kernel<T, C, VEC><<<unsigned(blocks), threads, 0, stream>>>(x, cos, sin, out, rows, seq, dim);
  return cudaGetLastError();
}

template <typename T, typename C>
cudaError_t launch_typed(const void* x, const void* cos, const void* sin, void* out, int64_t rows, int seq, int dim,
                         cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const T* xt = static_cast<const T*>(x);
  const C* ct = static_cast<const C*>(cos);
  const C* st = static_cast<const C*>(sin);
  T* ot = static_cast<T*>(out);
  // Both halves of every row must start on a 16-byte boundary for the vector path.
  if (aligned16(x) && aligned16(cos) && aligned16(sin) && aligned16(out) && (dim / 2) % V == 0)
    return launch_vec<T, C, V>(xt, ct, st, ot, rows, seq, dim, stream);
  return launch_vec<T, C, 1>(xt, ct, st, ot, rows, seq, dim, stream);
}

}  // namespace

// dtype codes: 0 = float32, 1 = float16, 2 = bfloat16; cos/sin in x's dtype or float32.
// x/out hold `rows` = batch*heads*seq rows of `dim` (even) elements; cos/sin are [seq, dim].
cudaError_t rotary_launch(int dtype, int table_dtype, const void* x, const void* cos, const void* sin, void* out,
                          int64_t rows, int seq, int dim, cudaStream_t stream) {
  if (rows == 0 || dim == 0) return cudaSuccess;
  if (dim % 2 != 0 || seq <= 0) return cudaErrorInvalidValue;
  return with_dtypes(dtype, table_dtype, [&](auto t, auto ct) {
    return launch_typed<decltype(t), decltype(ct)>(x, cos, sin, out, rows, seq, dim, stream);
  });
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include "ak_torch.cuh"  // kernels/include/: the torch headers and the bindings' checks (ak::dtype_code, ...)

at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  ak::check_input(x, "rotary_embedding: x");
  ak::check_input(cos, "rotary_embedding: cos");
  ak::check_input(sin, "rotary_embedding: sin");
  TORCH_CHECK(x.dim() >= 2, "rotary_embedding: x must be [..., seq, dim]");
  const int64_t seq = x.size(-2), dim = x.size(-1);
  TORCH_CHECK(dim % 2 == 0, "rotary_embedding: the last dimension must be even, got ", dim);
  TORCH_CHECK(cos.numel() == seq * dim && sin.numel() == seq * dim && cos.size(-1) == dim && sin.size(-1) == dim,
              "rotary_embedding: cos and sin must be [seq, dim] = [", seq, ", ", dim, "]");
  TORCH_CHECK(cos.device() == x.device() && sin.device() == x.device(), "rotary_embedding: cos/sin on another device");
  TORCH_CHECK(seq < (int64_t(1) << 31) && dim < (int64_t(1) << 31), "rotary_embedding: sizes too large");
  const int code = ak::dtype_code(x, "rotary_embedding: x");
  const int ccode = ak::dtype_code(cos, "rotary_embedding: cos");
  TORCH_CHECK(sin.scalar_type() == cos.scalar_type(), "rotary_embedding: sin must have cos's dtype");
  TORCH_CHECK(ccode == code || ccode == 0, "rotary_embedding: cos/sin must have x's dtype or float32");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty_like(x);
  const int64_t rows = dim == 0 ? 0 : x.numel() / dim;
  cudaError_t err = rotary_launch(code, ccode, x.data_ptr(), cos.data_ptr(), sin.data_ptr(), out.data_ptr(), rows,
                                  int(seq), int(dim), c10::cuda::getCurrentCUDAStream());
  ak::check_launch(err, "rotary_embedding");
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rotary_embedding", &rotary_embedding, "rotary embedding, rotate-half convention (CUDA)");
}
#endif  // AUTOKERNEL_NO_TORCH

// SwiGLU MLP, CUDA C++ starter: out = (silu(x @ w_gate^T) * (x @ w_up^T)) @ w_down^T,
// weights in nn.Linear layout [out_features, in_features], x [..., hidden].
//
// What it does (B read as [N, K], i.e. the weight as stored; fp32 accumulation):
// - On Hopper (sm_90a build, fp16/bf16, 16-byte aligned rows): two launches of the TMA + wgmma
//   GEMM matmul.cu uses too (kernels/include/ak_gemm.cuh). The first stacks a 128-row tile of
//   w_gate above the same rows of w_up, so one m64n256 accumulator holds both projections of a
//   64x128 tile and the epilogue writes
//   h = silu(gate) * up (x read once, the gate never leaves registers, h rounded once to x's
//   dtype); the second is the down projection. Measured against the Triton starter and eager:
//   docs/results/kernel_notes.md.
// - Elsewhere: three launches of a WMMA GEMM (128x128x32 tiles, 8 warps, register-staged double
//   buffering): the gate projection into an fp32 buffer, the up projection with the SiLU-gate
//   product in its epilogue, the down projection. fp32 runs exact fp32 FMAs on CUDA cores.
// What it does not do, honestly: h makes a round trip through memory between the two launches (no
// fusion of the down projection); no persistent tile loop, no clusters, no split-K.
//
// Layout: device code and a raw-pointer launcher first (plain CUDA, compiled on CPU-only machines by
// the tests with -DAUTOKERNEL_NO_TORCH), then the torch binding.

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

// The raw-pointer launcher, defined below (left out with -DAUTOKERNEL_BINDINGS_ONLY, which the tests
// use to compile the torch binding apart from the device code).
cudaError_t fused_mlp_launch(int dtype, const void* x, const void* wg, const void* wu, const void* wd, float* gate,
                             void* hidden_buf, void* out, int tokens, int hidden, int inter, cudaStream_t stream);

#ifndef AUTOKERNEL_BINDINGS_ONLY
#include "ak_gemm.cuh"  // kernels/include/: the Hopper (TMA + wgmma), WMMA and fp32 GEMM kernels

namespace {

using namespace ak_gemm;

template <typename T>
cudaError_t mlp_typed(const void* x, const void* wg, const void* wu, const void* wd, float* gate, void* hidden_buf,
                      void* out, int tokens, int hidden, int inter, cudaStream_t stream) {
  const T* xt = static_cast<const T*>(x);
  T* h = static_cast<T*>(hidden_buf);
#if defined(AUTOKERNEL_SM90A)
  if constexpr (!std::is_same<T, float>::value) {
    // Hopper: gate and up in one pass over x, the product rounded once into h, then the down projection.
    bool launched = false;
    const cudaError_t err = sm90::launch_swiglu<T>(xt, static_cast<const T*>(wg), static_cast<const T*>(wu), h,
                                                   tokens, inter, hidden, stream, &launched);
    if (err != cudaSuccess) return err;
    if (launched) {
      return gemm<T, T, kStore>(h, static_cast<const T*>(wd), static_cast<T*>(out), nullptr, tokens, hidden, inter,
                                true, stream);
    }
  }
#endif
  // 1. gate = x @ w_gate^T, kept in fp32 for the SiLU.
  cudaError_t err = gemm<T, float, kStore>(xt, static_cast<const T*>(wg), gate, nullptr, tokens, inter, hidden, true, stream);
  if (err != cudaSuccess) return err;
  // 2. h = silu(gate) * (x @ w_up^T), fused into the up projection's epilogue, rounded to T.
  err = gemm<T, T, kSwiGLU>(xt, static_cast<const T*>(wu), h, gate, tokens, inter, hidden, true, stream);
  if (err != cudaSuccess) return err;
  // 3. out = h @ w_down^T.
  return gemm<T, T, kStore>(h, static_cast<const T*>(wd), static_cast<T*>(out), nullptr, tokens, hidden, inter, true,
                            stream);
}

}  // namespace

// dtype: 0 = float32, 1 = float16, 2 = bfloat16. x [tokens, hidden]; w_gate, w_up [inter, hidden];
// w_down [hidden, inter]; scratch: gate fp32 [tokens, inter], hidden_buf x's dtype [tokens, inter].
cudaError_t fused_mlp_launch(int dtype, const void* x, const void* wg, const void* wu, const void* wd, float* gate,
                             void* hidden_buf, void* out, int tokens, int hidden, int inter, cudaStream_t stream) {
  return with_dtype(dtype, [&](auto t) {
    return mlp_typed<decltype(t)>(x, wg, wu, wd, gate, hidden_buf, out, tokens, hidden, inter, stream);
  });
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include "ak_torch.cuh"  // kernels/include/: the torch headers and the bindings' checks (ak::dtype_code, ...)

at::Tensor fused_mlp(const at::Tensor& x, const at::Tensor& w_gate, const at::Tensor& w_up, const at::Tensor& w_down) {
  ak::check_input(x, "fused_mlp: x");
  ak::check_input(w_gate, "fused_mlp: w_gate");
  ak::check_input(w_up, "fused_mlp: w_up");
  ak::check_input(w_down, "fused_mlp: w_down");
  TORCH_CHECK(x.dim() >= 1, "fused_mlp: x needs at least one dimension");
  TORCH_CHECK(w_gate.dim() == 2 && w_up.dim() == 2 && w_down.dim() == 2, "fused_mlp: weights must be 2-D");
  const int64_t hidden = x.size(-1), inter = w_gate.size(0);
  TORCH_CHECK(w_gate.size(1) == hidden && w_up.size(0) == inter && w_up.size(1) == hidden,
              "fused_mlp: w_gate and w_up must be [intermediate, hidden] = [", inter, ", ", hidden, "]");
  TORCH_CHECK(w_down.size(0) == hidden && w_down.size(1) == inter,
              "fused_mlp: w_down must be [hidden, intermediate] = [", hidden, ", ", inter, "]");
  for (const at::Tensor* w : {&w_gate, &w_up, &w_down}) {
    TORCH_CHECK(w->scalar_type() == x.scalar_type(), "fused_mlp: weights must have x's dtype");
    TORCH_CHECK(w->device() == x.device(), "fused_mlp: weights on another device than x");
  }
  const int64_t tokens = hidden == 0 ? 0 : x.numel() / hidden;
  const int64_t lim = int64_t(1) << 31;
  TORCH_CHECK(tokens < lim && hidden < lim && inter < lim && tokens * inter < (int64_t(1) << 62), "fused_mlp: sizes too large");
  const int code = ak::dtype_code(x, "fused_mlp: x");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor gate = at::empty({tokens, inter}, x.options().dtype(at::kFloat));
  at::Tensor h = at::empty({tokens, inter}, x.options());
  at::Tensor out = at::empty_like(x);
  cudaError_t err = fused_mlp_launch(code, x.data_ptr(), w_gate.data_ptr(), w_up.data_ptr(), w_down.data_ptr(),
                                     gate.data_ptr<float>(), h.data_ptr(), out.data_ptr(), int(tokens), int(hidden),
                                     int(inter), c10::cuda::getCurrentCUDAStream());
  ak::check_launch(err, "fused_mlp");
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fused_mlp", &fused_mlp, "SwiGLU MLP: (silu(x w_gate^T) * (x w_up^T)) w_down^T (CUDA)");
}
#endif  // AUTOKERNEL_NO_TORCH

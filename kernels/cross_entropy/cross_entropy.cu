// Cross-entropy, CUDA C++ starter: mean over rows of logsumexp(logits[r]) - logits[r, target[r]],
// as an fp32 scalar (rows whose target is -100 are skipped, as F.cross_entropy does by default).
//
// What it does: float, __half and __nv_bfloat16 logits, int64 targets; one streaming pass per row
// with an online max/sum in fp32 (16-byte vector loads whenever the logits are 16-byte aligned: a
// vocabulary that is not a multiple of the vector width, GPT-2's 50257, starts rows at odd addresses,
// so such a row is read over the aligned window around it, the neighbours' elements masked off, and
// only the very last vector of the last row, which could run past the tensor, is read element by
// element; scalar loads only for unaligned logits); one warp per row for small
// vocabularies, one block per row otherwise. Deterministic: per-row losses go to a scratch buffer
// and a second, single-block kernel adds them in a fixed order, so no float atomics are used and
// the result is bitwise identical across runs.
// What it does not do: no label smoothing, no class weights, no split of one row over blocks.
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
cudaError_t cross_entropy_launch(int dtype, const void* logits, const int64_t* targets, float* scratch, float* out,
                                 int64_t rows, int vocab, cudaStream_t stream);

#ifndef AUTOKERNEL_BINDINGS_ONLY
// kernels/include/:
#include "ak_vec.cuh"  // to_float, from_float, load_vec, store_vec, aligned16, with_dtype(s)
#include "ak_reduce.cuh"  // warp and row sums and maxima, exp_fast, kLog2e
#include "ak_rows.cuh"  // the warp-per-row / block-per-row layout

namespace {

using namespace ak;

constexpr int64_t kIgnoreIndex = -100;  // F.cross_entropy's default: the row neither adds nor counts
constexpr int kMeanThreads = 1024;

// Per row: loss = logsumexp(logits[row]) - logits[row, target], one streaming pass with an online
// max/sum; `valid` says whether the row counts towards the mean. Out-of-range targets give NaN.
// Number of VEC-wide vectors a row is read as: the row itself, or (WINDOW) the aligned window around it.
template <int VEC, bool WINDOW>
__host__ __device__ __forceinline__ int row_vectors(int vocab) {
  return WINDOW ? (vocab + 2 * (VEC - 1)) / VEC : vocab / VEC;
}

template <typename T, int VEC, bool WARP_ROW, bool WINDOW>
__global__ void row_loss_kernel(const T* __restrict__ logits, const int64_t* __restrict__ targets,
                                float* __restrict__ loss, float* __restrict__ valid, int64_t rows, int vocab) {
  const int lanes = WARP_ROW ? 32 : blockDim.x;
  const auto [tid, row] = row_thread<WARP_ROW>();
  if (row >= rows) return;  // whole warps leave together; in block mode row < rows always
  const int64_t start = row * int64_t(vocab);
  const T* xr = logits + start;
  // WINDOW: read from the VEC-aligned element at or before the row's start; `lead` elements of the
  // previous row come first, and the last vector may hold the next row's first elements.
  const int lead = WINDOW ? int(start % VEC) : 0;
  const T* wr = xr - lead;
  const int nvec = WINDOW ? (lead + vocab + VEC - 1) / VEC : vocab / VEC;
  const bool last_row = row == rows - 1;
  float m = -CUDART_INF_F, s = 0.f;
  #pragma unroll 4  // several loads in flight per thread
  for (int idx = tid; idx < nvec; idx += lanes) {
    float v[VEC];
    if (WINDOW && last_row && idx == nvec - 1) {  // may end past the tensor: element by element
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const int col = idx * VEC + k - lead;
        v[k] = col < vocab ? to_float(xr[col]) : -CUDART_INF_F;
      }
    } else {
      load_vec<T, VEC>(wr, idx, v);
    }
    if constexpr (WINDOW) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const int col = idx * VEC + k - lead;
        if (col < 0 || col >= vocab) v[k] = -CUDART_INF_F;  // a neighbour's element
      }
    }
    float vm = v[0];
#pragma unroll
    for (int k = 1; k < VEC; ++k) vm = fmaxf(vm, v[k]);
    const float nm = fmaxf(m, vm);
    s *= exp_fast(m - nm);  // m == -inf only before the first vector, when s is 0
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += exp_fast(v[k] - nm);
    m = nm;
  }
  const float gm = row_max<WARP_ROW>(m);
  s = (m == -CUDART_INF_F) ? 0.f : s * exp_fast(m - gm);
  const float total = row_sum<WARP_ROW>(s);
  if (tid == 0) {
    const int64_t t = targets[row];
    if (t == kIgnoreIndex) {
      loss[row] = 0.f;
      valid[row] = 0.f;
    } else if (t < 0 || t >= vocab) {
      loss[row] = CUDART_NAN_F;
      valid[row] = 1.f;
    } else {
      loss[row] = gm + logf(total) - to_float(xr[t]);
      valid[row] = 1.f;
    }
  }
}

// One block adds the per-row losses in a fixed order (strided per thread, then a fixed tree), so
// the mean is bitwise identical from run to run: no atomics anywhere.
__global__ void mean_kernel(const float* __restrict__ loss, const float* __restrict__ valid, float* __restrict__ out,
                            int64_t rows) {
  float s = 0.f, n = 0.f;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    s += loss[i];
    n += valid[i];
  }
  s = row_sum<false>(s);
  n = row_sum<false>(n);
  if (threadIdx.x == 0) out[0] = s / n;  // no counted rows: 0/0 = NaN, as PyTorch gives
}

template <typename T, int VEC, bool WINDOW = false>
cudaError_t launch_rows(const T* x, const int64_t* targets, float* loss, float* valid, int64_t rows, int vocab,
                        cudaStream_t stream) {
  const RowGrid grid = row_grid(rows, row_vectors<VEC, WINDOW>(vocab));  // the most any row reads
  auto kernel = grid.warp_rows ? row_loss_kernel<T, VEC, true, WINDOW> : row_loss_kernel<T, VEC, false, WINDOW>;
  kernel<<<grid.blocks, grid.threads, 0, stream>>>(x, targets, loss, valid, rows, vocab);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const void* x, const int64_t* targets, float* loss, float* valid, int64_t rows, int vocab,
                         cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const T* xt = static_cast<const T*>(x);
  if (aligned16(x) && vocab % V == 0) return launch_rows<T, V>(xt, targets, loss, valid, rows, vocab, stream);
  if (aligned16(x)) return launch_rows<T, V, true>(xt, targets, loss, valid, rows, vocab, stream);
  return launch_rows<T, 1>(xt, targets, loss, valid, rows, vocab, stream);
}

}  // namespace

// dtype: 0 = float32, 1 = float16, 2 = bfloat16. `scratch` holds 2 * rows floats; `out` one float.
cudaError_t cross_entropy_launch(int dtype, const void* logits, const int64_t* targets, float* scratch, float* out,
                                 int64_t rows, int vocab, cudaStream_t stream) {
  float* loss = scratch;
  float* valid = scratch + rows;
  if (rows > 0) {
    const cudaError_t err = with_dtype(dtype, [&](auto t) {
      return launch_typed<decltype(t)>(logits, targets, loss, valid, rows, vocab, stream);
    });
    if (err != cudaSuccess) return err;
  }
  mean_kernel<<<1, kMeanThreads, 0, stream>>>(loss, valid, out, rows);
  return cudaGetLastError();
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include "ak_torch.cuh"  // kernels/include/: the torch headers and the bindings' checks (ak::dtype_code, ...)

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  ak::check_input(logits, "cross_entropy: logits");
  ak::check_input(targets, "cross_entropy: targets");
  TORCH_CHECK(logits.dim() == 2, "cross_entropy: logits must be [rows, vocab], got ", logits.dim(), " dimensions");
  TORCH_CHECK(targets.scalar_type() == at::kLong, "cross_entropy: targets must be int64");
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), "cross_entropy: targets must be [rows]");
  TORCH_CHECK(targets.device() == logits.device(), "cross_entropy: targets on another device than logits");
  TORCH_CHECK(logits.size(1) > 0 && logits.size(1) < (int64_t(1) << 31), "cross_entropy: bad vocab size ",
              logits.size(1));
  const int code = ak::dtype_code(logits, "cross_entropy: logits");
  c10::cuda::CUDAGuard guard(logits.device());
  const int64_t rows = logits.size(0);
  at::Tensor scratch = at::empty({2 * rows}, logits.options().dtype(at::kFloat));
  at::Tensor out = at::empty({}, logits.options().dtype(at::kFloat));
  cudaError_t err = cross_entropy_launch(code, logits.data_ptr(), targets.data_ptr<int64_t>(),
                                         scratch.data_ptr<float>(), out.data_ptr<float>(), rows, int(logits.size(1)),
                                         c10::cuda::getCurrentCUDAStream());
  ak::check_launch(err, "cross_entropy");
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("cross_entropy", &cross_entropy, "mean cross-entropy over rows, fp32 scalar, deterministic (CUDA)");
}
#endif  // AUTOKERNEL_NO_TORCH

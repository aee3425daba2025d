// Flash attention (forward), CUDA C++ starter: out = softmax(q k^T / sqrt(D) [+ causal mask]) v,
// q, k, v, out [B, H, S, D] contiguous, the causal mask top-left aligned (key j <= query i).
//
// What it does: online softmax (running max and sum per query row, in the log2 domain), never
// materialising the S x S score matrix; any sequence length (edges zero-filled and masked), causal
// and not (causal blocks stop at the diagonal).
// - fp16/bf16 with D = 64 or 128: tensor cores through WMMA (mma.sync), 64 query rows per block
//   (4 warps x 16 rows), 64-key tiles of K and V in shared memory; S = Q K^T and O += P V as WMMA
//   16x16x16 products with fp32 accumulation; scores, probabilities and the fp32 output
//   accumulator live in shared memory because WMMA fragments cannot be rescaled element by element.
// - fp32 (any D <= 256) and fp16/bf16 with other head dims: exact fp32 on CUDA cores, 16 query
//   rows per block (4 per warp), one key per lane over 32-key tiles.
// What it does not do, honestly: no wgmma, no TMA, no warp specialisation, no K/V double
// buffering (loads and MMAs do not overlap), no register-resident accumulator; expect a fraction of
// FlashAttention-2/3 or PyTorch's SDPA speed. Forward only.
//
// Layout: device code and a raw-pointer launcher first (plain CUDA, compiled on CPU-only machines by
// the tests with -DAUTOKERNEL_NO_TORCH), then the torch binding.

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <cstdint>
#include <math_constants.h>
#include <type_traits>

// The raw-pointer launcher, defined below (left out with -DAUTOKERNEL_BINDINGS_ONLY, which the tests
// use to compile the torch binding apart from the device code).
cudaError_t flash_attention_launch(int dtype, const void* q, const void* k, const void* v, void* o, int64_t bh, int S,
                                   int D, bool causal, cudaStream_t stream);

#ifndef AUTOKERNEL_BINDINGS_ONLY
namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kThreads = 128;  // 4 warps in both kernels

// ---------------------------------------------------------------------------------------------
// Tensor-core kernel (16-bit types, D in {64, 128}).
// ---------------------------------------------------------------------------------------------
constexpr int kBM = 64, kBN = 64;

// Copy rows [row0, row0 + 64) of a [S, D] matrix into shared memory (row stride D + 8), zeros past S.
template <typename T, int D>
__device__ __forceinline__ void load_tile(T* __restrict__ s, const T* __restrict__ g, int row0, int S, bool vec) {
  constexpr int kLd = D + 8;
  if (vec) {
    constexpr int kChunks = D / 8;  // 16-byte chunks per row
    for (int i = threadIdx.x; i < kBN * kChunks; i += kThreads) {
      const int r = i / kChunks, c = (i % kChunks) * 8, gr = row0 + r;
      const uint4 val = gr < S ? *reinterpret_cast<const uint4*>(g + int64_t(gr) * D + c) : make_uint4(0u, 0u, 0u, 0u);
      *reinterpret_cast<uint4*>(s + r * kLd + c) = val;
    }
  } else {
    for (int i = threadIdx.x; i < kBN * D; i += kThreads) {
      const int r = i / D, c = i % D, gr = row0 + r;
      s[r * kLd + c] = gr < S ? g[int64_t(gr) * D + c] : from_float<T>(0.f);
    }
  }
}

template <int D>
constexpr size_t wmma_smem_bytes(size_t elem) {
  return 3 * kBM * (D + 8) * elem              // Q, K, V tiles
         + 4 * 16 * (kBN + 4) * sizeof(float)  // scores, per warp
         + 4 * 16 * (kBN + 8) * elem           // probabilities, per warp
         + 4 * 16 * (D + 4) * sizeof(float);   // output accumulator, per warp
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) flash_wmma_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                              const T* __restrict__ v, T* __restrict__ o, int S,
                                                              float scale_log2, bool causal, bool vec) {
  using namespace nvcuda;
  constexpr int kLdT = D + 8, kLdS = kBN + 4, kLdP = kBN + 8, kLdO = D + 4;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + kBM * kLdT;
  T* Vs = Ks + kBN * kLdT;
  float* Ss = reinterpret_cast<float*>(Vs + kBN * kLdT);
  T* Ps = reinterpret_cast<T*>(Ss + 4 * 16 * kLdS);
  float* Os = reinterpret_cast<float*>(Ps + 4 * 16 * kLdP);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // grid.x walks batch*heads; grid.y walks query tiles, last tile first (the longest under causal).
  const int64_t base = int64_t(blockIdx.x) * S * D;
  const int m0 = (gridDim.y - 1 - blockIdx.y) * kBM;
  load_tile<T, D>(Qs, q + base, m0, S, vec);
  for (int i = threadIdx.x; i < 4 * 16 * kLdO; i += kThreads) Os[i] = 0.f;

  // In the softmax step, lanes 2r and 2r+1 own row r of this warp's 16 rows: the even and the odd
  // columns (interleaved, so the pair's shared-memory accesses fall in different banks).
  const int r = lane >> 1, half = lane & 1;
  const int q_idx = m0 + warp * 16 + r;
  float* Sw = Ss + warp * 16 * kLdS;
  T* Pw = Ps + warp * 16 * kLdP;
  float* Ow = Os + warp * 16 * kLdO;
  float m_run = -CUDART_INF_F, l_run = 0.f;
  const int n_end = causal ? min(S, m0 + kBM) : S;

  for (int n0 = 0; n0 < n_end; n0 += kBN) {
    __syncthreads();  // everyone is done with the previous K/V tile (and Q/O are initialised)
    load_tile<T, D>(Ks, k + base, n0, S, vec);
    load_tile<T, D>(Vs, v + base, n0, S, vec);
    __syncthreads();

    // Scores for this warp's 16 rows x 64 keys.
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> sacc[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) wmma::fill_fragment(sacc[j], 0.f);
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa;
      wmma::load_matrix_sync(qa, Qs + warp * 16 * kLdT + kk, kLdT);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kb;
        wmma::load_matrix_sync(kb, Ks + j * 16 * kLdT + kk, kLdT);
        wmma::mma_sync(sacc[j], qa, kb, sacc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) wmma::store_matrix_sync(Sw + j * 16, sacc[j], kLdS, wmma::mem_row_major);
    __syncwarp();

    // Online softmax on this lane's half row (columns 2c + half).
    const float* srow = Sw + r * kLdS;
    const int key_limit = causal ? min(S, q_idx + 1) : S;
    const int nvalid = max(0, min(kBN, key_limit - n0));  // columns [0, nvalid) are real keys for row r
    float tile_max = -CUDART_INF_F;
#pragma unroll 8
    for (int c = 0; c < kBN / 2; ++c) {
      const int col = 2 * c + half;
      if (col < nvalid) tile_max = fmaxf(tile_max, srow[col]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m_run, tile_max * scale_log2);
    const float m_use = m_new == -CUDART_INF_F ? 0.f : m_new;
    const float alpha = exp2f(m_run - m_use);
    float psum = 0.f;
    T* prow = Pw + r * kLdP;
#pragma unroll 8
    for (int c = 0; c < kBN / 2; ++c) {
      const int col = 2 * c + half;
      const float p = col < nvalid ? exp2f(srow[col] * scale_log2 - m_use) : 0.f;
      psum += p;
      prow[col] = from_float<T>(p);
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    l_run = l_run * alpha + psum;
    m_run = m_new;
    float* orow = Ow + r * kLdO;
    if (!__all_sync(0xffffffffu, alpha == 1.f)) {  // no row's max moved: nothing to rescale
#pragma unroll 8
      for (int d = 0; d < D / 2; ++d) orow[2 * d + half] *= alpha;
    }
    __syncwarp();

    // O += P V for this warp's rows.
#pragma unroll
    for (int dn = 0; dn < D; dn += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc;
      wmma::load_matrix_sync(oacc, Ow + dn, kLdO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBN; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
        wmma::load_matrix_sync(pa, Pw + kk, kLdP);
        wmma::load_matrix_sync(vb, Vs + kk * kLdT + dn, kLdT);
        wmma::mma_sync(oacc, pa, vb, oacc);
      }
      wmma::store_matrix_sync(Ow + dn, oacc, kLdO, wmma::mem_row_major);
    }
    __syncwarp();
  }

  // Normalise this lane's half row, then the warp writes its 16 rows with coalesced stores.
  const float inv = l_run > 0.f ? 1.f / l_run : 0.f;
  float* orow = Ow + r * kLdO;
  for (int d = 0; d < D / 2; ++d) orow[2 * d + half] *= inv;
  __syncwarp();
  T* ob = o + base;
  for (int i = lane; i < 16 * D; i += 32) {
    const int rr = i / D, d = i % D, qi = m0 + warp * 16 + rr;
    if (qi < S) ob[int64_t(qi) * D + d] = from_float<T>(Ow[rr * kLdO + d]);
  }
}

// ---------------------------------------------------------------------------------------------
// CUDA-core kernel (fp32, or any head dim up to MAXD): exact fp32 math.
// ---------------------------------------------------------------------------------------------
constexpr int kRowsPerWarp = 4, kSimtBM = 4 * kRowsPerWarp, kSimtBN = 32;

inline size_t simt_smem_bytes(int D) {
  return size_t(kSimtBM * D + kSimtBN * (D + 1) + kSimtBN * D) * sizeof(float);
}

template <typename T, int MAXD>
__global__ void __launch_bounds__(kThreads) flash_simt_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                                              const T* __restrict__ v, T* __restrict__ o, int S,
                                                              int D, float scale_log2, bool causal) {
  constexpr int kPerLane = MAXD / 32;
  extern __shared__ __align__(16) float fsm[];
  float* Qs = fsm;                       // [16][D], pre-scaled into the log2 domain
  float* Ks = Qs + kSimtBM * D;          // [32][D + 1]: odd stride, lanes read different banks
  float* Vs = Ks + kSimtBN * (D + 1);    // [32][D]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t base = int64_t(blockIdx.x) * S * D;
  const int m0 = (gridDim.y - 1 - blockIdx.y) * kSimtBM;
  for (int i = threadIdx.x; i < kSimtBM * D; i += kThreads) {
    const int rr = i / D, gr = m0 + rr;
    Qs[i] = gr < S ? to_float(q[base + int64_t(gr) * D + i % D]) * scale_log2 : 0.f;
  }
  float acc[kRowsPerWarp][kPerLane];
  float m_run[kRowsPerWarp], l_run[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m_run[rr] = -CUDART_INF_F;
    l_run[rr] = 0.f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) acc[rr][t] = 0.f;
  }
  const int n_end = causal ? min(S, m0 + kSimtBM) : S;
  for (int n0 = 0; n0 < n_end; n0 += kSimtBN) {
    __syncthreads();
    for (int i = threadIdx.x; i < kSimtBN * D; i += kThreads) {
      const int rr = i / D, d = i % D, gr = n0 + rr;
      const bool in = gr < S;
      Ks[rr * (D + 1) + d] = in ? to_float(k[base + int64_t(gr) * D + d]) : 0.f;
      Vs[i] = in ? to_float(v[base + int64_t(gr) * D + d]) : 0.f;
    }
    __syncthreads();
    const int key = n0 + lane;
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int row = warp * kRowsPerWarp + rr, qi = m0 + row;
      const bool valid = key < S && (!causal || key <= qi);
      float s = -CUDART_INF_F;
      if (valid) {
        const float* qrow = Qs + row * D;
        const float* krow = Ks + lane * (D + 1);
        float dot = 0.f;
        for (int d = 0; d < D; ++d) dot = fmaf(qrow[d], krow[d], dot);
        s = dot;
      }
      const float m_new = fmaxf(m_run[rr], warp_max(s));
      const float m_use = m_new == -CUDART_INF_F ? 0.f : m_new;
      const float alpha = exp2f(m_run[rr] - m_use);
      const float p = valid ? exp2f(s - m_use) : 0.f;
      l_run[rr] = l_run[rr] * alpha + warp_sum(p);
      m_run[rr] = m_new;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) acc[rr][t] *= alpha;
      for (int j = 0; j < kSimtBN; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) {
          const int d = lane + 32 * t;
          if (d < D) acc[rr][t] = fmaf(pj, Vs[j * D + d], acc[rr][t]);
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int qi = m0 + warp * kRowsPerWarp + rr;
    if (qi >= S) continue;
    const float inv = l_run[rr] > 0.f ? 1.f / l_run[rr] : 0.f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int d = lane + 32 * t;
      if (d < D) o[base + int64_t(qi) * D + d] = from_float<T>(acc[rr][t] * inv);
    }
  }
}

// Shared memory above 48 KB needs an opt-in per kernel; ask once per kernel instantiation.
template <typename Kernel>
cudaError_t allow_smem(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

template <typename T, int D>
cudaError_t launch_wmma(const T* q, const T* k, const T* v, T* o, int64_t bh, int S, bool causal, cudaStream_t stream) {
  const size_t smem = wmma_smem_bytes<D>(sizeof(T));
  cudaError_t err = allow_smem(flash_wmma_kernel<T, D>, smem);
  if (err != cudaSuccess) return err;
  const bool vec = aligned16(q) && aligned16(k) && aligned16(v);
  const dim3 grid(unsigned(bh), (S + kBM - 1) / kBM);
  const float scale_log2 = kLog2e / sqrtf(float(D));
  flash_wmma_kernel<T, D><<<grid, kThreads, smem, stream>>>(q, k, v, o, S, scale_log2, causal, vec);
  return cudaGetLastError();
}

template <typename T, int MAXD>
cudaError_t launch_simt_max(const T* q, const T* k, const T* v, T* o, int64_t bh, int S, int D, bool causal,
                            cudaStream_t stream) {
  const size_t smem = simt_smem_bytes(D);
  cudaError_t err = allow_smem(flash_simt_kernel<T, MAXD>, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(unsigned(bh), (S + kSimtBM - 1) / kSimtBM);
  const float scale_log2 = kLog2e / sqrtf(float(D));
  flash_simt_kernel<T, MAXD><<<grid, kThreads, smem, stream>>>(q, k, v, o, S, D, scale_log2, causal);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_typed(const void* qv, const void* kv, const void* vv, void* ov, int64_t bh, int S, int D,
                         bool causal, cudaStream_t stream) {
  const T* q = static_cast<const T*>(qv);
  const T* k = static_cast<const T*>(kv);
  const T* v = static_cast<const T*>(vv);
  T* o = static_cast<T*>(ov);
  if constexpr (!std::is_same<T, float>::value) {
    if (D == 64) return launch_wmma<T, 64>(q, k, v, o, bh, S, causal, stream);
    if (D == 128) return launch_wmma<T, 128>(q, k, v, o, bh, S, causal, stream);
  }
  if (D <= 64) return launch_simt_max<T, 64>(q, k, v, o, bh, S, D, causal, stream);
  if (D <= 128) return launch_simt_max<T, 128>(q, k, v, o, bh, S, D, causal, stream);
  return launch_simt_max<T, 256>(q, k, v, o, bh, S, D, causal, stream);
}

}  // namespace

// dtype: 0 = float32, 1 = float16, 2 = bfloat16. q, k, v, o: `bh` = batch*heads slices of [S, D].
cudaError_t flash_attention_launch(int dtype, const void* q, const void* k, const void* v, void* o, int64_t bh, int S,
                                   int D, bool causal, cudaStream_t stream) {
  if (bh == 0 || S == 0) return cudaSuccess;
  if (D < 1 || D > 256) return cudaErrorInvalidValue;
  switch (dtype) {
    case 0: return launch_typed<float>(q, k, v, o, bh, S, D, causal, stream);
    case 1: return launch_typed<__half>(q, k, v, o, bh, S, D, causal, stream);
    case 2: return launch_typed<__nv_bfloat16>(q, k, v, o, bh, S, D, causal, stream);
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

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  check_input(q, "flash_attention: q");
  check_input(k, "flash_attention: k");
  check_input(v, "flash_attention: v");
  TORCH_CHECK(q.dim() == 4, "flash_attention: q must be [batch, heads, seq, head_dim], got ", q.dim(), "-D");
  TORCH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "flash_attention: q, k and v must have one shape");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "flash_attention: q, k and v must share a dtype");
  TORCH_CHECK(k.device() == q.device() && v.device() == q.device(), "flash_attention: q, k, v on different devices");
  const int64_t S = q.size(2), D = q.size(3);
  TORCH_CHECK(D >= 1 && D <= 256, "flash_attention: head_dim must be in 1..256, got ", D);
  TORCH_CHECK(S <= int64_t(65535) * 16 && q.size(0) * q.size(1) < (int64_t(1) << 31),
              "flash_attention: sizes too large");
  const int code = dtype_code(q, "flash_attention: q");
  c10::cuda::CUDAGuard guard(q.device());
  at::Tensor o = at::empty_like(q);
  cudaError_t err = flash_attention_launch(code, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                           q.size(0) * q.size(1), int(S), int(D), causal,
                                           c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "flash_attention kernel launch failed: ", cudaGetErrorString(err));
  return o;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("flash_attention", &flash_attention, "attention forward with online softmax (CUDA)", pybind11::arg("q"),
        pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("causal") = false);
}
#endif  // AUTOKERNEL_NO_TORCH

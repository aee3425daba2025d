// Flash attention (forward), CUDA C++ starter: out = softmax(q k^T / sqrt(D) [+ causal mask]) v,
// q, k, v, out [B, H, S, D] contiguous, the causal mask top-left aligned (key j <= query i).
//
// What it does: online softmax (running max and sum per query row, in the log2 domain), never
// materialising the S x S score matrix; any sequence length (edges zero-filled and masked), causal
// and not (causal blocks stop at the diagonal).
// - Hopper (sm_90a build), fp16/bf16 with D = 64 or 128: TMA + wgmma, scores and output in
//   registers, a producer warp and two consumer warpgroups per 128 query rows (see the sm90
//   namespace below). Measured against the Triton starter and PyTorch's SDPA:
//   docs/results/kernel_notes.md.
// - Other GPUs, fp16/bf16 with D = 64 or 128: tensor cores through WMMA (mma.sync), 64 query rows per block
//   (4 warps x 16 rows), 64-key tiles of K and V in shared memory; S = Q K^T and O += P V as WMMA
//   16x16x16 products with fp32 accumulation; scores, probabilities and the fp32 output
//   accumulator live in shared memory because WMMA fragments cannot be rescaled element by element.
// - fp32 (any D <= 256) and fp16/bf16 with other head dims: exact fp32 on CUDA cores, 16 query
//   rows per block (4 per warp), one key per lane over 32-key tiles.
// What it does not do, honestly: on Hopper, no overlap of a warpgroup's softmax with its own next
// QK^T (FlashAttention-3's intra-warpgroup pipelining), no persistent scheduling, no fp8; the WMMA
// path keeps scores and output in shared memory and runs far behind SDPA. Forward only.
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
#if defined(AUTOKERNEL_SM90A) && !defined(AUTOKERNEL_BINDINGS_ONLY)
#include "ak_hopper.cuh"  // kernels/include/: mbarriers, bulk tensor copies, wgmma descriptors, tensor maps
#endif

// The raw-pointer launcher, defined below (left out with -DAUTOKERNEL_BINDINGS_ONLY, which the tests
// use to compile the torch binding apart from the device code).
cudaError_t flash_attention_launch(int dtype, const void* q, const void* k, const void* v, void* o, int64_t bh, int S,
                                   int D, bool causal, cudaStream_t stream);

#ifndef AUTOKERNEL_BINDINGS_ONLY
// kernels/include/:
#include "ak_vec.cuh"  // to_float, from_float, load_vec, store_vec, aligned16, with_dtype(s)
#include "ak_reduce.cuh"  // warp and row sums and maxima, exp_fast, kLog2e

namespace {

using namespace ak;

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

#if defined(AUTOKERNEL_SM90A)
// ---------------------------------------------------------------------------------------------
// Hopper path (built only with the sm_90a target, see kernels/cuda_build.py), fp16/bf16 with
// D = 64 or 128: 128 query rows per block, two consumer warpgroups of 64 rows each and one
// producer warp. The producer's lane 0 copies the Q tile once and K/V tiles of 128 keys into a
// ring of shared-memory stages with the bulk tensor copy engine (3-D tensor maps over
// [B*H, S, D], so a tile never reads into the next head: the engine zero-fills past S), 128-byte
// swizzled, each stage completing on its "full" mbarrier and handed back through its "empty" one.
// Each consumer warpgroup computes S = Q K^T with wgmma (both operands from shared memory, 64
// fp32 registers a thread), does the online softmax on those registers (row max and sum over the
// four threads that share a row), turns P into 16-bit A fragments in registers and accumulates
// O += P V with wgmma (V read N-major from shared memory). The two warpgroups are not in
// lockstep: one's softmax can overlap the other's matrix products.
// ---------------------------------------------------------------------------------------------
namespace sm90 {
constexpr int kBM = 128, kBN = 128;       // query rows per block, keys per tile
constexpr int kConsumerThreads = 256;     // two warpgroups
constexpr int kThreads = kConsumerThreads + 32;  // and the producer warp (warp 8)

template <int D>
struct Tiles {
  static constexpr int kChunks = D / 64;  // 64-column (128-byte) chunks: the swizzle span
  static constexpr int kStages = D == 128 ? 2 : 3;
  static constexpr int kQBytes = kBM * D * 2, kKVBytes = kBN * D * 2;
  static constexpr int kQ = 0, kK = kQBytes, kV = kK + kStages * kKVBytes;  // offsets from the 1024-aligned base
  static constexpr int kBars = kV + kStages * kKVBytes;                     // q_full, full[s], empty[s]
  static constexpr int kSmemBytes = kBars + 8 * (1 + 2 * kStages) + 1024;   // + alignment slack
};

using namespace ak_hopper;

// 2^x by the SFU (ex2.approx, flushing denormal results to zero): what exp2f becomes under nvcc's
// fast-math flag, without that flag's effect on the rest of the file. Relative error ~2^-22,
// far below the 16-bit rounding P gets next; 2^-inf is 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <typename T>
__device__ __forceinline__ uint32_t pack_two(float lo, float hi) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    flash_wgmma_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                       const __grid_constant__ CUtensorMap v_map, T* __restrict__ O, int S, float scale_log2,
                       bool causal) {
  using L = Tiles<D>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // The swizzle pattern repeats every 1024 bytes and the descriptors assume tiles start on it.
  const uint32_t base = (shared_address(smem_raw) + 1023) & ~1023u;
  const uint32_t q_full = base + L::kBars;
  auto full = [&](int s) { return q_full + 8 * (1 + s); };
  auto empty = [&](int s) { return q_full + 8 * (1 + L::kStages + s); };
  auto k_tile = [&](int s) { return base + L::kK + s * L::kKVBytes; };
  auto v_tile = [&](int s) { return base + L::kV + s * L::kKVBytes; };

  const int q_tiles = gridDim.x;
  const int q_tile = causal ? q_tiles - 1 - int(blockIdx.x) : int(blockIdx.x);  // causal: longest rows first
  const int q0 = q_tile * kBM, slice = blockIdx.y;
  const int key_tiles = causal ? min((S + kBN - 1) / kBN, (q0 + kBM + kBN - 1) / kBN) : (S + kBN - 1) / kBN;

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < L::kStages; ++s) {
      mbar_init(full(s), 1);   // the producer's expect_tx arrival, then the copies' bytes
      mbar_init(empty(s), 8);  // lane 0 of each consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (threadIdx.x >= kConsumerThreads) {  // producer warp
    if (threadIdx.x == kConsumerThreads) {
      mbar_expect_tx(q_full, L::kQBytes);
#pragma unroll
      for (int c = 0; c < L::kChunks; ++c) tma_load_3d(base + L::kQ + c * kBM * 128, &q_map, 64 * c, q0, slice, q_full);
      for (int j = 0; j < key_tiles; ++j) {
        const int s = j % L::kStages;
        mbar_wait(empty(s), ((j / L::kStages) & 1) ^ 1);  // a fresh barrier passes the first round
        mbar_expect_tx(full(s), 2 * L::kKVBytes);
#pragma unroll
        for (int c = 0; c < L::kChunks; ++c) {
          tma_load_3d(k_tile(s) + c * kBN * 128, &k_map, 64 * c, j * kBN, slice, full(s));
          tma_load_3d(v_tile(s) + c * kBN * 128, &v_map, 64 * c, j * kBN, slice, full(s));
        }
      }
    }
    return;
  }

  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int row = q0 + wg * 64 + warp * 16 + lane / 4;  // this thread's first row; the second is row + 8
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float sc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) sc[i] = 0.f;
  // Row maxima of the raw scores; the sums are this thread's partials (its quad adds them up at the end).
  float row_max[2] = {-CUDART_INF_F, -CUDART_INF_F}, row_sum[2] = {0.f, 0.f};

  mbar_wait(q_full, 0);
  const uint32_t q_rows = base + L::kQ + wg * 64 * 128;  // this warpgroup's 64 rows in each chunk
  for (int j = 0; j < key_tiles; ++j) {
    const int s = j % L::kStages;
    mbar_wait(full(s), (j / L::kStages) & 1);

    // S = Q K^T: D / 16 k-steps; a step moves 32 bytes along the swizzled rows, a chunk is a new tile.
    fence_registers(sc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t step = (kk % 4) * 32;
      wgmma_m64n128k16_ss<T>(sc, sw128_desc(q_rows + (kk / 4) * kBM * 128 + step, 16, 1024),
                      sw128_desc(k_tile(s) + (kk / 4) * kBN * 128 + step, 16, 1024), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(sc);

    // Accumulator layout: sc[4 n + 0..1] are keys 8 n + 2 (lane % 4) + 0..1 of `row`, sc[4 n + 2..3]
    // the same keys of row + 8. Keys past S, and past the row under the causal mask, are -inf. The
    // maximum is taken over raw scores (the scale is positive), so scaling and shifting is one FMA.
    if (j * kBN + kBN > S || (causal && j * kBN + kBN - 1 > q0)) {
      const int key0 = j * kBN + 2 * (lane % 4);
#pragma unroll
      for (int n = 0; n < kBN / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * n + (e & 1);
          if (key >= S || (causal && key > row + (e >> 1) * 8)) sc[4 * n + e] = -CUDART_INF_F;
        }
      }
    }
    float tile_max[2] = {-CUDART_INF_F, -CUDART_INF_F};
#pragma unroll
    for (int n = 0; n < kBN / 8; ++n) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(sc[4 * n], sc[4 * n + 1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(sc[4 * n + 2], sc[4 * n + 3]));
    }
    float alpha[2], shift[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      const float new_max = fmaxf(row_max[h], tile_max[h]);
      shift[h] = new_max == -CUDART_INF_F ? 0.f : new_max * scale_log2;  // nothing unmasked yet: stays zero
      alpha[h] = fast_exp2(row_max[h] * scale_log2 - shift[h]);
      row_max[h] = new_max;
      row_sum[h] *= alpha[h];
    }
    // P = exp2(s * scale - max), summed per thread, and packed two by two as the A fragments of P V:
    // k-step t covers keys 16 t .. 16 t + 15, i.e. accumulator blocks 2 t and 2 t + 1.
    uint32_t p[kBN / 16][4];
#pragma unroll
    for (int t = 0; t < kBN / 16; ++t) {
      float e[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        e[i] = fast_exp2(fmaf(sc[8 * t + i], scale_log2, -shift[(i >> 1) & 1]));
        row_sum[(i >> 1) & 1] += e[i];
      }
      p[t][0] = pack_two<T>(e[0], e[1]);
      p[t][1] = pack_two<T>(e[2], e[3]);
      p[t][2] = pack_two<T>(e[4], e[5]);
      p[t][3] = pack_two<T>(e[6], e[7]);
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[4 * n] *= alpha[0];
      o[4 * n + 1] *= alpha[0];
      o[4 * n + 2] *= alpha[1];
      o[4 * n + 3] *= alpha[1];
    }

    // O += P V: V's tile is N-major (D contiguous); a k-step is 16 key rows of 128 bytes, the
    // 64-column chunks lie kBN * 128 bytes apart.
    fence_registers(o);
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < kBN / 16; ++t) wgmma_m64nNk16_rs<T, D>(o, p[t], sw128_desc(v_tile(s) + t * 16 * 128, kBN * 128, 1024));
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(o);
    if (lane == 0) mbar_arrive(empty(s));  // this warp is done with the stage's K and V
  }

  // The four threads of a row hold partial sums; O / sum, stored two columns at a time.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
  }
  const float inv[2] = {1.f / row_sum[0], 1.f / row_sum[1]};
  T* out = O + int64_t(slice) * S * D;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row + 8 * h;
    if (r >= S) continue;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const uint32_t pair = pack_two<T>(o[4 * n + 2 * h] * inv[h], o[4 * n + 2 * h + 1] * inv[h]);
      *reinterpret_cast<uint32_t*>(out + int64_t(r) * D + 8 * n + 2 * (lane % 4)) = pair;
    }
  }
}

// [bh, S, D] of 2-byte elements, read in boxes of `rows` x 64 columns of one slice (128 bytes: the
// swizzle span), 128-byte swizzled, zeros past S.
template <typename T>
bool slices_map(CUtensorMap* map, const T* base, int64_t bh, int S, int D, int rows) {
  const cuuint64_t dims[3] = {cuuint64_t(D), cuuint64_t(S), cuuint64_t(bh)};
  const cuuint64_t pitch[2] = {cuuint64_t(D) * sizeof(T), cuuint64_t(S) * D * sizeof(T)};
  const cuuint32_t box[3] = {64, cuuint32_t(rows), 1};
  return sw128_tensor_map(map, base, 3, dims, pitch, box);
}

// Launches the Hopper kernel when the operands allow it; *launched says whether it did.
template <typename T, int D>
cudaError_t launch(const T* q, const T* k, const T* v, T* o, int64_t bh, int S, bool causal, cudaStream_t stream,
                   bool* launched) {
  *launched = false;
  if (!(aligned16(q) && aligned16(k) && aligned16(v) && aligned16(o)) || bh > 65535 || !device_is_sm90()) {
    return cudaSuccess;
  }
  CUtensorMap q_map, k_map, v_map;
  if (!(slices_map(&q_map, q, bh, S, D, kBM) && slices_map(&k_map, k, bh, S, D, kBN) &&
        slices_map(&v_map, v, bh, S, D, kBN))) {
    return cudaSuccess;
  }
  auto kernel = flash_wgmma_kernel<T, D>;
  cudaError_t err = allow_smem(kernel, Tiles<D>::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid((S + kBM - 1) / kBM, unsigned(bh));
  kernel<<<grid, kThreads, Tiles<D>::kSmemBytes, stream>>>(q_map, k_map, v_map, o, S, kLog2e / sqrtf(float(D)), causal);
  *launched = true;
  return cudaGetLastError();
}
}  // namespace sm90
#endif  // AUTOKERNEL_SM90A

template <typename T>
cudaError_t launch_typed(const void* qv, const void* kv, const void* vv, void* ov, int64_t bh, int S, int D,
                         bool causal, cudaStream_t stream) {
  const T* q = static_cast<const T*>(qv);
  const T* k = static_cast<const T*>(kv);
  const T* v = static_cast<const T*>(vv);
  T* o = static_cast<T*>(ov);
  if constexpr (!std::is_same<T, float>::value) {
#if defined(AUTOKERNEL_SM90A)
    bool launched = false;
    cudaError_t err = cudaSuccess;
    if (D == 64) err = sm90::launch<T, 64>(q, k, v, o, bh, S, causal, stream, &launched);
    if (D == 128) err = sm90::launch<T, 128>(q, k, v, o, bh, S, causal, stream, &launched);
    if (launched || err != cudaSuccess) return err;
#endif
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
  return with_dtype(dtype, [&](auto t) { return launch_typed<decltype(t)>(q, k, v, o, bh, S, D, causal, stream); });
}
#endif  // AUTOKERNEL_BINDINGS_ONLY

#ifndef AUTOKERNEL_NO_TORCH
#include "ak_torch.cuh"  // kernels/include/: the torch headers and the bindings' checks (ak::dtype_code, ...)

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  ak::check_input(q, "flash_attention: q");
  ak::check_input(k, "flash_attention: k");
  ak::check_input(v, "flash_attention: v");
  TORCH_CHECK(q.dim() == 4, "flash_attention: q must be [batch, heads, seq, head_dim], got ", q.dim(), "-D");
  TORCH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "flash_attention: q, k and v must have one shape");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
              "flash_attention: q, k and v must share a dtype");
  TORCH_CHECK(k.device() == q.device() && v.device() == q.device(), "flash_attention: q, k, v on different devices");
  const int64_t S = q.size(2), D = q.size(3);
  TORCH_CHECK(D >= 1 && D <= 256, "flash_attention: head_dim must be in 1..256, got ", D);
  TORCH_CHECK(S <= int64_t(65535) * 16 && q.size(0) * q.size(1) < (int64_t(1) << 31),
              "flash_attention: sizes too large");
  const int code = ak::dtype_code(q, "flash_attention: q");
  c10::cuda::CUDAGuard guard(q.device());
  at::Tensor o = at::empty_like(q);
  cudaError_t err = flash_attention_launch(code, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                           q.size(0) * q.size(1), int(S), int(D), causal,
                                           c10::cuda::getCurrentCUDAStream());
  ak::check_launch(err, "flash_attention");
  return o;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("flash_attention", &flash_attention, "attention forward with online softmax (CUDA)", pybind11::arg("q"),
        pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("causal") = false);
}
#endif  // AUTOKERNEL_NO_TORCH

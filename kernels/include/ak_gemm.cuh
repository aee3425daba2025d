// The GEMM the matrix starters share (matmul.cu, fused_mlp.cu) and candidates may include:
// C[M, N] = A[M, K] . B with fp32 accumulation and an epilogue applied on the way out, B either
// [K, N] or nn.Linear's [N, K]. Three kernels behind one entry point, `ak_gemm::gemm`:
// - fp16/bf16 on Hopper (sm_90a build, 16-byte aligned rows): TMA + wgmma, a producer warpgroup
//   and two consumer warpgroups per 128x256 tile (namespace sm90), and `sm90::launch_swiglu`, which
//   computes silu(x w_gate^T) * (x w_up^T) in one accumulator;
// - fp16/bf16 elsewhere: WMMA (mma.sync) 128x128x32 tiles, register-staged double buffering;
// - fp32: exact fp32 FMAs on CUDA cores (no TF32), so it matches a non-TF32 reference.
// One copy for every source (kernels/cuda_build.py puts this folder on the include path and its
// files in the cache key). Device code: include it outside the torch-binding part.
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <cstdint>
#include <type_traits>

#include "ak_vec.cuh"  // from_float, aligned16
#if defined(AUTOKERNEL_SM90A)
#include "ak_hopper.cuh"  // mbarriers, bulk tensor copies, wgmma descriptors, tensor maps
#endif

namespace ak_gemm {

using namespace ak;

template <typename T> __device__ __forceinline__ T zero_value() { return from_float<T>(0.f); }

// What happens to an fp32 accumulator on its way out.
enum Epilogue : int {
  kStore = 0,   // out = acc
  kSwiGLU = 1,  // out = silu(aux) * acc, aux an fp32 [M, N] matrix (the gate projection)
  kSwiGLUPair = 2,  // Hopper kernel only: gate and up in one accumulator, out = silu(gate) * up
};

__device__ __forceinline__ float silu(float g) { return g / (1.f + expf(-g)); }

template <int EPI>
__device__ __forceinline__ float epilogue(float acc, const float* __restrict__ aux, int64_t at) {
  if constexpr (EPI == kSwiGLU) {
    return silu(aux[at]) * acc;
  } else {
    return acc;
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core GEMM for __half / __nv_bfloat16: C[M, N] = A[M, K] . B, fp32 accumulation.
// B is [K, N] row-major (B_NT = false) or [N, K] row-major, i.e. nn.Linear's weight (B_NT = true).
// 128x128x32 block tile, 8 warps each owning 64x32 of C as 4x2 WMMA 16x16x16 fragments; tiles are
// staged through registers so the next tile's global loads overlap this tile's MMAs (two shared
// buffers). VEC = 16-byte global loads (needs K, and N for NN, multiples of 8 and aligned bases);
// otherwise element loads with bounds checks. Edges are zero-filled, so any M, N, K works.
// Blocks are visited in groups of 8 block-rows so that neighbours reuse tiles from L2.
// ---------------------------------------------------------------------------------------------
constexpr int kBM = 128, kBN = 128, kBK = 32, kThreads = 256, kPad = 8, kGroupM = 8;

// This block's first row and column of C in grouped order: runs of kGroupM consecutive block-rows
// visit their column tiles together, so neighbouring blocks share B tiles in L2.
__device__ __forceinline__ void grouped_tile_origin(int tile_m, int tile_n, int& m0, int& n0) {
  const int grid_n = gridDim.x, grid_m = gridDim.y;
  const int pid = blockIdx.y * grid_n + blockIdx.x;
  const int in_group = kGroupM * grid_n;
  const int first_m = (pid / in_group) * kGroupM;
  const int group_m = min(grid_m - first_m, kGroupM);
  m0 = (first_m + (pid % in_group) % group_m) * tile_m;
  n0 = ((pid % in_group) / group_m) * tile_n;
}

// Load rows x cols tile (row-major, leading dim ld) at (r0, c0) into registers, zero outside.
template <typename T, int R, int C, bool VEC>
struct TileStage {
  static constexpr int kPerVec = 8;  // 16 bytes of 2-byte elements
  static constexpr int kCount = VEC ? R * C / kPerVec / kThreads : R * C / kThreads;
  typename std::conditional<VEC, uint4, T>::type reg[kCount];

  __device__ __forceinline__ void load(const T* __restrict__ g, int64_t ld, int rows, int cols, int r0, int c0) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int v = threadIdx.x + i * kThreads;
      if constexpr (VEC) {
        const int r = v / (C / kPerVec), c = (v % (C / kPerVec)) * kPerVec;
        const int gr = r0 + r, gc = c0 + c;
        if (gr < rows && gc < cols) {
          reg[i] = *reinterpret_cast<const uint4*>(g + int64_t(gr) * ld + gc);
        } else {
          reg[i] = make_uint4(0u, 0u, 0u, 0u);
        }
      } else {
        const int r = v / C, c = v % C;
        const int gr = r0 + r, gc = c0 + c;
        reg[i] = (gr < rows && gc < cols) ? g[int64_t(gr) * ld + gc] : zero_value<T>();
      }
    }
  }

  __device__ __forceinline__ void store(T* s, int lds) const {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int v = threadIdx.x + i * kThreads;
      if constexpr (VEC) {
        const int r = v / (C / kPerVec), c = (v % (C / kPerVec)) * kPerVec;
        *reinterpret_cast<uint4*>(s + r * lds + c) = reg[i];
      } else {
        s[(v / C) * lds + v % C] = reg[i];
      }
    }
  }
};

template <typename T, typename OutT, bool B_NT, int EPI, bool VEC>
__global__ void __launch_bounds__(kThreads, VEC ? 2 : 1) wmma_gemm_kernel(const T* __restrict__ A, const T* __restrict__ B,
                                                             OutT* __restrict__ C, const float* __restrict__ aux,
                                                             int M, int N, int K) {
  using namespace nvcuda;
  constexpr int kLdA = kBK + kPad;                   // As[kBM][kLdA]
  constexpr int kLdB = B_NT ? kBK + kPad : kBN + kPad;  // Bs[kBN][kLdB] (NT) or Bs[kBK][kLdB] (NN)
  constexpr int kBRows = B_NT ? kBN : kBK;
  __shared__ __align__(128) T As[2][kBM * kLdA];
  __shared__ __align__(128) T Bs[2][kBRows * kLdB];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warp_m = warp / 4, warp_n = warp % 4;  // 2 x 4 warps, 64 x 32 each
  int m0, n0;
  grouped_tile_origin(kBM, kBN, m0, n0);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  TileStage<T, kBM, kBK, VEC> a_stage;
  TileStage<T, kBRows, B_NT ? kBK : kBN, VEC> b_stage;
  const int k_tiles = (K + kBK - 1) / kBK;

  auto load_tiles = [&](int kt) {
    const int k0 = kt * kBK;
    a_stage.load(A, K, M, K, m0, k0);
    if constexpr (B_NT) b_stage.load(B, K, N, K, n0, k0);
    else b_stage.load(B, N, K, N, k0, n0);
  };

  if (k_tiles > 0) {
    load_tiles(0);
    a_stage.store(As[0], kLdA);
    b_stage.store(Bs[0], kLdB);
  }
  __syncthreads();

  using Layout = typename std::conditional<B_NT, wmma::col_major, wmma::row_major>::type;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int cur = kt & 1;
    const bool more = kt + 1 < k_tiles;
    if (more) load_tiles(kt + 1);  // global loads in flight during the MMAs below
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      // Both B fragments stay in registers; A fragments are loaded one at a time, which keeps the
      // kernel under 128 registers (two blocks per SM).
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout> b_frag[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int n = warp_n * 32 + j * 16;
        if constexpr (B_NT) wmma::load_matrix_sync(b_frag[j], Bs[cur] + n * kLdB + kk, kLdB);
        else wmma::load_matrix_sync(b_frag[j], Bs[cur] + kk * kLdB + n, kLdB);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a_frag;
        wmma::load_matrix_sync(a_frag, As[cur] + (warp_m * 64 + i * 16) * kLdA + kk, kLdA);
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a_frag, b_frag[j], acc[i][j]);
      }
    }
    if (more) {
      a_stage.store(As[cur ^ 1], kLdA);
      b_stage.store(Bs[cur ^ 1], kLdB);
    }
    __syncthreads();
  }

  // Epilogue: each fragment goes through this warp's fp32 scratch (the A buffers, free after the
  // loop's last barrier: 8 warps x 1 KB fits in As[0]), then to C with bounds checks.
  static_assert(kThreads / 32 * 256 * sizeof(float) <= sizeof(As[0]), "epilogue scratch fits in As[0]");
  float* mine = reinterpret_cast<float*>(As[0]) + warp * 256;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(mine, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      const int rbase = m0 + warp_m * 64 + i * 16, cbase = n0 + warp_n * 32 + j * 16;
#pragma unroll
      for (int e = lane; e < 256; e += 32) {
        const int r = rbase + e / 16, c = cbase + e % 16;
        if (r < M && c < N) {
          const int64_t at = int64_t(r) * N + c;
          C[at] = from_float<OutT>(epilogue<EPI>(mine[e], aux, at));
        }
      }
      __syncwarp();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// fp32 GEMM on CUDA cores (exact fp32, no TF32): 64x64x16 tiles, 256 threads, 4x4 outputs each.
// ---------------------------------------------------------------------------------------------
constexpr int kSBM = 64, kSBN = 64, kSBK = 16;

template <bool B_NT, int EPI>
__global__ void __launch_bounds__(256) simt_gemm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                        float* __restrict__ C, const float* __restrict__ aux,
                                                        int M, int N, int K) {
  __shared__ float As[kSBK][kSBM + 4];  // transposed: As[k][m]
  __shared__ float Bs[kSBK][kSBN + 4];  // Bs[k][n]
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int m0 = blockIdx.y * kSBM, n0 = blockIdx.x * kSBN;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kSBK) {
    // 64x16 of A and 16x64 of B: 1024 elements each, 4 per thread.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int v = threadIdx.x + i * 256;
      const int am = v / kSBK, ak = v % kSBK;
      const int gm = m0 + am, gk = k0 + ak;
      As[ak][am] = (gm < M && gk < K) ? A[int64_t(gm) * K + gk] : 0.f;
      if constexpr (B_NT) {
        const int bn = v / kSBK, bk = v % kSBK;
        const int gn = n0 + bn, gk2 = k0 + bk;
        Bs[bk][bn] = (gn < N && gk2 < K) ? B[int64_t(gn) * K + gk2] : 0.f;
      } else {
        const int bk = v / kSBN, bn = v % kSBN;
        const int gk2 = k0 + bk, gn = n0 + bn;
        Bs[bk][bn] = (gk2 < K && gn < N) ? B[int64_t(gk2) * N + gn] : 0.f;
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kSBK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[k][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = m0 + ty * 4 + i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = n0 + tx * 4 + j;
      if (r < M && c < N) {
        const int64_t at = int64_t(r) * N + c;
        C[at] = epilogue<EPI>(acc[i][j], aux, at);
      }
    }
  }
}

#if defined(AUTOKERNEL_SM90A)
// ---------------------------------------------------------------------------------------------
// Hopper path (built only with the sm_90a target, see kernels/cuda_build.py): bulk tensor copies
// (TMA) into 128-byte-swizzled shared memory, wgmma reading both operands from there.
// 128x256x64 block tiles in a ring of 4 shared-memory stages. Warpgroup 0 is the producer: one
// thread waits for a stage to be free ("empty" mbarrier), then issues its A and B copies, which
// complete on the stage's "full" mbarrier. Warpgroups 1 and 2 each own 64 rows of C as one
// m64n256 fp32 accumulator (128 registers a thread), issue four k16 wgmmas per stage and free a
// stage once the wgmma group reading it has retired (one group stays in flight). The copy engine
// zero-fills outside the matrices, so only the final stores are masked. Needs 16-byte aligned
// bases and row pitches (K, and N for a [K, N] B, multiples of 8); otherwise the WMMA kernel runs.
// ---------------------------------------------------------------------------------------------
namespace sm90 {
constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4, kConsumers = 2;
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kRowBytes = kBK * 2;  // one tile row: 64 two-byte elements = the 128-byte swizzle span
constexpr int kATileBytes = kBM * kRowBytes, kBTileBytes = kBN * kRowBytes;
constexpr int kStageBytes = kATileBytes + kBTileBytes;
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;  // tiles, barriers, alignment slack

using namespace ak_hopper;

// Two adjacent outputs in one store (the caller makes sure the pair is aligned).
template <typename OutT>
__device__ __forceinline__ void store_two(OutT* p, float a, float b) {
  if constexpr (std::is_same<OutT, float>::value) {
    *reinterpret_cast<float2*>(p) = make_float2(a, b);
  } else if constexpr (std::is_same<OutT, __half>::value) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
  }
}

// C[M, N] = A[M, K] . B, A and B through tensor maps (B [N, K] when B_NT, else [K, N]).
// EPI == kSwiGLUPair (B_NT): the B tile is 128 rows of b_map (w_gate) above the same 128 rows of
// b2_map (w_up), so one m64n256 accumulator holds a 64 x 128 tile of both projections and C gets
// silu(gate) * up: x is read once and the gate never leaves registers.
template <typename T, typename OutT, bool B_NT, int EPI>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
                      const __grid_constant__ CUtensorMap b2_map, OutT* __restrict__ C, const float* __restrict__ aux,
                      int M, int N, int K) {
  constexpr bool kPair = EPI == kSwiGLUPair;
  constexpr int kTileN = kPair ? kBN / 2 : kBN;  // output columns per block
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // The swizzle pattern repeats every 1024 bytes and the descriptors assume tiles start on it.
  const uint32_t base = (shared_address(smem_raw) + 1023) & ~1023u;
  const uint32_t a_tiles = base, b_tiles = base + kStages * kATileBytes;
  const uint32_t bars = base + kStages * kStageBytes;  // full[s] at bars + 8 s, empty[s] after them
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kStages + s); };

  int m0, n0;
  grouped_tile_origin(kBM, kTileN, m0, n0);  // the WMMA kernel's block order
  const int k_tiles = (K + kBK - 1) / kBK;
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full(s), 1);                   // the producer's expect_tx arrival, then the copies' bytes
      mbar_init(empty(s), kConsumers * 4);     // lane 0 of every consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {  // producer
    if (threadIdx.x == 0) {
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % kStages;
        mbar_wait(empty(s), ((kt / kStages) & 1) ^ 1);  // a fresh barrier passes the first round
        mbar_expect_tx(full(s), kStageBytes);
        tma_load_2d(a_tiles + s * kATileBytes, &a_map, kt * kBK, m0, full(s));
        if constexpr (kPair) {
          tma_load_2d(b_tiles + s * kBTileBytes, &b_map, kt * kBK, n0, full(s));
          tma_load_2d(b_tiles + s * kBTileBytes + kBTileBytes / 2, &b2_map, kt * kBK, n0, full(s));
        } else if constexpr (B_NT) {
          tma_load_2d(b_tiles + s * kBTileBytes, &b_map, kt * kBK, n0, full(s));
        } else {
          // [K, N] B: four boxes of 64 k-rows x 64 columns, each 128 bytes wide (the swizzle span).
#pragma unroll
          for (int j = 0; j < kBN / 64; ++j)
            tma_load_2d(b_tiles + s * kBTileBytes + j * kBK * 128, &b_map, n0 + 64 * j, kt * kBK, full(s));
        }
      }
    }
    return;
  }

  const int consumer = warpgroup - 1, lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % kStages;
    mbar_wait(full(s), (kt / kStages) & 1);
    const uint32_t a_stage = a_tiles + s * kATileBytes + consumer * 64 * kRowBytes;  // this warpgroup's 64 rows
    const uint32_t b_stage = b_tiles + s * kBTileBytes;
    fence_registers(d);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      // K-major tiles: a k16 step moves 32 bytes along the swizzled row; rows repeat every 8 x 128 B.
      const uint64_t a_desc = sw128_desc(a_stage + kk * 32, 16, 1024);
      if constexpr (B_NT) {
        wgmma_m64n256k16<T, 0>(d, a_desc, sw128_desc(b_stage + kk * 32, 16, 1024));
      } else {
        // N-major B: a k16 step is 16 rows of 128 B; the four 64-column boxes lie kBK * 128 B apart
        // (the leading offset), each 8-row group 1024 B after the last (the stride offset).
        wgmma_m64n256k16<T, 1>(d, a_desc, sw128_desc(b_stage + kk * 16 * 128, kBK * 128, 1024));
      }
    }
    wgmma_commit();
    fence_registers(d);
    wgmma_wait<1>();  // the previous stage's group has retired: hand that stage back to the producer
    if (kt > 0 && lane == 0) mbar_arrive(empty((kt - 1) % kStages));
  }
  wgmma_wait<0>();
  fence_registers(d);

  // Accumulator layout (m64nNk16, fp32): warp w of the warpgroup holds rows 16 w + lane / 4 and + 8;
  // d[4 j + 0..1] are columns 8 j + 2 (lane % 4) + 0..1 of the first row, d[4 j + 2..3] of the second.
  // kSwiGLUPair: d[4 j + ...] for j < 16 are the gate's columns, d[4 (j + 16) + ...] the same up columns.
  constexpr int kUp = 4 * (kBN / 2 / 8);  // 64: where the up projection's registers start
  const int row0 = m0 + consumer * 64 + warp * 16 + lane / 4;
  const int col0 = n0 + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kTileN / 8; ++j) {
    const int c = col0 + 8 * j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 8 * h;
      if (r >= M || c >= N) continue;
      const int64_t at = int64_t(r) * N + c;
      const int i = 4 * j + 2 * h;
      const float v0 = kPair ? silu(d[i]) * d[i + kUp] : epilogue<EPI>(d[i], aux, at);
      if (c + 1 < N) {
        const float v1 = kPair ? silu(d[i + 1]) * d[i + 1 + kUp] : epilogue<EPI>(d[i + 1], aux, at + 1);
        if ((N & 1) == 0) {
          store_two<OutT>(C + at, v0, v1);  // even N: the pair is 2-element aligned
        } else {
          C[at] = from_float<OutT>(v0);
          C[at + 1] = from_float<OutT>(v1);
        }
      } else {
        C[at] = from_float<OutT>(v0);
      }
    }
  }
}

// A row-major [rows, cols] matrix of 2-byte elements, read in boxes of box_rows x 64 columns
// (128 bytes: the swizzle span), 128-byte swizzled, zeros outside.
template <typename T>
bool tile_map(CUtensorMap* map, const T* base, int rows, int cols, int box_rows) {
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t pitch[1] = {cuuint64_t(cols) * sizeof(T)};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  return sw128_tensor_map(map, base, 2, dims, pitch, box);
}

// Launches the Hopper kernel when the operands allow it; *launched says whether it did.
template <typename T, typename OutT, int EPI>
cudaError_t launch(const T* A, const T* B, OutT* C, const float* aux, int M, int N, int K, bool b_nt,
                   cudaStream_t stream, bool* launched) {
  *launched = false;
  if (!(aligned16(A) && aligned16(B) && K > 0 && K % 8 == 0 && (b_nt || N % 8 == 0)) || !device_is_sm90()) {
    return cudaSuccess;
  }
  CUtensorMap a_map, b_map;
  const bool mapped = tile_map(&a_map, A, M, K, kBM) && (b_nt ? tile_map(&b_map, B, N, K, kBN) : tile_map(&b_map, B, K, N, kBK));
  if (!mapped) return cudaSuccess;
  auto kernel = b_nt ? wgmma_gemm_kernel<T, OutT, true, EPI> : wgmma_gemm_kernel<T, OutT, false, EPI>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid((N + kBN - 1) / kBN, (M + kBM - 1) / kBM);
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(a_map, b_map, b_map, C, aux, M, N, K);
  *launched = true;
  return cudaGetLastError();
}

// h[M, N] = silu(x . w_gate^T) * (x . w_up^T) in one kernel (w_gate, w_up [N, K]), when the
// operands allow the Hopper path; *launched says whether it ran.
template <typename T>
cudaError_t launch_swiglu(const T* x, const T* w_gate, const T* w_up, T* h, int M, int N, int K, cudaStream_t stream,
                          bool* launched) {
  *launched = false;
  if (!(aligned16(x) && aligned16(w_gate) && aligned16(w_up) && K > 0 && K % 8 == 0) || !device_is_sm90()) {
    return cudaSuccess;
  }
  CUtensorMap x_map, gate_map, up_map;
  if (!(tile_map(&x_map, x, M, K, kBM) && tile_map(&gate_map, w_gate, N, K, kBN / 2) &&
        tile_map(&up_map, w_up, N, K, kBN / 2))) {
    return cudaSuccess;
  }
  auto kernel = wgmma_gemm_kernel<T, T, true, kSwiGLUPair>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid((N + kBN / 2 - 1) / (kBN / 2), (M + kBM - 1) / kBM);
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(x_map, gate_map, up_map, h, nullptr, M, N, K);
  *launched = true;
  return cudaGetLastError();
}
}  // namespace sm90
#endif  // AUTOKERNEL_SM90A

// C[M, N] = A[M, K] . B (B [K, N], or [N, K] when b_nt), then the epilogue. OutT is T, or float
// for an fp32 intermediate. Picks the tensor-core kernel for 16-bit types.
template <typename T, typename OutT, int EPI>
cudaError_t gemm(const T* A, const T* B, OutT* C, const float* aux, int M, int N, int K, bool b_nt,
                 cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  if constexpr (std::is_same<T, float>::value) {
    const dim3 grid((N + kSBN - 1) / kSBN, (M + kSBM - 1) / kSBM);
    if (b_nt) simt_gemm_kernel<true, EPI><<<grid, 256, 0, stream>>>(A, B, C, aux, M, N, K);
    else simt_gemm_kernel<false, EPI><<<grid, 256, 0, stream>>>(A, B, C, aux, M, N, K);
  } else {
#if defined(AUTOKERNEL_SM90A)
    bool launched = false;
    const cudaError_t err = sm90::launch<T, OutT, EPI>(A, B, C, aux, M, N, K, b_nt, stream, &launched);
    if (launched || err != cudaSuccess) return err;
#endif
    const dim3 grid((N + kBN - 1) / kBN, (M + kBM - 1) / kBM);
    const bool vec = aligned16(A) && aligned16(B) && K % 8 == 0 && (b_nt || N % 8 == 0);
    if (b_nt) {
      if (vec) wmma_gemm_kernel<T, OutT, true, EPI, true><<<grid, kThreads, 0, stream>>>(A, B, C, aux, M, N, K);
      else wmma_gemm_kernel<T, OutT, true, EPI, false><<<grid, kThreads, 0, stream>>>(A, B, C, aux, M, N, K);
    } else {
      if (vec) wmma_gemm_kernel<T, OutT, false, EPI, true><<<grid, kThreads, 0, stream>>>(A, B, C, aux, M, N, K);
      else wmma_gemm_kernel<T, OutT, false, EPI, false><<<grid, kThreads, 0, stream>>>(A, B, C, aux, M, N, K);
    }
  }
  return cudaGetLastError();
}

}  // namespace ak_gemm

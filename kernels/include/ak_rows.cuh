// The layout the row-wise starters share (softmax, rmsnorm, layernorm, reduce, cross_entropy): a
// narrow row is owned by one warp, kWarpRows rows to a block; a wide row by a whole block. A kernel
// asks `row_thread` where its thread stands, a launcher asks `row_grid` which layout and how many
// threads, and the walks below visit a thread's share of a row (held in registers or streamed). One
// copy for every source (kernels/cuda_build.py puts this folder on the include path).
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

#include "ak_vec.cuh"  // load_vec, store_vec

namespace ak {

constexpr int kItems = 4;     // vectors a thread keeps in registers
constexpr int kWarpRows = 4;  // rows per block in the warp-per-row layout

// This thread's place: its index among the threads that share its row, and the row. How many
// threads share it stays in the kernel (`WARP_ROW ? 32 : blockDim.x`): written there it is a
// constant in warp mode, so the compiler unrolls the loops over a row's vectors.
struct RowThread {
  int tid;
  int64_t row;
};

template <bool WARP_ROW>
__device__ __forceinline__ RowThread row_thread() {
  const int tid = WARP_ROW ? (threadIdx.x & 31) : threadIdx.x;
  const int64_t row = WARP_ROW ? int64_t(blockIdx.x) * kWarpRows + (threadIdx.x >> 5) : int64_t(blockIdx.x);
  return {tid, row};
}

// A row that fits in registers (nvec <= lanes * kItems vectors, `lanes` threads to the row): a thread's
// share is its items, the vectors tid + i * lanes for i < kItems that lie in the row, kept in buf[i].
// Each walk is unrolled over the items, so buf stays in registers.

// Load this thread's items of row `xr` into buf, calling f(value) on each element loaded.
template <typename T, int VEC, typename F>
__device__ __forceinline__ void load_row_items(const T* __restrict__ xr, int tid, int lanes, int nvec,
                                               float (&buf)[kItems][VEC], F&& f) {
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = tid + i * lanes;
    if (idx < nvec) {
      load_vec<T, VEC>(xr, idx, buf[i]);
#pragma unroll
      for (int k = 0; k < VEC; ++k) f(buf[i][k]);
    }
  }
}

// f(element&) on each element of this thread's items, to read or change it in place.
template <int VEC, typename F>
__device__ __forceinline__ void update_row_items(int tid, int lanes, int nvec, float (&buf)[kItems][VEC], F&& f) {
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (tid + i * lanes < nvec) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) f(buf[i][k]);
    }
  }
}

// f(idx, item) on each of this thread's items (its vector index, its VEC values to finish in place),
// then the item stored at that index of row `yr`.
template <typename T, int VEC, typename F>
__device__ __forceinline__ void store_row_items(T* __restrict__ yr, int tid, int lanes, int nvec,
                                                float (&buf)[kItems][VEC], F&& f) {
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = tid + i * lanes;
    if (idx < nvec) {
      f(idx, buf[i]);
      store_vec<T, VEC>(yr, idx, buf[i]);
    }
  }
}

// A longer row, streamed from memory: f(idx, v) on each of this thread's vectors of row `xr` in turn
// (vector index tid, tid + lanes, ...; v its VEC values as floats), unrolled 4 deep so several loads
// are in flight per thread.
template <typename T, int VEC, typename F>
__device__ __forceinline__ void stream_row(const T* __restrict__ xr, int tid, int lanes, int nvec, F&& f) {
#pragma unroll 4
  for (int idx = tid; idx < nvec; idx += lanes) {
    float v[VEC];
    load_vec<T, VEC>(xr, idx, v);
    f(idx, v);
  }
}

// How to launch a row kernel over `rows` rows of `nvec` vectors: up to 32 * kItems vectors a row
// fits one warp's registers (warp_rows); a longer row gets a block of about nvec / kItems threads,
// a multiple of 32 from 128 to max_threads.
struct RowGrid {
  bool warp_rows;
  unsigned blocks;
  int threads;
};

inline RowGrid row_grid(int64_t rows, int nvec, int max_threads = 1024) {
  if (nvec <= 32 * kItems) return {true, unsigned((rows + kWarpRows - 1) / kWarpRows), 32 * kWarpRows};
  int threads = (nvec + kItems - 1) / kItems;
  threads = ((threads + 31) / 32) * 32;
  threads = threads < 128 ? 128 : (threads > max_threads ? max_threads : threads);
  return {false, unsigned(rows), threads};
}

}  // namespace ak

// The layout the row-wise starters share (softmax, rmsnorm, layernorm, reduce, cross_entropy): a
// narrow row is owned by one warp, kWarpRows rows to a block; a wide row by a whole block. A kernel
// asks `row_thread` where its thread stands, a launcher asks `row_grid` which layout and how many
// threads. One copy for every source (kernels/cuda_build.py puts this folder on the include path).
#pragma once

#include <cuda_runtime.h>
#include <cstdint>

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

// Just enough CUDA, emulated on the CPU, to run the starters' kernels on a machine without a GPU
// (tests/test_cuda_emulated.py). One std::thread per thread of a block; the grid's blocks run one after
// another on that team, so
// __shared__ becomes `static`; __syncthreads and warp collectives are std::barrier waits (a thread that
// returns early drops out of both barriers); a WMMA fragment holds its whole 16x16 tile in every lane
// and mma_sync multiplies in fp32, as tensor cores accumulate. Kernel launches (<<<...>>>) and
// `extern __shared__` arrays are rewritten to emu::launch / emu::dyn_smem by the test before compiling.
// What it cannot catch: races the barriers happen to hide, alignment faults, real fragment layouts,
// register or shared-memory limits. Those are for the GPU (python -m autokernel.kernels.cuda_selfcheck).
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>
#include <algorithm>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define CUDART_INF_F INFINITY
#define CUDART_NAN_F NAN

struct dim3 { unsigned x = 1, y = 1, z = 1; dim3() = default; dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
typedef void* cudaStream_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "emu"; }
template <class F> cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }

struct __half { _Float16 v; };
struct __nv_bfloat16 { uint16_t bits; };
inline float __half2float(__half h) { return float(h.v); }
inline __half __float2half_rn(float f) { return __half{(_Float16)f}; }
inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = uint32_t(b.bits) << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return {uint16_t(0x7fc0)};
  u += 0x7fff + ((u >> 16) & 1);
  return {uint16_t(u >> 16)};
}
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
template <class T> inline T min(T a, T b) { return a < b ? a : b; }
template <class T> inline T max(T a, T b) { return a > b ? a : b; }

namespace emu {
struct Warp { std::barrier<> bar{32}; float fbuf[32]; int ibuf[32]; };
struct Ctx { dim3 tid, bid, bdim, gdim; std::barrier<>* block; Warp* warp; };
inline thread_local Ctx ctx;
inline std::vector<unsigned char>& dyn() { static std::vector<unsigned char> b; return b; }
inline unsigned char* dyn_smem() { return dyn().data(); }

// Runs every block of the grid on one team of blockDim threads (blocks one after another), so a launch
// creates its threads once. Each block gets fresh barriers: a thread that returns early drops out of
// its block's and its warp's barrier; the team then meets on `team` before the next block.
template <class F, class... A>
void launch(F kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t, A... args) {
  const unsigned n = block.x * block.y * block.z, warps = (n + 31) / 32;
  const unsigned blocks = grid.x * grid.y * grid.z;
  dyn().assign(smem + 256, 0);
  std::barrier<> team(n);
  std::unique_ptr<std::barrier<>> bar;
  std::vector<std::unique_ptr<Warp>> warp_state(warps);
  auto fresh = [&] {  // called by thread 0 while the team waits
    bar.reset(new std::barrier<>(n));
    for (auto& w : warp_state) w.reset(new Warp());
  };
  fresh();
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      for (unsigned b = 0; b < blocks; ++b) {
        ctx = Ctx{dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y)),
                  dim3(b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y)), block, grid, bar.get(),
                  warp_state[t / 32].get()};
        kernel(args...);
        ctx.warp->bar.arrive_and_drop();
        ctx.block->arrive_and_drop();
        team.arrive_and_wait();  // everyone is done with this block's barriers
        if (t == 0 && b + 1 < blocks) fresh();
        team.arrive_and_wait();  // the next block's barriers exist
      }
    });
  for (auto& th : threads) th.join();
}
}  // namespace emu

#define threadIdx (::emu::ctx.tid)
#define blockIdx (::emu::ctx.bid)
#define blockDim (::emu::ctx.bdim)
#define gridDim (::emu::ctx.gdim)
inline void __syncthreads() { ::emu::ctx.block->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::emu::ctx.warp->bar.arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int m) {
  auto* w = ::emu::ctx.warp; int lane = threadIdx.x & 31;
  w->fbuf[lane] = v; w->bar.arrive_and_wait(); float r = w->fbuf[lane ^ m]; w->bar.arrive_and_wait(); return r;
}
inline float __shfl_sync(unsigned, float v, int src) {
  auto* w = ::emu::ctx.warp; int lane = threadIdx.x & 31;
  w->fbuf[lane] = v; w->bar.arrive_and_wait(); float r = w->fbuf[src]; w->bar.arrive_and_wait(); return r;
}
inline bool __all_sync(unsigned, bool p) {
  auto* w = ::emu::ctx.warp; int lane = threadIdx.x & 31;
  w->ibuf[lane] = p; w->bar.arrive_and_wait(); bool all = true; for (int i = 0; i < 32; ++i) all = all && w->ibuf[i];
  w->bar.arrive_and_wait(); return all;
}

namespace nvcuda { namespace wmma {
struct row_major {}; struct col_major {}; struct matrix_a {}; struct matrix_b {}; struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment { float x[256]; };
inline float tof(float v) { return v; }
inline float tof(__half v) { return __half2float(v); }
inline float tof(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class U, class T, class L> void fill_fragment(fragment<U, 16, 16, 16, T, L>& f, float v) { for (auto& e : f.x) e = v; }
template <class T> void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, row_major>& f, const T* p, unsigned ld) {
  __syncwarp(); for (int i = 0; i < 16; ++i) for (int k = 0; k < 16; ++k) f.x[i * 16 + k] = tof(p[i * ld + k]); __syncwarp(); }
template <class T> void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, row_major>& f, const T* p, unsigned ld) {
  __syncwarp(); for (int k = 0; k < 16; ++k) for (int n = 0; n < 16; ++n) f.x[k * 16 + n] = tof(p[k * ld + n]); __syncwarp(); }
template <class T> void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, col_major>& f, const T* p, unsigned ld) {
  __syncwarp(); for (int k = 0; k < 16; ++k) for (int n = 0; n < 16; ++n) f.x[k * 16 + n] = tof(p[n * ld + k]); __syncwarp(); }
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ld, layout_t) {
  __syncwarp(); for (int i = 0; i < 16; ++i) for (int j = 0; j < 16; ++j) f.x[i * 16 + j] = p[i * ld + j]; __syncwarp(); }
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ld, layout_t) {
  __syncwarp(); if ((threadIdx.x & 31) == 0) for (int i = 0; i < 16; ++i) for (int j = 0; j < 16; ++j) p[i * ld + j] = f.x[i * 16 + j]; __syncwarp(); }
template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int i = 0; i < 16; ++i) for (int j = 0; j < 16; ++j) { float s = c.x[i * 16 + j]; for (int k = 0; k < 16; ++k) s += a.x[i * 16 + k] * b.x[k * 16 + j]; out[i * 16 + j] = s; }
  std::memcpy(d.x, out, sizeof out);
}
}}  // namespace nvcuda::wmma

// Hopper (sm_90a) building blocks for the CUDA C++ starters and candidates: shared-memory addresses,
// mbarriers, bulk tensor copies (TMA), wgmma's shared-memory descriptors and fences, and 128-byte-
// swizzled tensor maps. One copy for every source: kernels/cuda_build.py puts this folder on the
// include path of every build and folds its files into the build's cache key.
//
// Include it only when building for sm_90a (AUTOKERNEL_SM90A, defined with that target). The wgmma
// wrappers cover the shapes the starters use (m64n256k16 and m64n128k16 from shared memory, m64n64k16
// and m64n128k16 with A in registers); a candidate needing another shape writes its own the same way.
#pragma once

#include <cuda.h>          // CUtensorMap and its enums (header only: nothing links against libcuda)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <type_traits>

namespace ak_hopper {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// --- mbarriers: a stage is "full" when its copies have landed, "empty" when its readers are done ---
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// After every mbar_init, before the barriers are used by other threads (then a __syncthreads).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Arrive once and add `bytes` to the transaction count the copies will complete.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Spin until the phase with this parity has completed (a fresh barrier counts parity 1 as completed).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// --- bulk tensor copies: one box of a tensor map into shared memory, counted on `bar` ---
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// --- wgmma ---
// The shared-memory descriptor of a 128-byte-swizzled tile: start address, leading and stride byte
// offsets (each in 16-byte units), swizzle mode 1 (128 B) in bits 62-63. K-major tiles of 64 two-byte
// columns: lead 16 (unused), stride 1024 (8 rows of 128 B), a k16 step is +32 bytes of start address.
// MN-major: lead = the distance between 64-column boxes, stride 1024, a k16 step is +16 rows (2048 B).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lead_bytes, uint32_t stride_bytes) {
  return uint64_t((addr & 0x3FFFF) >> 4) | uint64_t(lead_bytes >> 4) << 16 | uint64_t(stride_bytes >> 4) << 32 |
         uint64_t(1) << 62;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Wait until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of these registers across an asynchronous wgmma.
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// --- wgmma instructions: fp32 accumulators, fp16 or bf16 operands (T = __half or __nv_bfloat16) ---
// The accumulator layout of m64nNk16: warp w of the warpgroup holds rows 16 w + lane / 4 and + 8;
// d[4 j + 0..1] are columns 8 j + 2 (lane % 4) + 0..1 of the first row, d[4 j + 2..3] of the second.

// The accumulator operands of the wgmma instructions below, d[0] to d[N - 1] for N = 32, 64 or 128: their
// place holders for the asm text ("%0, %1, ...") and the matching read-write outputs ("+f"(d[i])).
#define AK_ACC_TEXT_32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define AK_ACC_TEXT_64 AK_ACC_TEXT_32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define AK_ACC_TEXT_128 AK_ACC_TEXT_64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define AK_ACC8(i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define AK_ACC_32 AK_ACC8(0), AK_ACC8(8), AK_ACC8(16), AK_ACC8(24)
#define AK_ACC_64 AK_ACC_32, AK_ACC8(32), AK_ACC8(40), AK_ACC8(48), AK_ACC8(56)
#define AK_ACC_128 AK_ACC_64, AK_ACC8(64), AK_ACC8(72), AK_ACC8(80), AK_ACC8(88), AK_ACC8(96), AK_ACC8(104), \
  AK_ACC8(112), AK_ACC8(120)

#define AK_WGMMA_M64N256K16(TYPE)                                                   \
  asm volatile(                                                                     \
      "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"                              \
      " wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {"              \
      AK_ACC_TEXT_128                                                                 \
      "}, %128, %129, p, 1, 1, 0, %131;\n}\n"                                         \
      : AK_ACC_128                                                                    \
      : "l"(a), "l"(b), "r"(1), "n"(TRANS_B))

// d[64 x 256] += A[64 x 16] . B[16 x 256], both from shared memory; TRANS_B = 1 reads B N-major.
template <typename T, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t a, uint64_t b) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    AK_WGMMA_M64N256K16("bf16");
  } else {
    AK_WGMMA_M64N256K16("f16");
  }
}
#undef AK_WGMMA_M64N256K16

#define AK_WGMMA_SS_M64N128K16(TYPE)                                                            \
  asm volatile(                                                                                 \
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"                                            \
      " wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"                        \
      AK_ACC_TEXT_64                                                                            \
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                                        \
      : AK_ACC_64                                                                               \
      : "l"(a), "l"(b), "r"(accumulate))

// d[64 x 128] (+)= A[64 x 16] . B[16 x 128], both K-major in shared memory; accumulate = 0 overwrites d.
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    AK_WGMMA_SS_M64N128K16("bf16");
  } else {
    AK_WGMMA_SS_M64N128K16("f16");
  }
}

#define AK_WGMMA_RS_M64N128K16(TYPE)                                                            \
  asm volatile(                                                                                 \
      "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"                                            \
      " wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"                        \
      AK_ACC_TEXT_64                                                                            \
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                          \
      : AK_ACC_64                                                                               \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))

#define AK_WGMMA_RS_M64N64K16(TYPE)                                                             \
  asm volatile(                                                                                 \
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"                                            \
      " wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {"                         \
      AK_ACC_TEXT_32                                                                            \
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                          \
      : AK_ACC_32                                                                               \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))

// d[64 x N] += A[64 x 16] . B[16 x N]: A in registers (four 32-bit pairs per thread, the layout of an
// fp32 accumulator's k16 slice packed two by two), B N-major in shared memory.
template <typename T, int N>
__device__ __forceinline__ void wgmma_m64nNk16_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  static_assert(N == 64 || N == 128, "the shapes the starters use; add others as needed");
  if constexpr (N == 128) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
      AK_WGMMA_RS_M64N128K16("bf16");
    } else {
      AK_WGMMA_RS_M64N128K16("f16");
    }
  } else {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
      AK_WGMMA_RS_M64N64K16("bf16");
    } else {
      AK_WGMMA_RS_M64N64K16("f16");
    }
  }
}
#undef AK_WGMMA_SS_M64N128K16
#undef AK_WGMMA_RS_M64N128K16
#undef AK_WGMMA_RS_M64N64K16
#undef AK_ACC_TEXT_32
#undef AK_ACC_TEXT_64
#undef AK_ACC_TEXT_128
#undef AK_ACC8
#undef AK_ACC_32
#undef AK_ACC_64
#undef AK_ACC_128

// --- host side ---
// cuTensorMapEncodeTiled, fetched from the driver at run time; null when the driver lacks it.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

// A tensor map of 2-byte elements (T = __half or __nv_bfloat16): `rank` dimensions, innermost first,
// pitches in bytes for dimensions 1.., boxes of `box` elements, 128-byte swizzled, zeros outside.
// False when the driver or the operands (alignment, pitches, box) do not allow it.
template <typename T>
bool sw128_tensor_map(CUtensorMap* map, const T* base, cuuint32_t rank, const cuuint64_t* dims,
                      const cuuint64_t* pitches, const cuuint32_t* box) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint32_t unit[3] = {1, 1, 1};
  const CUtensorMapDataType type =
      std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode(map, type, rank, const_cast<T*>(base), dims, pitches, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Whether the current device is the chip an sm_90a build runs on.
inline bool device_is_sm90() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

}  // namespace ak_hopper

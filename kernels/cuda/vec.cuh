// Helpers shared by the element-wise, row and attention kernels: a 16-byte vector of elements for
// wide loads and stores, rounding from fp32 to the element type, and asynchronous 16-byte copies
// from global to shared memory (cp.async, sm_80 and later).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace fp8rt::cuda_detail {

template <typename T, int kPack>
struct alignas(sizeof(T) * kPack) Pack {
  T v[kPack];
};

template <typename T>
__device__ __forceinline__ T Round(float x);
template <>
__device__ __forceinline__ float Round<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 Round<bf16>(float x) {
  bf16 r;
  r.bits = __bfloat16_as_ushort(__float2bfloat16_rn(x));
  return r;
}

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously, bypassing L1; zero-filled when !valid.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid = true) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// A read-only 16-byte vector in one load. Unpacking a Pack straight from global memory lets the
// compiler split it into four 4-byte loads (it did in LayerNorm's weight and bias reads).
template <typename P>
__device__ __forceinline__ P LoadVector(const P* p) {
  if constexpr (sizeof(P) == 16) {
    const int4 r = __ldg(reinterpret_cast<const int4*>(p));
    return *reinterpret_cast<const P*>(&r);
  } else {
    return *p;
  }
}

// Streaming (evict-first) accesses of 16-byte vectors this kernel touches once; other sizes plain.
// An output stored this way may leave the L2 before the next kernel reads it: LayerNorm's
// outputs are, and training throughput at gpt-1.3b still rose (62.2K -> 64.6K tok/s in BF16).
template <typename P>
__device__ __forceinline__ P LoadStreaming(const P* p) {
  if constexpr (sizeof(P) == 16) {
    const int4 r = __ldcs(reinterpret_cast<const int4*>(p));
    return *reinterpret_cast<const P*>(&r);
  } else {
    return *p;
  }
}
template <typename P>
__device__ __forceinline__ void StoreStreaming(P* p, const P& v) {
  if constexpr (sizeof(P) == 16) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&v));
  } else {
    *p = v;
  }
}

}  // namespace fp8rt::cuda_detail

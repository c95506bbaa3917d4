// The pieces LayerNorm's forward (layernorm_fwd.cu) and backward (layernorm_bwd.cu) share: the
// warp butterfly sum, 16-byte vectors to fp32 and back, and the vector width a launch picks.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/vec.cuh"
#include "kernels/dtype.h"

namespace fp8rt::cuda_detail {

// Butterfly sum: every lane ends with the same bits (fp addition is commutative).
__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// A 16-byte vector to fp32 and back. bf16 pairs unpack with one shift or mask each: LayerNorm
// is bound by instruction issue once its loads are in flight, and the generic per-element
// conversion costs about twice that.
template <typename T, int kPack>
__device__ __forceinline__ void Unpack(const Pack<T, kPack>& p, float (&f)[kPack]) {
  if constexpr (std::is_same_v<T, bf16> && kPack % 2 == 0) {
    const uint32_t* u = reinterpret_cast<const uint32_t*>(&p);
#pragma unroll
    for (int i = 0; i < kPack / 2; ++i) {
      f[2 * i] = __uint_as_float(u[i] << 16);
      f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kPack; ++j) f[j] = ToFloat(p.v[j]);
  }
}

template <typename T, int kPack>
__device__ __forceinline__ Pack<T, kPack> Repack(const float (&f)[kPack]) {
  Pack<T, kPack> p;
  if constexpr (std::is_same_v<T, bf16> && kPack % 2 == 0) {
    uint32_t* u = reinterpret_cast<uint32_t*>(&p);
#pragma unroll
    for (int i = 0; i < kPack / 2; ++i) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      u[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kPack; ++j) p.v[j] = Round<T>(f[j]);
  }
  return p;
}

// The elements per vector a launch takes: 16 bytes' worth where C and every pointer allow, else 1.
template <typename T>
int PackFor(int64_t C, std::initializer_list<const void*> ptrs) {
  constexpr int kPack = 16 / sizeof(T);
  if (C % kPack != 0) return 1;
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return 1;
  }
  return kPack;
}

}  // namespace fp8rt::cuda_detail

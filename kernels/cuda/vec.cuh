// Helpers shared by the element-wise and row kernels: a 16-byte vector of elements for wide
// loads and stores, and rounding from fp32 to the element type.
#pragma once

#include <cuda_bf16.h>

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

}  // namespace fp8rt::cuda_detail

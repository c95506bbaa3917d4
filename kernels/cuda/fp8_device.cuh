// Device-side FP8 conversion used by every kernel that casts: the hardware's
// cvt.rn.satfinite instructions on sm_89+, CUDA's bit-exact emulation below that.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/dtype.h"

namespace fp8rt::cuda_detail {

template <Fp8Format F>
constexpr __nv_fp8_interpretation_t Interp() {
  return F == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
}

template <Fp8Format F>
__device__ __forceinline__ uint8_t Encode(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, Interp<F>());
}

// Two values in one instruction; `lo` lands in the low byte.
template <Fp8Format F>
__device__ __forceinline__ uint16_t Encode2(float lo, float hi) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, Interp<F>());
}

template <Fp8Format F>
__device__ __forceinline__ float Decode(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, Interp<F>())));
}

template <Fp8Format F>
__device__ __forceinline__ float2 Decode2(uint16_t codes) {
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(codes, Interp<F>())));
}

__device__ __forceinline__ float LoadF(const float* p) { return *p; }
__device__ __forceinline__ float LoadF(const bf16* p) {
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
}
__device__ __forceinline__ void StoreF(float* p, float v) { *p = v; }
__device__ __forceinline__ void StoreF(bf16* p, float v) {
  *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(v);
}

// Calls body.template operator()<F>() with F a compile-time format.
template <typename Body>
decltype(auto) DispatchFp8(Fp8Format f, Body&& body) {
  if (f == Fp8Format::kE4M3) return body.template operator()<Fp8Format::kE4M3>();
  return body.template operator()<Fp8Format::kE5M2>();
}

}  // namespace fp8rt::cuda_detail

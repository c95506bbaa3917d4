// The tanh-GELU and its derivative in fp32, shared by the GELU kernels and the FP8 cast that
// fuses the GELU backward (the same bits either way). Sigmoid form: 0.5 (1 + tanh(u)) =
// 1 / (1 + exp(-2u)), which has no cancellation for x < 0.
#pragma once

namespace fp8rt::cuda_detail {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// tanh-GELU's argument u = sqrt(2/pi) (x + 0.044715 x^3), shared by the four forms below.
__device__ __forceinline__ float GeluArg(float x) {
  return kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
}

__device__ __forceinline__ float GeluF(float x) {
  const float u = GeluArg(x);
  return x / (1.0f + expf(-2.0f * u));  // x * sigmoid(2u); expf overflow gives -0, not NaN
}

// The same function from the hardware's approximate exp2 and reciprocal (a few ulp of fp32, far
// below a bf16 rounding; for x below about -44, where 1 + e passes 2^126, __fdividef gives -0
// where the exact form gives a value of about -1e-37): the FP8 casts that fuse the GELU (FC2's
// input) are bound by the exact form's instructions. Used where the result is rounded to bf16;
// the GELU kernel and those casts share it, so their results are the same bits.
__device__ __forceinline__ float GeluFastF(float x) {
  const float u = GeluArg(x);
  return __fdividef(x, 1.0f + __expf(-2.0f * u));
}

// GELU for a result stored as T: the fast form for bf16, the exact one for fp32. The GELU kernel
// and the casts that fuse it use this one function, so their results are the same bits.
template <typename T>
__device__ __forceinline__ float GeluFor(float x) {
  if constexpr (sizeof(T) == 2) {
    return GeluFastF(x);
  } else {
    return GeluF(x);
  }
}

__device__ __forceinline__ float GeluGradF(float x) {
  const float u = GeluArg(x);
  const float e = expf(-2.0f * u);
  const float s = 1.0f / (1.0f + e);  // sigmoid(2u) = 0.5 (1 + tanh(u))
  // d/dx [x sigmoid(2u)] = s + 2 x s (1 - s) u', with 1 - s = e s kept exact for large x. For
  // e = inf (very negative x), s = 0 and the product e * s is skipped: the gradient is 0.
  const float s_1ms = e < 3.0e38f ? e * s * s : 0.0f;
  const float du = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return s + 2.0f * x * s_1ms * du;
}

// The same derivative from the hardware's approximate exp2 and reciprocal (a few ulp of fp32,
// far below a bf16 rounding): about half the instructions, which is what the FP8 cast that
// fuses the GELU backward is bound by. Used where the result is rounded to bf16.
__device__ __forceinline__ float GeluGradFastF(float x) {
  const float u = GeluArg(x);
  const float e = __expf(-2.0f * u);
  const float s = __fdividef(1.0f, 1.0f + e);  // 0 for e = inf (divisor beyond 2^126)
  const float s_1ms = e < 3.0e38f ? e * s * s : 0.0f;
  const float du = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return s + 2.0f * x * s_1ms * du;
}

// GELU' for a result stored as T: the fast form for bf16, the exact one for fp32.
template <typename T>
__device__ __forceinline__ float GeluGradFor(float x) {
  if constexpr (sizeof(T) == 2) {
    return GeluGradFastF(x);
  } else {
    return GeluGradF(x);
  }
}

}  // namespace fp8rt::cuda_detail

// LayerNorm over the last dimension with FP32 statistics: forward (saving mean and 1/std for the
// backward; its output in T or, cast in the same pass, as FP8 codes) and backward (input gradient
// plus accumulated weight/bias gradients).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/stream.h"

namespace fp8rt {

// Semantics (CPU and CUDA), rows n of (N, C):
//   mean[n] = sum_c x / C,  rstd[n] = 1 / sqrt(sum_c (x - mean)^2 / C + eps)   (biased variance)
//   out[n][c] = (x[n][c] - mean[n]) * rstd[n] * weight[c] + bias[c]
// Backward, with xhat = (x - mean) * rstd from the saved statistics and g = dout * weight:
//   din[n][c]  (=, or += when accumulate_din) rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
//   dweight[c] += sum_n dout * xhat,  dbias[c] += sum_n dout
// accumulate_din adds into din: the residual stream's gradient flows through din. Statistics and
// all arithmetic are FP32 on the GPU (FP64 in the CPU reference), each output rounded once.
// mean and rstd may both be null in the forward (inference); the backward needs them.
// din must not alias dout or in.
//
// CUDA: the forward takes any C; the backward takes C <= 16384. Every forward kernel computes
// out = T(fmaf((x - mean) * rstd, weight, bias)) in fp32 from the mean and rstd it saves, which
// cuda::QuantizeLayerNorm (kernels/quantize.h) recomputes bit for bit. dweight/dbias are reduced
// with per-block partial sums (in scratch) added in a fixed order: bit-identical run to run.
//
// LayerNormForwardFp8: the forward with its output cast to FP8 as it is stored, for an FP8
// linear whose input is needed only as row-major codes (the norm's T output is never written).
// Exactly LayerNormForward(y, mean, rstd, in, weight, bias, N, C, eps) into a temporary y, then
// Quantize(y, out) (kernels/quantize.h) with out.data alone: the same mean and rstd;
//   out.data[n][c] = Fp8Encode(float(y[n][c]) * *out.scale, out.format), y rounded to T first;
//   *out.amax = max(*out.amax, max |y|) when out.amax is set (the bit-pattern max: NaN kept);
//   *saturated += Quantize's count, when saturated is set; *out.scale_inv = 1 / *out.scale.
// out is (N, C) with out.data set and out.data_t null (InvalidArgument naming the op otherwise,
// as for the forward's own arguments). N == 0 writes scale_inv alone. The CPU composes the two
// references. CUDA: the forward's kernel (the variant LayerNormForward picks for in, weight and
// bias with a 16-byte aligned output, whatever out.data's alignment) with the cast in its store;
// bit for bit cuda::LayerNormForward then cuda::Quantize, in one launch.

namespace cpu {
// Instantiated for T in {float, bf16, double}.
template <typename T>
Status LayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* weight,
                        const T* bias, int64_t N, int64_t C, float eps);
template <typename T>
Status LayerNormForwardFp8(const Fp8Tensor& out, float* mean, float* rstd, const T* in,
                           const T* weight, const T* bias, int64_t N, int64_t C, float eps,
                           uint64_t* saturated = nullptr);
template <typename T>
Status LayerNormBackward(T* din, float* dweight, float* dbias, const T* dout, const T* in,
                         const T* weight, const float* mean, const float* rstd, int64_t N,
                         int64_t C, bool accumulate_din);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Largest C LayerNormBackward takes.
inline constexpr int64_t kLayerNormBackwardMaxC = 16384;
// Scratch bytes LayerNormBackward needs for an (N, C) input (the per-block partial sums).
size_t LayerNormBackwardScratchBytes(int64_t N, int64_t C);

// Instantiated for T in {float, bf16}. Device pointers.
template <typename T>
Status LayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* weight,
                        const T* bias, int64_t N, int64_t C, float eps, cudaStream_t stream);
// saturated: a device counter, may be null.
template <typename T>
Status LayerNormForwardFp8(const Fp8Tensor& out, float* mean, float* rstd, const T* in,
                           const T* weight, const T* bias, int64_t N, int64_t C, float eps,
                           unsigned long long* saturated, cudaStream_t stream);
// scratch: at least LayerNormBackwardScratchBytes(N, C) bytes, 16-byte aligned.
template <typename T>
Status LayerNormBackward(T* din, float* dweight, float* dbias, const T* dout, const T* in,
                         const T* weight, const float* mean, const float* rstd, int64_t N,
                         int64_t C, bool accumulate_din, void* scratch, size_t scratch_bytes,
                         cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt

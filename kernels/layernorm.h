// LayerNorm over the last dimension with FP32 statistics: forward (saving mean and 1/std for the
// backward) and backward (input gradient plus accumulated weight/bias gradients).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
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

namespace cpu {
// Instantiated for T in {float, bf16, double}.
template <typename T>
Status LayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* weight,
                        const T* bias, int64_t N, int64_t C, float eps);
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
// scratch: at least LayerNormBackwardScratchBytes(N, C) bytes, 16-byte aligned.
template <typename T>
Status LayerNormBackward(T* din, float* dweight, float* dbias, const T* dout, const T* in,
                         const T* weight, const float* mean, const float* rstd, int64_t N,
                         int64_t C, bool accumulate_din, void* scratch, size_t scratch_bytes,
                         cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt

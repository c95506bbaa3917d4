// RMSNorm over the last dimension with FP32 statistics (Llama's norm): forward (saving 1/rms for
// the backward; its output in T or, cast in the same pass, as FP8 codes) and backward (input
// gradient plus the accumulated weight gradient).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/stream.h"

namespace fp8rt {

// Semantics (CPU and CUDA), rows n of (N, C):
//   rstd[n] = 1 / sqrt(sum_c x^2 / C + eps),   out[n][c] = x[n][c] * rstd[n] * weight[c]
// Backward, with g = dout * weight:
//   din[n][c] (=, or += when accumulate_din) rstd * (g - x * rstd^2 * mean_c(g * x))
//   dweight[c] += sum_n dout * x * rstd
// Statistics and arithmetic FP32 on the GPU (FP64 in the CPU reference), each output rounded once.
// (transformers' LlamaRMSNorm rounds twice in BF16: the normalised value to the input's dtype,
// then its product with the weight; within a BF16 ulp of this.) rstd may be null in the forward
// (inference); the backward needs it. din must not alias dout or in.
// CUDA: out = T((x * rstd) * weight) in fp32 from the rstd it saves, which
// cuda::QuantizeLayerNorm (kernels/quantize.h) recomputes bit for bit. Deterministic (the weight
// gradient is summed over rows in a fixed order, no atomics: per-chunk partial sums in scratch,
// then added chunk by chunk).

// RmsNormForwardFp8: the forward with its output cast to FP8 as it is stored, exactly
// RmsNormForward(y, rstd, in, weight, N, C, eps) into a temporary y then Quantize(y, out) with
// out.data alone, as LayerNormForwardFp8 (kernels/layernorm.h) is LayerNorm's: the same rstd,
// the codes, amax, saturation and scale_inv of Quantize of the T-rounded y; out (N, C) with
// out.data set and out.data_t null (InvalidArgument naming the op otherwise). N * C == 0 writes
// scale_inv alone. CPU: the two references composed. CUDA: the forward's kernel with the cast in
// its store, bit for bit cuda::RmsNormForward then cuda::Quantize.

// The preconditions of both (InvalidArgument naming op otherwise): N, C >= 0, pointers non-null
// when N * C > 0 (rstd may be null when rstd_optional), eps >= 0.
Status ValidateRmsNorm(const char* op, int64_t N, int64_t C, float eps,
                       std::initializer_list<const void*> buffers, const float* rstd,
                       bool rstd_optional);

namespace cpu {
// Instantiated for T in {float, bf16, double}.
template <typename T>
Status RmsNormForward(T* out, float* rstd, const T* in, const T* weight, int64_t N, int64_t C,
                      float eps);
template <typename T>
Status RmsNormForwardFp8(const Fp8Tensor& out, float* rstd, const T* in, const T* weight, int64_t N,
                         int64_t C, float eps, uint64_t* saturated = nullptr);
template <typename T>
Status RmsNormBackward(T* din, float* dweight, const T* dout, const T* in, const T* weight,
                       const float* rstd, int64_t N, int64_t C, bool accumulate_din);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Scratch bytes RmsNormBackward needs for an (N, C) input (the weight gradient's partial sums).
size_t RmsNormBackwardScratchBytes(int64_t N, int64_t C);
// Instantiated for T in {float, bf16}. Device pointers; scratch of at least
// RmsNormBackwardScratchBytes(N, C) bytes.
template <typename T>
Status RmsNormForward(T* out, float* rstd, const T* in, const T* weight, int64_t N, int64_t C,
                      float eps, cudaStream_t stream);
// saturated: a device counter, may be null.
template <typename T>
Status RmsNormForwardFp8(const Fp8Tensor& out, float* rstd, const T* in, const T* weight, int64_t N,
                         int64_t C, float eps, unsigned long long* saturated, cudaStream_t stream);
template <typename T>
Status RmsNormBackward(T* din, float* dweight, const T* dout, const T* in, const T* weight,
                       const float* rstd, int64_t N, int64_t C, bool accumulate_din,
                       void* scratch, size_t scratch_bytes, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt

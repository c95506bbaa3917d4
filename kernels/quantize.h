// Casts between high precision (float, bf16) and FP8: quantize with fused amax, saturation count
// and transposed copy (and with the bias gradient, GELU backward, GELU forward or a norm's output
// fused in); dequantize; amax alone; and current scaling (amax -> scale -> quantize).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/stream.h"

namespace fp8rt {

// Semantics shared by the CPU reference and the CUDA kernels (bit-identical results):
//
// Quantize: in is (out.rows, out.cols) row-major. Reads *out.scale and writes
//   out.data[r][c] = Fp8Encode(x * scale, out.format), x = in[r][c] in fp32 (one multiply,
//   rounded once, then satfinite round-to-nearest-even);
//   out.data_t[c][r] = the same code, when out.data_t != nullptr (the (cols, rows) copy);
//   out.data may be null when out.data_t is not: a transposed-only cast (the dgrad operand of
//   a weight that is not kept between passes, fp8.cache_weights: false);
//   *out.amax = max(*out.amax, max |x|) of the unscaled input, when out.amax != nullptr. The max
//     is taken on the float bit patterns (as signed ints) of |x|, so a NaN input makes the amax
//     NaN (it is never dropped) and the result does not depend on the order of reduction;
//   *out.scale_inv = 1 / scale;
//   *saturated += the number of elements with |x * scale| > Fp8MaxFinite(format) (inf inputs
//     count; NaN inputs do not), when saturated != nullptr.
// Dequantize: out[r][c] = T(Fp8Decode(in.data[r][c]) * *in.scale_inv).
// ComputeAmax: *amax = max(*amax, max |in[i]|) over n elements, bit-pattern max as above.
// ScaleFromAmax: *scale = ComputeScale(*amax, *scale, Fp8MaxFinite(format), margin) (kept when
//   the amax is 0/inf/NaN): current scaling's middle step, for an amax that was reduced over
//   ranks between ComputeAmax and the cast (fp8.scaling: current under TP and ZeRO-1).
// QuantizeCurrentScaling: *out.amax = max |x| of this tensor (overwritten, not accumulated;
//   out.amax is required), ScaleFromAmax(out.amax, out.scale, ...), then Quantize.
//
// QuantizeDbias: Quantize (out.data_t required) and, from the same read of the input,
//   dbias[c] += sum over rows r of in[r][c] (the bias gradient when in is a layer's output
//   gradient). The CPU sums each column in double; the GPU in FP32 per 64-row tile, the tiles
//   added in order (deterministic). Codes, amax, saturation and scale_inv are Quantize's.
// QuantizeDbiasGeluGrad: QuantizeDbias of in[i] = GeluBackward's din[i] = T(dout[i] *
//   GELU'(pre[i])) (kernels/gelu.h), computed in the same pass: the GELU backward fused into the
//   cast of the gradient it produces. The CUDA version's codes equal those of cuda::GeluBackward
//   followed by cuda::QuantizeDbias. With pre_e4m3, pre[i] = Fp8Decode(pre_e4m3[i], E4M3) (scale
//   1: a GELU input saved in FP8, fp8.gelu_input_fp8), whose values T holds exactly: the result
//   is the T version's for those values, bit for bit.
//   With gelu_out (the T version only): also QuantizeGelu(pre, *gelu_out) from the same read of
//   pre, without telemetry: GELU's codes transposed (gelu_out.data null, data_t set) with
//   gelu_out's own scale and format, and its scale_inv; gelu_out.amax must be null (the
//   forward's cast of those values measured them). gelu_out has out's shape. The input of the
//   layer whose output gradient dout is (FC2's, under train.recompute) cast again in the pass
//   that reads its pre-activation anyway. The codes equal QuantizeGelu's, bit for bit.
// QuantizeGelu: Quantize of in[i] = T(GELU(pre[i])) (GeluForward's output, kernels/gelu.h),
//   computed in the same pass: FC2's FP8 input cast straight from FC's output in the forward
//   (out.data alone, the GEMM operand), or its transposed input recomputed from the saved
//   pre-activation in the backward (out.data_t alone). out.data or out.data_t, at least one.
//   Codes, amax (of the GELU output, when out.amax is set), saturation and scale_inv are
//   Quantize's of that input. The CUDA version's codes equal those of
//   cuda::GeluForward followed by cuda::Quantize, the CPU's those of cpu::GeluForward followed by
//   cpu::Quantize, bit for bit.
// QuantizeLayerNorm: Quantize of y, a norm's output recomputed from its input x = in (N rows of
//   C: out.rows x out.cols) and the forward's saved fp32 per-row statistics, in the same pass: an
//   FP8 layer's transposed input rebuilt in the backward from the saved residual stream, without
//   a T buffer. LayerNorm: y[r][c] = T(fmaf((x[r][c] - mean[r]) * rstd[r], weight[c], bias[c]))
//   in fp32, the output of cuda::LayerNormForward (every kernel variant) for the mean and rstd it
//   saved. RMSNorm (mean and bias null): y[r][c] = T(x[r][c] * rstd[r] * weight[c]), multiplied
//   left to right, the output of cuda::RmsNormForward for its rstd. out.data or out.data_t, at
//   least one. Codes, amax (of y), saturation and scale_inv are Quantize's of y: the CUDA
//   version's equal those of the CUDA forward followed by cuda::Quantize, bit for bit. This is
//   the CUDA forward's rounding, not cpu::LayerNormForward's (fp64 statistics): the CPU model
//   recomputes its norms with its own forward, not with cpu::QuantizeLayerNorm.
// Preconditions (InvalidArgument otherwise): rows, cols >= 0; data (Quantize, QuantizeGelu,
// QuantizeLayerNorm: data or data_t), scale, scale_inv non-null; scale_inv distinct from scale;
// data_t, when given, distinct from data; margin in 0..32; QuantizeLayerNorm: mean and bias both
// set or both null, and in, rstd, weight non-null for a non-empty tensor.
// Empty tensors only write scale_inv.

// The tensor preconditions above; op prefixes the message. transposed_only_ok: data may be null
// when data_t is not (Quantize's transposed-only cast).
Status ValidateFp8Tensor(const char* op, const Fp8Tensor& t, bool transposed_only_ok = false);
// QuantizeDbiasGeluGrad's gelu_out preconditions above (both backends), out being its out.
Status ValidateGeluOut(const char* op, const Fp8Tensor& out, const Fp8Tensor& gelu_out);
// QuantizeLayerNorm's preconditions above (both backends).
Status ValidateQuantizeLayerNorm(const void* in, const float* mean, const float* rstd,
                                 const void* weight, const void* bias, const Fp8Tensor& out);
// The FP8 output of an op that casts what it computes as it stores it (the norms' forwards,
// LayerNormForwardFp8 and RmsNormForwardFp8): the tensor preconditions above with data required
// for a non-empty tensor, data_t null, and the shape (rows, cols); op prefixes the message.
Status ValidateFp8RowMajorOutput(const char* op, const Fp8Tensor& out, int64_t rows, int64_t cols);

namespace cpu {
template <typename T>
Status Quantize(const T* in, const Fp8Tensor& out, uint64_t* saturated = nullptr);
template <typename T>
Status QuantizeDbias(const T* in, const Fp8Tensor& out, float* dbias,
                     uint64_t* saturated = nullptr);
template <typename T>
Status QuantizeDbiasGeluGrad(const T* dout, const T* pre, const Fp8Tensor& out, float* dbias,
                             uint64_t* saturated = nullptr, const Fp8Tensor* gelu_out = nullptr);
template <typename T>
Status QuantizeDbiasGeluGrad(const T* dout, const uint8_t* pre_e4m3, const Fp8Tensor& out,
                             float* dbias, uint64_t* saturated = nullptr);
template <typename T>
Status QuantizeGelu(const T* pre, const Fp8Tensor& out, uint64_t* saturated = nullptr);
// The formula above with std::fma on floats, then Quantize: the oracle of the CUDA version.
template <typename T>
Status QuantizeLayerNorm(const T* in, const float* mean, const float* rstd, const T* weight,
                         const T* bias, const Fp8Tensor& out, uint64_t* saturated = nullptr);
template <typename T>
Status Dequantize(const Fp8Tensor& in, T* out);
template <typename T>
Status ComputeAmax(const T* in, int64_t n, float* amax);
Status ScaleFromAmax(const float* amax, float* scale, Fp8Format format, int margin);
template <typename T>
Status QuantizeCurrentScaling(const T* in, const Fp8Tensor& out, int margin = 0,
                              uint64_t* saturated = nullptr);
// out (cols, rows) = the transpose of in (rows, cols), FP8 codes as bytes: the transposed copy
// of an FP8 tensor whose row-major codes were assembled elsewhere (ZeRO-1's all-gathered
// weights). out and in must not overlap.
Status TransposeFp8(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Instantiated for T in {float, bf16}. Device pointers; saturated is a device counter. No host
// synchronisation, no allocation. Quantize with data_t is one or two launches (interior tiles,
// then edge tiles); without data_t one. QuantizeCurrentScaling adds a memset of the amax, the
// amax pass and a one-thread scale kernel before it.
template <typename T>
Status Quantize(const T* in, const Fp8Tensor& out, unsigned long long* saturated,
                cudaStream_t stream);
// As cpu::TransposeFp8: one launch of 32 x 32 byte tiles through shared memory.
Status TransposeFp8(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols,
                    cudaStream_t stream);
// QuantizeDbias needs QuantizeDbiasScratchBytes(rows, cols) bytes of scratch (per-tile column
// sums); it adds one small launch after the cast+transpose.
size_t QuantizeDbiasScratchBytes(int64_t rows, int64_t cols);
template <typename T>
Status QuantizeDbias(const T* in, const Fp8Tensor& out, float* dbias,
                     unsigned long long* saturated, void* scratch, size_t scratch_bytes,
                     cudaStream_t stream);
// With gelu_out, one cast+transpose pass writes both tensors (see above).
template <typename T>
Status QuantizeDbiasGeluGrad(const T* dout, const T* pre, const Fp8Tensor& out, float* dbias,
                             unsigned long long* saturated, void* scratch, size_t scratch_bytes,
                             cudaStream_t stream, const Fp8Tensor* gelu_out = nullptr);
template <typename T>
Status QuantizeDbiasGeluGrad(const T* dout, const uint8_t* pre_e4m3, const Fp8Tensor& out,
                             float* dbias, unsigned long long* saturated, void* scratch,
                             size_t scratch_bytes, cudaStream_t stream);
// The cast+transpose kernel's one or two launches (with or without data_t), no scratch.
template <typename T>
Status QuantizeGelu(const T* pre, const Fp8Tensor& out, unsigned long long* saturated,
                    cudaStream_t stream);
// Likewise: the cast+transpose kernel reading x, the statistics, weight and bias.
template <typename T>
Status QuantizeLayerNorm(const T* in, const float* mean, const float* rstd, const T* weight,
                         const T* bias, const Fp8Tensor& out, unsigned long long* saturated,
                         cudaStream_t stream);
template <typename T>
Status Dequantize(const Fp8Tensor& in, T* out, cudaStream_t stream);
template <typename T>
Status ComputeAmax(const T* in, int64_t n, float* amax, cudaStream_t stream);
// One one-thread launch.
Status ScaleFromAmax(const float* amax, float* scale, Fp8Format format, int margin,
                     cudaStream_t stream);
template <typename T>
Status QuantizeCurrentScaling(const T* in, const Fp8Tensor& out, int margin,
                              unsigned long long* saturated, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt

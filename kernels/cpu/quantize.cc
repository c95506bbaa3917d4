// Reference quantize/dequantize/amax: plain loops with the scalar FP8 conversion of fp8.h, the
// oracle the CUDA kernels must match bit for bit.
#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/scaling.h"

namespace fp8rt {

Status ValidateFp8Tensor(const char* op, const Fp8Tensor& t, bool transposed_only_ok) {
  if (t.rows < 0 || t.cols < 0) {
    return Status::InvalidArgument(StrCat(op, ": shape (", t.rows, ", ", t.cols,
                                          ") has a negative dimension; rows, cols must be >= 0"));
  }
  if (t.scale == nullptr || t.scale_inv == nullptr) {
    return Status::InvalidArgument(StrCat(op, ": scale and scale_inv must not be null"));
  }
  if (t.numel() > 0 && t.data == nullptr && !(transposed_only_ok && t.data_t != nullptr)) {
    return Status::InvalidArgument(StrCat(op, ": data is null for a (", t.rows, ", ", t.cols,
                                          ") tensor", transposed_only_ok ? " (and so is data_t)" : ""));
  }
  if (t.scale == t.scale_inv) {
    return Status::InvalidArgument(StrCat(op, ": scale_inv must not alias scale"));
  }
  if (t.data_t != nullptr && t.data_t == t.data) {
    return Status::InvalidArgument(StrCat(op, ": data_t must not alias data"));
  }
  return Status::Ok();
}

Status ValidateQuantizeLayerNorm(const void* in, const float* mean, const float* rstd,
                                 const void* weight, const void* bias, const Fp8Tensor& out) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("QuantizeLayerNorm", out, /*transposed_only_ok=*/true));
  if ((mean == nullptr) != (bias == nullptr)) {
    return Status::InvalidArgument(
        StrCat("QuantizeLayerNorm: mean is ", mean == nullptr ? "null" : "set", " but bias is ",
               bias == nullptr ? "null" : "set", "; both set (LayerNorm) or both null (RMSNorm)"));
  }
  if (out.numel() > 0 && (in == nullptr || rstd == nullptr || weight == nullptr)) {
    return Status::InvalidArgument(
        StrCat("QuantizeLayerNorm: in, rstd and weight must be non-null for a (", out.rows, ", ",
               out.cols, ") tensor"));
  }
  return Status::Ok();
}

Status ValidateGeluOut(const char* op, const Fp8Tensor& out, const Fp8Tensor& gelu_out) {
  FP8RT_RETURN_IF_ERROR(
      ValidateFp8Tensor(StrCat(op, " (gelu_out)").c_str(), gelu_out, /*transposed_only_ok=*/true));
  if (gelu_out.data != nullptr || (gelu_out.numel() > 0 && gelu_out.data_t == nullptr)) {
    return Status::InvalidArgument(
        StrCat(op, ": gelu_out is written transposed only: its data must be null and data_t set"));
  }
  if (gelu_out.amax != nullptr) {
    return Status::InvalidArgument(
        StrCat(op,
               ": gelu_out.amax is set; the GELU output's amax is not taken here (the "
               "forward's cast measured it)"));
  }
  if (gelu_out.rows != out.rows || gelu_out.cols != out.cols) {
    return Status::InvalidArgument(StrCat(op, ": gelu_out is (", gelu_out.rows, ", ", gelu_out.cols,
                                          "); out is (", out.rows, ", ", out.cols, ")"));
  }
  const int64_t n = gelu_out.numel();
  const auto overlaps = [n](const uint8_t* a, const uint8_t* b) {
    return n > 0 && a != nullptr && b != nullptr && a < b + n && b < a + n;
  };
  if (overlaps(gelu_out.data_t, out.data) || overlaps(gelu_out.data_t, out.data_t)) {
    return Status::InvalidArgument(StrCat(op, ": gelu_out.data_t must not alias out's codes"));
  }
  if (gelu_out.scale_inv == out.scale_inv) {
    return Status::InvalidArgument(StrCat(op, ": gelu_out.scale_inv must not alias out's"));
  }
  return Status::Ok();
}

Status ValidateFp8RowMajorOutput(const char* op, const Fp8Tensor& out, int64_t rows, int64_t cols) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor(op, out));
  if (out.data_t != nullptr) {
    return Status::InvalidArgument(
        StrCat(op, ": data_t is set; this op writes the row-major codes (data) alone"));
  }
  if (out.rows != rows || out.cols != cols) {
    return Status::InvalidArgument(StrCat(op, ": out is (", out.rows, ", ", out.cols,
                                          "); the output is (", rows, ", ", cols, ")"));
  }
  return Status::Ok();
}

namespace cpu {
namespace {

// double inputs (finite-difference checks) are narrowed to fp32 first, like the casts' loads.
float AsFloat(float x) { return x; }
float AsFloat(bf16 x) { return ToFloat(x); }
float AsFloat(double x) { return static_cast<float>(x); }

// |x| as the signed int of its bit pattern: ordered like the values for every non-NaN, above
// +inf for NaN. The GPU reduces exactly these ints with atomicMax.
int32_t AbsBits(float x) { return static_cast<int32_t>(FloatBits(x) & 0x7fffffffu); }

void AccumulateAmax(float* amax, int32_t bits) {
  const int32_t cur = static_cast<int32_t>(FloatBits(*amax));
  *amax = BitsFloat(static_cast<uint32_t>(std::max(cur, bits)));
}

}  // namespace

template <typename T>
Status Quantize(const T* in, const Fp8Tensor& out, uint64_t* saturated) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("Quantize", out, /*transposed_only_ok=*/true));
  const int64_t rows = out.rows, cols = out.cols;
  if (out.numel() > 0 && in == nullptr) return Status::InvalidArgument("Quantize: in is null");
  const float scale = *out.scale;
  const float fp8_max = Fp8MaxFinite(out.format);
  int32_t amax_bits = 0;
  uint64_t sat = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float x = AsFloat(in[r * cols + c]);
      const float y = x * scale;
      const uint8_t q = Fp8Encode(y, out.format);
      if (out.data != nullptr) out.data[r * cols + c] = q;
      if (out.data_t != nullptr) out.data_t[c * rows + r] = q;
      amax_bits = std::max(amax_bits, AbsBits(x));
      sat += std::fabs(y) > fp8_max ? 1 : 0;
    }
  }
  if (out.amax != nullptr && out.numel() > 0) AccumulateAmax(out.amax, amax_bits);
  if (saturated != nullptr) *saturated += sat;
  *out.scale_inv = ScaleInv(scale);
  return Status::Ok();
}

template <typename T>
Status Dequantize(const Fp8Tensor& in, T* out) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("Dequantize", in));
  if (in.numel() > 0 && out == nullptr) return Status::InvalidArgument("Dequantize: out is null");
  const float* table = Fp8DecodeTable(in.format);
  const float scale_inv = *in.scale_inv;
  for (int64_t i = 0; i < in.numel(); ++i) out[i] = T(table[in.data[i]] * scale_inv);
  return Status::Ok();
}

template <typename T>
Status ComputeAmax(const T* in, int64_t n, float* amax) {
  if (n < 0) return Status::InvalidArgument(StrCat("ComputeAmax: n=", n, " must be >= 0"));
  if (amax == nullptr) return Status::InvalidArgument("ComputeAmax: amax is null");
  if (n > 0 && in == nullptr) return Status::InvalidArgument("ComputeAmax: in is null");
  if (n == 0) return Status::Ok();
  int32_t bits = 0;
  for (int64_t i = 0; i < n; ++i) bits = std::max(bits, AbsBits(AsFloat(in[i])));
  AccumulateAmax(amax, bits);
  return Status::Ok();
}

Status ScaleFromAmax(const float* amax, float* scale, Fp8Format format, int margin) {
  if (amax == nullptr || scale == nullptr) {
    return Status::InvalidArgument("ScaleFromAmax: amax and scale must be non-null");
  }
  if (margin < 0 || margin > 32) {
    return Status::InvalidArgument(StrCat("ScaleFromAmax: margin=", margin, " is outside 0..32"));
  }
  *scale = ComputeScale(*amax, *scale, Fp8MaxFinite(format), margin);
  return Status::Ok();
}

template <typename T>
Status QuantizeCurrentScaling(const T* in, const Fp8Tensor& out, int margin, uint64_t* saturated) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("QuantizeCurrentScaling", out));
  if (out.amax == nullptr) {
    return Status::InvalidArgument("QuantizeCurrentScaling: amax is null (it receives the amax)");
  }
  if (margin < 0 || margin > 32) {
    return Status::InvalidArgument(
        StrCat("QuantizeCurrentScaling: margin=", margin, " is outside 0..32"));
  }
  if (out.numel() > 0 && in == nullptr) {
    return Status::InvalidArgument("QuantizeCurrentScaling: in is null");
  }
  *out.amax = 0.0f;
  FP8RT_RETURN_IF_ERROR(ComputeAmax(in, out.numel(), out.amax));
  FP8RT_RETURN_IF_ERROR(ScaleFromAmax(out.amax, out.scale, out.format, margin));
  Fp8Tensor no_amax = out;  // the amax is already complete
  no_amax.amax = nullptr;
  return Quantize(in, no_amax, saturated);
}

template <typename T>
Status QuantizeDbias(const T* in, const Fp8Tensor& out, float* dbias, uint64_t* saturated) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("QuantizeDbias", out));
  if (out.data_t == nullptr) {
    return Status::InvalidArgument(
        "QuantizeDbias: out.data_t is null; the bias gradient rides on the cast+transpose pass");
  }
  if (dbias == nullptr) return Status::InvalidArgument("QuantizeDbias: dbias is null");
  FP8RT_RETURN_IF_ERROR(Quantize(in, out, saturated));
  for (int64_t c = 0; c < out.cols; ++c) {
    double sum = 0;
    for (int64_t r = 0; r < out.rows; ++r) sum += AsFloat(in[r * out.cols + c]);
    dbias[c] += static_cast<float>(sum);
  }
  return Status::Ok();
}

template <typename T>
Status QuantizeDbiasGeluGrad(const T* dout, const T* pre, const Fp8Tensor& out, float* dbias,
                             uint64_t* saturated, const Fp8Tensor* gelu_out) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("QuantizeDbiasGeluGrad", out));
  if (gelu_out != nullptr) {
    FP8RT_RETURN_IF_ERROR(ValidateGeluOut("QuantizeDbiasGeluGrad", out, *gelu_out));
  }
  const int64_t n = out.numel();
  if (n > 0 && (dout == nullptr || pre == nullptr)) {
    return Status::InvalidArgument("QuantizeDbiasGeluGrad: dout and pre must be non-null");
  }
  std::vector<T> in(static_cast<size_t>(n));
  if (n > 0) FP8RT_RETURN_IF_ERROR(GeluBackward(in.data(), pre, dout, n));
  FP8RT_RETURN_IF_ERROR(QuantizeDbias(in.data(), out, dbias, saturated));
  return gelu_out != nullptr ? QuantizeGelu(pre, *gelu_out, nullptr) : Status::Ok();
}

template <typename T>
Status QuantizeDbiasGeluGrad(const T* dout, const uint8_t* pre_e4m3, const Fp8Tensor& out,
                             float* dbias, uint64_t* saturated) {
  const int64_t n = out.numel();
  if (n > 0 && pre_e4m3 == nullptr) {
    return Status::InvalidArgument("QuantizeDbiasGeluGrad: dout and pre must be non-null");
  }
  std::vector<T> pre(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) pre[i] = T(Fp8Decode(pre_e4m3[i], Fp8Format::kE4M3));
  return QuantizeDbiasGeluGrad(dout, pre.data(), out, dbias, saturated);
}

template <typename T>
Status QuantizeGelu(const T* pre, const Fp8Tensor& out, uint64_t* saturated) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("QuantizeGelu", out, /*transposed_only_ok=*/true));
  const int64_t n = out.numel();
  if (n > 0 && pre == nullptr) return Status::InvalidArgument("QuantizeGelu: pre is null");
  std::vector<T> in(static_cast<size_t>(n));
  if (n > 0) FP8RT_RETURN_IF_ERROR(GeluForward(in.data(), pre, n));
  return Quantize(in.data(), out, saturated);
}

template <typename T>
Status QuantizeLayerNorm(const T* in, const float* mean, const float* rstd, const T* weight,
                         const T* bias, const Fp8Tensor& out, uint64_t* saturated) {
  FP8RT_RETURN_IF_ERROR(ValidateQuantizeLayerNorm(in, mean, rstd, weight, bias, out));
  const int64_t rows = out.rows, cols = out.cols;
  std::vector<T> y(static_cast<size_t>(out.numel()));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float x = AsFloat(in[r * cols + c]), w = AsFloat(weight[c]);
      const float v = mean != nullptr ? std::fma((x - mean[r]) * rstd[r], w, AsFloat(bias[c]))
                                      : x * rstd[r] * w;
      y[r * cols + c] = T(v);
    }
  }
  return Quantize(y.data(), out, saturated);
}

#define FP8RT_INSTANTIATE(T)                                                                     \
  template Status Quantize<T>(const T*, const Fp8Tensor&, uint64_t*);                            \
  template Status QuantizeDbiasGeluGrad<T>(const T*, const uint8_t*, const Fp8Tensor&, float*,   \
                                           uint64_t*);                                           \
  template Status QuantizeDbiasGeluGrad<T>(const T*, const T*, const Fp8Tensor&, float*,         \
                                           uint64_t*, const Fp8Tensor*);                         \
  template Status QuantizeDbias<T>(const T*, const Fp8Tensor&, float*, uint64_t*);               \
  template Status QuantizeGelu<T>(const T*, const Fp8Tensor&, uint64_t*);                        \
  template Status QuantizeLayerNorm<T>(const T*, const float*, const float*, const T*, const T*, \
                                       const Fp8Tensor&, uint64_t*);                             \
  template Status Dequantize<T>(const Fp8Tensor&, T*);                                           \
  template Status ComputeAmax<T>(const T*, int64_t, float*);                                     \
  template Status QuantizeCurrentScaling<T>(const T*, const Fp8Tensor&, int, uint64_t*);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
FP8RT_INSTANTIATE(double)
#undef FP8RT_INSTANTIATE

Status TransposeFp8(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0 || ((rows * cols > 0) && (out == nullptr || in == nullptr)) ||
      (rows * cols > 0 && out < in + rows * cols && in < out + rows * cols)) {
    return Status::InvalidArgument(StrCat("TransposeFp8: rows=", rows, " cols=", cols,
                                          ": needs rows, cols >= 0 and distinct, non-null buffers"));
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
  return Status::Ok();
}

}  // namespace cpu
}  // namespace fp8rt

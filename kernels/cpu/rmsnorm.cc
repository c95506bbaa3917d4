// Reference RMSNorm in FP64 (kernels/rmsnorm.h).
#include "kernels/rmsnorm.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/ref_util.h"
#include "kernels/quantize.h"

namespace fp8rt {

Status ValidateRmsNorm(const char* op, int64_t N, int64_t C, float eps,
                       std::initializer_list<const void*> buffers, const float* rstd,
                       bool rstd_optional) {
  if (N < 0 || C < 0) {
    return Status::InvalidArgument(StrCat(op, ": N=", N, ", C=", C, "; both must be >= 0"));
  }
  if (!(eps >= 0.0f)) return Status::InvalidArgument(StrCat(op, ": eps=", eps, " must be >= 0"));
  if (N * C == 0) return Status::Ok();
  for (const void* b : buffers) {
    if (b == nullptr) return Status::InvalidArgument(StrCat(op, ": a buffer is null"));
  }
  if (rstd == nullptr && !rstd_optional) {
    return Status::InvalidArgument(StrCat(op, ": rstd is null (the forward's saved statistics)"));
  }
  return Status::Ok();
}

namespace cpu {

using ref::Load;
using ref::Store;

template <typename T>
Status RmsNormForward(T* out, float* rstd, const T* in, const T* weight, int64_t N, int64_t C,
                      float eps) {
  FP8RT_RETURN_IF_ERROR(ValidateRmsNorm("RmsNormForward", N, C, eps, {out, in, weight}, rstd, true));
  for (int64_t n = 0; n < N; ++n) {
    const T* x = in + n * C;
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += Load(x[c]) * Load(x[c]);
    const double r = 1.0 / std::sqrt(ss / C + eps);
    if (rstd) rstd[n] = static_cast<float>(r);
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = Store<T>(Load(x[c]) * r * Load(weight[c]));
  }
  return Status::Ok();
}

template <typename T>
Status RmsNormForwardFp8(const Fp8Tensor& out, float* rstd, const T* in, const T* weight, int64_t N,
                         int64_t C, float eps, uint64_t* saturated) {
  constexpr const char* kOp = "RmsNormForwardFp8";
  FP8RT_RETURN_IF_ERROR(ValidateFp8RowMajorOutput(kOp, out, N, C));
  FP8RT_RETURN_IF_ERROR(ValidateRmsNorm(kOp, N, C, eps, {in, weight}, rstd, true));
  std::vector<T> y(static_cast<size_t>(N * C));
  FP8RT_RETURN_IF_ERROR(RmsNormForward(y.data(), rstd, in, weight, N, C, eps));
  return Quantize(y.data(), out, saturated);
}

template <typename T>
Status RmsNormBackward(T* din, float* dweight, const T* dout, const T* in, const T* weight,
                       const float* rstd, int64_t N, int64_t C, bool accumulate_din) {
  FP8RT_RETURN_IF_ERROR(ValidateRmsNorm("RmsNormBackward", N, C, 0.0f,
                                        {din, dweight, dout, in, weight}, rstd, false));
  std::vector<double> dw(static_cast<size_t>(C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const T* x = in + n * C;
    const T* dy = dout + n * C;
    const double r = rstd[n];
    double gx = 0;
    for (int64_t c = 0; c < C; ++c) gx += Load(dy[c]) * Load(weight[c]) * Load(x[c]);
    gx /= C;
    for (int64_t c = 0; c < C; ++c) {
      const double g = Load(dy[c]) * Load(weight[c]);
      double v = r * (g - Load(x[c]) * r * r * gx);
      if (accumulate_din) v += Load(din[n * C + c]);
      din[n * C + c] = Store<T>(v);
      dw[c] += Load(dy[c]) * Load(x[c]) * r;
    }
  }
  for (int64_t c = 0; c < C; ++c) dweight[c] = static_cast<float>(dweight[c] + dw[c]);
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                                   \
  template Status RmsNormForward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float); \
  template Status RmsNormForwardFp8<T>(const Fp8Tensor&, float*, const T*, const T*, int64_t, \
                                       int64_t, float, uint64_t*);                            \
  template Status RmsNormBackward<T>(T*, float*, const T*, const T*, const T*, const float*,  \
                                     int64_t, int64_t, bool);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
FP8RT_INSTANTIATE(double)
#undef FP8RT_INSTANTIATE

}  // namespace cpu
}  // namespace fp8rt

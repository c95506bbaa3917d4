// Reference LayerNorm: statistics and gradients in fp64, each output rounded once.
#include "kernels/cpu/ref_util.h"
#include "kernels/layernorm.h"
#include "kernels/quantize.h"

#include <cmath>
#include <type_traits>
#include <vector>

namespace fp8rt::cpu {
namespace {

using ref::Load;
using ref::Store;

Status CheckDims(const char* op, int64_t N, int64_t C) {
  if (N < 0) return Status::InvalidArgument(StrCat(op, ": N=", N, " must be >= 0"));
  if (C < 1) return Status::InvalidArgument(StrCat(op, ": C=", C, " must be >= 1"));
  return Status::Ok();
}

// The forward's preconditions apart from its output's; op names the caller in the message.
Status CheckForward(const char* op, const float* mean, const float* rstd, const void* in,
                    const void* weight, const void* bias, int64_t N, int64_t C, float eps) {
  FP8RT_RETURN_IF_ERROR(CheckDims(op, N, C));
  if (N > 0 && (!in || !weight || !bias)) {
    return Status::InvalidArgument(StrCat(op, ": in, weight and bias must be non-null"));
  }
  if ((mean == nullptr) != (rstd == nullptr)) {
    return Status::InvalidArgument(StrCat(op, ": mean and rstd must be both null or both set"));
  }
  if (!(eps >= 0.0f)) return Status::InvalidArgument(StrCat(op, ": eps=", eps, " must be >= 0"));
  return Status::Ok();
}

}  // namespace

template <typename T>
Status LayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* weight,
                        const T* bias, int64_t N, int64_t C, float eps) {
  FP8RT_RETURN_IF_ERROR(CheckForward("LayerNormForward", mean, rstd, in, weight, bias, N, C, eps));
  if (N > 0 && !out) return Status::InvalidArgument("LayerNormForward: out must be non-null");
  for (int64_t n = 0; n < N; ++n) {
    const T* x = in + n * C;
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += Load(x[c]);
    const double mu = sum / C;
    double var = 0;
    for (int64_t c = 0; c < C; ++c) var += (Load(x[c]) - mu) * (Load(x[c]) - mu);
    const double rs = 1.0 / std::sqrt(var / C + eps);
    // out is computed from the fp64 statistics: the double instantiation is then a smooth function
    // of its input, which is what the finite-difference checks need.
    T* o = out + n * C;
    for (int64_t c = 0; c < C; ++c) {
      o[c] = Store<T>((Load(x[c]) - mu) * rs * Load(weight[c]) + Load(bias[c]));
    }
    if (mean) {
      mean[n] = static_cast<float>(mu);
      rstd[n] = static_cast<float>(rs);
    }
  }
  return Status::Ok();
}

template <typename T>
Status LayerNormForwardFp8(const Fp8Tensor& out, float* mean, float* rstd, const T* in,
                           const T* weight, const T* bias, int64_t N, int64_t C, float eps,
                           uint64_t* saturated) {
  constexpr const char* kOp = "LayerNormForwardFp8";
  FP8RT_RETURN_IF_ERROR(ValidateFp8RowMajorOutput(kOp, out, N, C));
  FP8RT_RETURN_IF_ERROR(CheckForward(kOp, mean, rstd, in, weight, bias, N, C, eps));
  std::vector<T> y(static_cast<size_t>(N * C));
  FP8RT_RETURN_IF_ERROR(LayerNormForward(y.data(), mean, rstd, in, weight, bias, N, C, eps));
  return Quantize(y.data(), out, saturated);
}

template <typename T>
Status LayerNormBackward(T* din, float* dweight, float* dbias, const T* dout, const T* in,
                         const T* weight, const float* mean, const float* rstd, int64_t N,
                         int64_t C, bool accumulate_din) {
  FP8RT_RETURN_IF_ERROR(CheckDims("LayerNormBackward", N, C));
  if (N > 0 && (!din || !dweight || !dbias || !dout || !in || !weight || !mean || !rstd)) {
    return Status::InvalidArgument(
        "LayerNormBackward: din, dweight, dbias, dout, in, weight, mean and rstd must be non-null");
  }
  std::vector<double> dw(static_cast<size_t>(C), 0.0), db(static_cast<size_t>(C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const T* x = in + n * C;
    const T* dy = dout + n * C;
    const double mu = mean[n], rs = rstd[n];
    double sum_g = 0, sum_gx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (Load(x[c]) - mu) * rs;
      const double g = Load(dy[c]) * Load(weight[c]);
      sum_g += g;
      sum_gx += g * xhat;
      dw[c] += Load(dy[c]) * xhat;
      db[c] += Load(dy[c]);
    }
    const double mean_g = sum_g / C, mean_gx = sum_gx / C;
    T* dx = din + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (Load(x[c]) - mu) * rs;
      const double g = Load(dy[c]) * Load(weight[c]);
      const double d = rs * (g - mean_g - xhat * mean_gx);
      dx[c] = Store<T>(accumulate_din ? Load(dx[c]) + d : d);
    }
  }
  if (N > 0) {
    for (int64_t c = 0; c < C; ++c) {
      dweight[c] = static_cast<float>(dweight[c] + dw[c]);
      dbias[c] = static_cast<float>(dbias[c] + db[c]);
    }
  }
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                                     \
  template Status LayerNormForward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, \
                                      int64_t, float);                                           \
  template Status LayerNormForwardFp8<T>(const Fp8Tensor&, float*, float*, const T*, const T*,   \
                                         const T*, int64_t, int64_t, float, uint64_t*);          \
  template Status LayerNormBackward<T>(T*, float*, float*, const T*, const T*, const T*,         \
                                       const float*, const float*, int64_t, int64_t, bool);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
FP8RT_INSTANTIATE(double)
#undef FP8RT_INSTANTIATE

}  // namespace fp8rt::cpu

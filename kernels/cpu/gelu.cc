// Reference tanh-GELU in fp64 with std::tanh: an independent formula from the CUDA kernels'
// sigmoid form, so the GPU test compares two implementations.
#include "kernels/cpu/ref_util.h"
#include "kernels/gelu.h"

#include <cmath>
#include <type_traits>

namespace fp8rt::cpu {
namespace {

using ref::Load;
using ref::Store;

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;

Status Check(const char* op, int64_t n, bool null) {
  if (n < 0) return Status::InvalidArgument(StrCat(op, ": n=", n, " must be >= 0"));
  if (n > 0 && null) return Status::InvalidArgument(StrCat(op, ": null buffer"));
  return Status::Ok();
}

}  // namespace

template <typename T>
Status GeluForward(T* out, const T* in, int64_t n) {
  FP8RT_RETURN_IF_ERROR(Check("GeluForward", n, !out || !in));
  for (int64_t i = 0; i < n; ++i) {
    const double x = Load(in[i]);
    const double u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = Store<T>(0.5 * x * (1.0 + std::tanh(u)));
  }
  return Status::Ok();
}

template <typename T>
Status GeluBackward(T* din, const T* in, const T* dout, int64_t n) {
  FP8RT_RETURN_IF_ERROR(Check("GeluBackward", n, !din || !in || !dout));
  for (int64_t i = 0; i < n; ++i) {
    const double x = Load(in[i]);
    const double u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const double th = std::tanh(u);
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kCubic * x * x);
    const double grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
    din[i] = Store<T>(Load(dout[i]) * grad);
  }
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                             \
  template Status GeluForward<T>(T*, const T*, int64_t); \
  template Status GeluBackward<T>(T*, const T*, const T*, int64_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
FP8RT_INSTANTIATE(double)
#undef FP8RT_INSTANTIATE

}  // namespace fp8rt::cpu

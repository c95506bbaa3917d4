// Reference RoPE in FP64 from FP32 angles (kernels/rope.h).
#include "kernels/rope.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/ref_util.h"

namespace fp8rt {

void RopeInvFreq(float theta, int64_t HS, float* inv_freq) {
  for (int64_t i = 0; i < HS / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(HS);
    inv_freq[i] = 1.0f / std::pow(theta, e);
  }
}

Status ValidateRope(const char* op, const void* out, const void* in, int64_t B, int64_t T_,
                    int64_t NH, int64_t HS, int64_t ld, float theta, int64_t pos0) {
  if (B < 0 || T_ < 0 || NH < 0 || pos0 < 0) {
    return Status::InvalidArgument(
        StrCat(op, ": B=", B, ", T=", T_, ", NH=", NH, ", pos0=", pos0, "; each must be >= 0"));
  }
  if (HS < 2 || HS % 2 != 0 || HS > kRopeMaxHeadSize) {
    return Status::InvalidArgument(
        StrCat(op, ": head size ", HS, "; must be even, 2 .. ", kRopeMaxHeadSize));
  }
  if (ld < NH * HS) {
    return Status::InvalidArgument(
        StrCat(op, ": ld=", ld, " is less than the ", NH * HS, " values of a row's heads"));
  }
  if (!(theta > 0.0f)) return Status::InvalidArgument(StrCat(op, ": theta=", theta, " must be > 0"));
  if (B * T_ * NH > 0 && (out == nullptr || in == nullptr)) {
    return Status::InvalidArgument(StrCat(op, ": a buffer is null"));
  }
  return Status::Ok();
}

namespace cpu {
namespace {

using ref::Load;
using ref::Store;

// sign +1: the forward rotation by a; -1: the backward's, by -a.
template <typename T>
void Rotate(T* out, const T* in, int64_t B, int64_t T_, int64_t NH, int64_t HS, int64_t ld,
            float theta, int64_t pos0, double sign) {
  const int64_t h = HS / 2;
  std::vector<float> inv(static_cast<size_t>(h));
  RopeInvFreq(theta, HS, inv.data());
  for (int64_t r = 0; r < B * T_; ++r) {
    const float p = static_cast<float>(r % T_ + pos0);
    for (int64_t hd = 0; hd < NH; ++hd) {
      const T* x = in + r * ld + hd * HS;
      T* y = out + r * ld + hd * HS;
      for (int64_t i = 0; i < h; ++i) {
        const float a = p * inv[i];  // FP32, as transformers
        const double c = std::cos(double{a}), s = sign * std::sin(double{a});
        const double x0 = Load(x[i]), x1 = Load(x[i + h]);
        y[i] = Store<T>(x0 * c - x1 * s);
        y[i + h] = Store<T>(x1 * c + x0 * s);
      }
    }
  }
}

}  // namespace

template <typename T>
Status RopeForward(T* out, const T* in, int64_t B, int64_t T_, int64_t NH, int64_t HS,
                   int64_t ld, float theta, int64_t pos0) {
  FP8RT_RETURN_IF_ERROR(ValidateRope("RopeForward", out, in, B, T_, NH, HS, ld, theta, pos0));
  Rotate(out, in, B, T_, NH, HS, ld, theta, pos0, 1.0);
  return Status::Ok();
}

template <typename T>
Status RopeBackward(T* din, const T* dout, int64_t B, int64_t T_, int64_t NH, int64_t HS,
                    int64_t ld, float theta, int64_t pos0) {
  FP8RT_RETURN_IF_ERROR(ValidateRope("RopeBackward", din, dout, B, T_, NH, HS, ld, theta, pos0));
  Rotate(din, dout, B, T_, NH, HS, ld, theta, pos0, -1.0);
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                                 \
  template Status RopeForward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                 float, int64_t);                                           \
  template Status RopeBackward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                  float, int64_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
FP8RT_INSTANTIATE(double)
#undef FP8RT_INSTANTIATE

}  // namespace cpu
}  // namespace fp8rt

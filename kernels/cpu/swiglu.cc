// Reference SwiGLU in FP64 (kernels/swiglu.h).
#include "kernels/swiglu.h"

#include <cmath>

#include "kernels/cpu/ref_util.h"

namespace fp8rt {

Status ValidateSwiGlu(const char* op, int64_t N, int64_t F,
                      std::initializer_list<const void*> buffers) {
  if (N < 0 || F < 0) {
    return Status::InvalidArgument(StrCat(op, ": N=", N, ", F=", F, "; both must be >= 0"));
  }
  if (N * F == 0) return Status::Ok();
  for (const void* b : buffers) {
    if (b == nullptr) return Status::InvalidArgument(StrCat(op, ": a buffer is null"));
  }
  return Status::Ok();
}

namespace cpu {

using ref::Load;
using ref::Store;

namespace {
double Sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }
}  // namespace

template <typename T>
Status SwiGluForward(T* out, const T* gu, int64_t N, int64_t F) {
  FP8RT_RETURN_IF_ERROR(ValidateSwiGlu("SwiGluForward", N, F, {out, gu}));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const double g = Load(gu[n * 2 * F + f]), u = Load(gu[n * 2 * F + F + f]);
      out[n * F + f] = Store<T>(g * Sigmoid(g) * u);
    }
  }
  return Status::Ok();
}

template <typename T>
Status SwiGluBackward(T* dgu, const T* gu, const T* dout, int64_t N, int64_t F) {
  FP8RT_RETURN_IF_ERROR(ValidateSwiGlu("SwiGluBackward", N, F, {dgu, gu, dout}));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const double g = Load(gu[n * 2 * F + f]), u = Load(gu[n * 2 * F + F + f]);
      const double dy = Load(dout[n * F + f]), s = Sigmoid(g);
      dgu[n * 2 * F + f] = Store<T>(dy * u * s * (1.0 + g * (1.0 - s)));
      dgu[n * 2 * F + F + f] = Store<T>(dy * g * s);
    }
  }
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                \
  template Status SwiGluForward<T>(T*, const T*, int64_t, int64_t);         \
  template Status SwiGluBackward<T>(T*, const T*, const T*, int64_t, int64_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
FP8RT_INSTANTIATE(double)
#undef FP8RT_INSTANTIATE

}  // namespace cpu
}  // namespace fp8rt

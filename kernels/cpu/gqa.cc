// Reference grouped-query expansion and its backward (kernels/gqa.h).
#include "kernels/gqa.h"

#include "kernels/cpu/ref_util.h"

namespace fp8rt {

Status ValidateGqa(const char* op, const void* out, const void* in, int64_t M, int64_t NH,
                   int64_t KV, int64_t HS) {
  if (M < 0 || NH < 1 || KV < 1 || HS < 1 || NH % KV != 0) {
    return Status::InvalidArgument(StrCat(op, ": M=", M, " NH=", NH, " KV=", KV, " HS=", HS,
                                          "; need M >= 0, NH, KV, HS >= 1 and KV dividing NH"));
  }
  if (M > 0 && (out == nullptr || in == nullptr)) {
    return Status::InvalidArgument(StrCat(op, ": a buffer is null"));
  }
  return Status::Ok();
}

namespace cpu {

using ref::Load;
using ref::Store;

template <typename T>
Status GqaExpand(T* out, const T* in, int64_t M, int64_t NH, int64_t KV, int64_t HS) {
  FP8RT_RETURN_IF_ERROR(ValidateGqa("GqaExpand", out, in, M, NH, KV, HS));
  const int64_t G = NH / KV, Q = NH * HS, ldi = (NH + 2 * KV) * HS, ldo = 3 * Q;
  for (int64_t m = 0; m < M; ++m) {
    const T* i = in + m * ldi;
    T* o = out + m * ldo;
    for (int64_t c = 0; c < Q; ++c) o[c] = i[c];
    for (int64_t part = 0; part < 2; ++part) {  // K, then V
      for (int64_t h = 0; h < NH; ++h) {
        for (int64_t d = 0; d < HS; ++d) {
          o[Q + part * Q + h * HS + d] = i[Q + part * KV * HS + (h / G) * HS + d];
        }
      }
    }
  }
  return Status::Ok();
}

template <typename T>
Status GqaReduce(T* din, const T* dout, int64_t M, int64_t NH, int64_t KV, int64_t HS) {
  FP8RT_RETURN_IF_ERROR(ValidateGqa("GqaReduce", din, dout, M, NH, KV, HS));
  const int64_t G = NH / KV, Q = NH * HS, ldi = (NH + 2 * KV) * HS, ldo = 3 * Q;
  for (int64_t m = 0; m < M; ++m) {
    const T* o = dout + m * ldo;
    T* i = din + m * ldi;
    for (int64_t c = 0; c < Q; ++c) i[c] = o[c];
    for (int64_t part = 0; part < 2; ++part) {
      for (int64_t k = 0; k < KV; ++k) {
        for (int64_t d = 0; d < HS; ++d) {
          double acc = 0;
          for (int64_t g = 0; g < G; ++g) acc += Load(o[Q + part * Q + (k * G + g) * HS + d]);
          i[Q + part * KV * HS + k * HS + d] = Store<T>(acc);
        }
      }
    }
  }
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                        \
  template Status GqaExpand<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t); \
  template Status GqaReduce<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
FP8RT_INSTANTIATE(double)
#undef FP8RT_INSTANTIATE

}  // namespace cpu
}  // namespace fp8rt

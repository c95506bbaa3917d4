// FP32 <-> BF16 buffers: the CPU reference.
#include "kernels/convert.h"

namespace fp8rt {

Status ValidateConvert(const char* op, const void* out, const void* in, int64_t n) {
  if (n < 0 || (n > 0 && (out == nullptr || in == nullptr))) {
    return Status::InvalidArgument(StrCat(op, ": n=", n, ", out=", out == nullptr ? "null" : "set",
                                          ", in=", in == nullptr ? "null" : "set",
                                          ": needs n >= 0 and non-null buffers"));
  }
  return Status::Ok();
}

namespace cpu {

Status FloatToBf16(bf16* out, const float* in, int64_t n) {
  FP8RT_RETURN_IF_ERROR(ValidateConvert("FloatToBf16", out, in, n));
  for (int64_t i = 0; i < n; ++i) out[i] = bf16(in[i]);
  return Status::Ok();
}

Status Bf16ToFloat(float* out, const bf16* in, int64_t n) {
  FP8RT_RETURN_IF_ERROR(ValidateConvert("Bf16ToFloat", out, in, n));
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
  return Status::Ok();
}

template <typename In>
Status AccumulateShardImpl(float* out, const In* in, int64_t n, bool add) {
  FP8RT_RETURN_IF_ERROR(ValidateConvert("AccumulateShard", out, in, n));
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(in[i]);
    out[i] = add ? out[i] + x : x;
  }
  return Status::Ok();
}

Status AccumulateShard(float* out, const float* in, int64_t n, bool add) {
  return AccumulateShardImpl(out, in, n, add);
}
Status AccumulateShard(float* out, const bf16* in, int64_t n, bool add) {
  return AccumulateShardImpl(out, in, n, add);
}

}  // namespace cpu
}  // namespace fp8rt

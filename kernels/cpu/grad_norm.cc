// Reference global gradient norm: the sum of squares in fp64.
#include "kernels/grad_norm.h"

namespace fp8rt::cpu {

Status GlobalNormSquared(float* out, const float* grad, int64_t n, bool accumulate) {
  if (n < 0) return Status::InvalidArgument(StrCat("GlobalNormSquared: n=", n, " must be >= 0"));
  if (!out || (n > 0 && !grad)) {
    return Status::InvalidArgument("GlobalNormSquared: out and grad must be non-null");
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(grad[i]) * grad[i];
  *out = accumulate ? *out + static_cast<float>(sum) : static_cast<float>(sum);
  return Status::Ok();
}

}  // namespace fp8rt::cpu

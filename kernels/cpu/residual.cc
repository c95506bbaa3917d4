// Reference residual add: the sum in fp64, rounded once to T.
#include "kernels/cpu/ref_util.h"
#include "kernels/residual.h"

#include <type_traits>

namespace fp8rt::cpu {
namespace {

using ref::Load;
using ref::Store;

}  // namespace

template <typename T>
Status ResidualAdd(T* out, const T* a, const T* b, int64_t n) {
  if (n < 0) return Status::InvalidArgument(StrCat("ResidualAdd: n=", n, " must be >= 0"));
  if (n > 0 && (!out || !a || !b)) {
    return Status::InvalidArgument("ResidualAdd: out, a and b must be non-null");
  }
  for (int64_t i = 0; i < n; ++i) out[i] = Store<T>(Load(a[i]) + Load(b[i]));
  return Status::Ok();
}

template Status ResidualAdd<float>(float*, const float*, const float*, int64_t);
template Status ResidualAdd<bf16>(bf16*, const bf16*, const bf16*, int64_t);
template Status ResidualAdd<double>(double*, const double*, const double*, int64_t);

}  // namespace fp8rt::cpu

// Residual connection: out = a + b, element-wise (sum in fp32, rounded once to T).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

// out may alias a or b (the residual stream updated in place). Its backward is the identity: the
// gradient of out is both inputs' gradient, so there is no ResidualBackward.

namespace cpu {
// Instantiated for T in {float, bf16, double}.
template <typename T>
Status ResidualAdd(T* out, const T* a, const T* b, int64_t n);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Instantiated for T in {float, bf16}. Device pointers.
template <typename T>
Status ResidualAdd(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt

// GELU, tanh approximation (GPT-2's): forward and backward, element-wise.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

// Semantics (CPU and CUDA), with u = sqrt(2/pi) * (x + 0.044715 x^3):
//   out = 0.5 x (1 + tanh(u))
//   din = dout * (0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
// din is overwritten (the MLP's pre-GELU activation has no other consumer). out may alias in, and
// din may alias dout. The CUDA kernels use the identical form 0.5 (1 + tanh(u)) = sigmoid(2u),
// which keeps full relative precision where 1 + tanh(u) cancels (large negative x).

namespace cpu {
// Instantiated for T in {float, bf16, double}.
template <typename T>
Status GeluForward(T* out, const T* in, int64_t n);
template <typename T>
Status GeluBackward(T* din, const T* in, const T* dout, int64_t n);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Instantiated for T in {float, bf16}. Device pointers.
template <typename T>
Status GeluForward(T* out, const T* in, int64_t n, cudaStream_t stream);
template <typename T>
Status GeluBackward(T* din, const T* in, const T* dout, int64_t n, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt

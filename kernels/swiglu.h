// SwiGLU, Llama's MLP activation: out = silu(gate) * up, forward and backward, element-wise over
// the output of one fused gate/up GEMM.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

// Semantics (CPU and CUDA): gu is (N, 2F), each row [gate (F) | up (F)]; out is (N, F):
//   out[n][f] = silu(g) * u,  silu(g) = g * sigmoid(g),  g = gu[n][f], u = gu[n][F + f]
// Backward, dout (N, F) -> dgu (N, 2F) (overwritten):
//   dgu[n][f]     = dout * u * sigmoid(g) * (1 + g * (1 - sigmoid(g)))
//   dgu[n][F + f] = dout * silu(g)
// FP32 math on the GPU (FP64 in the CPU reference), each output rounded once. No aliasing.

// The preconditions of both: N, F >= 0, non-null buffers when N * F > 0.
Status ValidateSwiGlu(const char* op, int64_t N, int64_t F, std::initializer_list<const void*> buffers);

namespace cpu {
// Instantiated for T in {float, bf16, double}.
template <typename T>
Status SwiGluForward(T* out, const T* gu, int64_t N, int64_t F);
template <typename T>
Status SwiGluBackward(T* dgu, const T* gu, const T* dout, int64_t N, int64_t F);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Instantiated for T in {float, bf16}. Device pointers.
template <typename T>
Status SwiGluForward(T* out, const T* gu, int64_t N, int64_t F, cudaStream_t stream);
template <typename T>
Status SwiGluBackward(T* dgu, const T* gu, const T* dout, int64_t N, int64_t F,
                      cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt

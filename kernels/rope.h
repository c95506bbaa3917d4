// Rotary position embeddings (RoPE, Llama's): forward and backward, in place or out of place, on
// the query or key heads of a token-major buffer (e.g. the Q or K part of a fused QKV output).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

// Semantics (CPU and CUDA), transformers' Llama convention ("rotate_half"): rows r of a (B * T)
// token-major buffer with pitch ld elements, each holding NH heads of HS (even) values starting
// at the row's first element; token r is at position p = r % T + pos0. With h = HS / 2 and, for
// i < h, inv_freq[i] = 1 / theta^(2i / HS) and a = p * inv_freq[i] (both rounded to FP32, as
// transformers computes them):
//   out[i]     = x[i] * cos(a) - x[i + h] * sin(a)
//   out[i + h] = x[i + h] * cos(a) + x[i] * sin(a)
// Backward (the rotation by -a; din may alias dout):
//   din[i]     = dout[i] * cos(a) + dout[i + h] * sin(a)
//   din[i + h] = dout[i + h] * cos(a) - dout[i] * sin(a)
// cos and sin of the FP32 angle in FP32 on the GPU (FP64 in the CPU reference); each output
// rounded once. out may alias in. Elements of a row past NH * HS are not touched.

// Largest head size the kernels take (the CUDA launcher passes the frequencies by value).
inline constexpr int64_t kRopeMaxHeadSize = 256;
// The HS / 2 inverse frequencies, in FP32 as transformers computes them:
// inv_freq[i] = 1 / theta^((2i) / HS), the exponent and the power in FP32.
void RopeInvFreq(float theta, int64_t HS, float* inv_freq);
// The preconditions of both: B, T_, NH >= 0; HS even, 2 .. kRopeMaxHeadSize; ld >= NH * HS;
// theta > 0; pos0 >= 0; non-null buffers when there is a row.
Status ValidateRope(const char* op, const void* out, const void* in, int64_t B, int64_t T_,
                    int64_t NH, int64_t HS, int64_t ld, float theta, int64_t pos0);

namespace cpu {
// Instantiated for T in {float, bf16, double}.
template <typename T>
Status RopeForward(T* out, const T* in, int64_t B, int64_t T_, int64_t NH, int64_t HS,
                   int64_t ld, float theta, int64_t pos0 = 0);
template <typename T>
Status RopeBackward(T* din, const T* dout, int64_t B, int64_t T_, int64_t NH, int64_t HS,
                    int64_t ld, float theta, int64_t pos0 = 0);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Instantiated for T in {float, bf16}. Device pointers.
template <typename T>
Status RopeForward(T* out, const T* in, int64_t B, int64_t T_, int64_t NH, int64_t HS,
                   int64_t ld, float theta, int64_t pos0, cudaStream_t stream);
template <typename T>
Status RopeBackward(T* din, const T* dout, int64_t B, int64_t T_, int64_t NH, int64_t HS,
                    int64_t ld, float theta, int64_t pos0, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt

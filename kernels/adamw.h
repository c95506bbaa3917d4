// AdamW update of FP32 master weights with decoupled weight decay, bias correction and global-norm
// gradient clipping read from device memory, writing the BF16/FP32 or FP8 working copy in the
// same pass.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/stream.h"

namespace fp8rt {

struct AdamWConfig {
  // Learning rate of this step (the schedule is the caller's). Default: 3e-4.
  float lr = 3e-4f;
  // First-moment decay, in [0, 1). Default: 0.9.
  float beta1 = 0.9f;
  // Second-moment decay, in [0, 1). Default: 0.95.
  float beta2 = 0.95f;
  // Added to sqrt(v_hat) in the denominator, > 0. Default: 1e-8.
  float eps = 1e-8f;
  // Decoupled weight decay of the 2-D (matrix) parameters; callers pass it, or 0 for 1-D
  // parameters (biases, LayerNorm), as AdamW's `weight_decay` argument. Default: 0.1.
  float weight_decay = 0.1f;
};

// Semantics (CPU and CUDA), per element i, with step t >= 1:
//   clip = max_grad_norm > 0 ? min(1, max_grad_norm / (sqrt(*grad_norm_sq) + 1e-6)) : 1
//   g = grad[i] * clip
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   m_hat = m / (1 - beta1^t);     v_hat = v / (1 - beta2^t)
//   p = p - lr (m_hat / (sqrt(v_hat) + eps) + weight_decay p)        (p: the fp32 master)
//   working[i] = T(p)                                                  (when working != null)
// The moments are stored as M: FP32, or BF16 (train.moments_dtype: bf16), rounded to nearest even
// when stored; the update of p uses the unrounded m and v of this step.
// grad_norm_sq (the output of GlobalNormSquared) is read inside the kernel, so clipping needs no
// host sync; it is only read when max_grad_norm > 0 and must then be non-null (host pointer for
// the CPU reference, device pointer for CUDA). The CPU reference computes in fp64.
//
// AdamWFp8: the same update; the working copy is an Fp8Tensor of numel() == n elements:
//   data[i] = Fp8Encode(p * *scale) (row-major), data_t[c][r] the same code when data_t != null,
//   *amax = max(*amax, max_i |p|) (bit-pattern max as in kernels/quantize.h: NaN sticks) when
//   amax != null, *scale_inv = 1 / *scale (as Quantize does).

// Checks the arguments both implementations share (n, step, betas, eps, lr, weight decay, the
// clipping inputs); InvalidArgument names the argument, its value and what is allowed.
Status ValidateAdamWArgs(const char* op, int64_t n, int step, const AdamWConfig& cfg,
                         float weight_decay, const float* grad_norm_sq, float max_grad_norm);

namespace cpu {
// Instantiated for T in {float, bf16, double} and M in {float, bf16}. working may be null.
template <typename T, typename M>
Status AdamW(float* master, M* m, M* v, const float* grad, T* working, int64_t n, int step,
             const AdamWConfig& cfg, float weight_decay, const float* grad_norm_sq,
             float max_grad_norm);
// M in {float, bf16}.
template <typename M>
Status AdamWFp8(float* master, M* m, M* v, const float* grad, const Fp8Tensor& working, int step,
                const AdamWConfig& cfg, float weight_decay, const float* grad_norm_sq,
                float max_grad_norm);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Instantiated for T in {float, bf16} and M in {float, bf16}. Device pointers; working may be
// null. The update runs in fp32 (the CPU reference in fp64).
template <typename T, typename M>
Status AdamW(float* master, M* m, M* v, const float* grad, T* working, int64_t n, int step,
             const AdamWConfig& cfg, float weight_decay, const float* grad_norm_sq,
             float max_grad_norm, cudaStream_t stream);
template <typename M>
Status AdamWFp8(float* master, M* m, M* v, const float* grad, const Fp8Tensor& working, int step,
                const AdamWConfig& cfg, float weight_decay, const float* grad_norm_sq,
                float max_grad_norm, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt

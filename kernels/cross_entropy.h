// Fused softmax + cross-entropy over the padded vocabulary: per-row losses and, in place of the
// logits, their gradient, without materialising the probabilities. Plus the mean loss.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

// Semantics (CPU and CUDA), rows n of logits (N, Vp), columns [V, Vp) being padding:
//   lse[n]    = log sum_{v < V} exp(logits[n][v])        (padding is not part of the softmax)
//   losses[n] = lse[n] - logits[n][targets[n]]
//   when compute_grad, logits is overwritten with dlogits:
//     dlogits[n][v] = dloss * (softmax[n][v] - (v == targets[n]))  for v < V,  0 for v >= V
// targets[n] < 0 marks an ignored position (padding of a batch): losses[n] = 0 and its dlogits
// row is all 0. dloss is the gradient of the mean loss, e.g. 1 / (B * T * grad_accum_steps).
// Logits are read as fp32; the CPU reference computes in fp64.
// losses may be null (only the gradient is wanted); then compute_grad must be true.
//
// Targets >= V: the CPU reference returns InvalidArgument. The CUDA kernel cannot report without
// a host sync; it writes a NaN loss and NaN dlogits over [0, V) for that row (never reads out of
// bounds).
//
// CUDA: one block per row, two reads of the row (the second from L2) and one write; exp via the
// hardware's ex2.approx (relative error ~2^-22), well inside the kLoss tolerances.

namespace cpu {
// Instantiated for T in {float, bf16, double}.
template <typename T>
Status SoftmaxCrossEntropy(float* losses, T* logits_or_dlogits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp, float dloss, bool compute_grad);
// FP64 losses: what the finite-difference checks differentiate.
Status SoftmaxCrossEntropy(double* losses, double* logits_or_dlogits, const int32_t* targets,
                           int64_t N, int64_t V, int64_t Vp, double dloss, bool compute_grad);
// *out = sum_n losses[n] / N (ignored positions count as 0 loss). N >= 1.
Status MeanLoss(float* out, const float* losses, int64_t N);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Instantiated for T in {float, bf16}. Device pointers.
template <typename T>
Status SoftmaxCrossEntropy(float* losses, T* logits_or_dlogits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp, float dloss, bool compute_grad,
                           cudaStream_t stream);
// *out = sum_n losses[n] / N, summed by one block in a fixed order (deterministic, no scratch).
Status MeanLoss(float* out, const float* losses, int64_t N, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt

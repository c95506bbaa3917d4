// Reference fused softmax + cross-entropy: two-pass (max, then sum of exponentials) in fp64.
#include "kernels/cpu/ref_util.h"
#include "kernels/cross_entropy.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace fp8rt::cpu {
namespace {

using ref::Load;
using ref::Store;

// T: the logits' type; L: the losses' type (float, or double for the finite-difference checks).
template <typename T, typename L>
Status SoftmaxCrossEntropyImpl(L* losses, T* logits, const int32_t* targets, int64_t N, int64_t V,
                               int64_t Vp, double dloss, bool compute_grad) {
  if (N < 0) return Status::InvalidArgument(StrCat("SoftmaxCrossEntropy: N=", N, " must be >= 0"));
  if (V < 1 || V > INT32_MAX || Vp < V) {
    return Status::InvalidArgument(
        StrCat("SoftmaxCrossEntropy: V=", V, " Vp=", Vp, ": need 1 <= V <= Vp and V < 2^31"));
  }
  if (!losses && !compute_grad) {
    return Status::InvalidArgument(
        "SoftmaxCrossEntropy: losses is null and compute_grad is false: nothing to compute");
  }
  if (N > 0 && (!logits || !targets)) {
    return Status::InvalidArgument("SoftmaxCrossEntropy: logits and targets must be non-null");
  }
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] >= V) {
      return Status::InvalidArgument(StrCat("SoftmaxCrossEntropy: targets[", n, "]=", targets[n],
                                            " must be < V=", V, " (or < 0 to ignore the row)"));
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    T* row = logits + n * Vp;
    const int32_t target = targets[n];
    if (target < 0) {
      if (losses) losses[n] = 0;
      if (compute_grad) {
        for (int64_t v = 0; v < Vp; ++v) row[v] = Store<T>(0.0);
      }
      continue;
    }
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < V; ++v) mx = std::fmax(mx, Load(row[v]));
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(Load(row[v]) - mx);
    const double lse = mx + std::log(sum);
    if (losses) losses[n] = static_cast<L>(lse - Load(row[target]));
    if (compute_grad) {
      for (int64_t v = 0; v < Vp; ++v) {
        double g = 0;
        if (v < V) g = dloss * (std::exp(Load(row[v]) - lse) - (v == target ? 1.0 : 0.0));
        row[v] = Store<T>(g);
      }
    }
  }
  return Status::Ok();
}

}  // namespace

template <typename T>
Status SoftmaxCrossEntropy(float* losses, T* logits_or_dlogits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp, float dloss, bool compute_grad) {
  return SoftmaxCrossEntropyImpl(losses, logits_or_dlogits, targets, N, V, Vp, dloss, compute_grad);
}

Status SoftmaxCrossEntropy(double* losses, double* logits_or_dlogits, const int32_t* targets,
                           int64_t N, int64_t V, int64_t Vp, double dloss, bool compute_grad) {
  return SoftmaxCrossEntropyImpl(losses, logits_or_dlogits, targets, N, V, Vp, dloss, compute_grad);
}

Status MeanLoss(float* out, const float* losses, int64_t N) {
  if (N < 1) return Status::InvalidArgument(StrCat("MeanLoss: N=", N, " must be >= 1"));
  if (!out || !losses) return Status::InvalidArgument("MeanLoss: out and losses must be non-null");
  double sum = 0;
  for (int64_t n = 0; n < N; ++n) sum += losses[n];
  *out = static_cast<float>(sum / N);
  return Status::Ok();
}

template Status SoftmaxCrossEntropy<float>(float*, float*, const int32_t*, int64_t, int64_t,
                                           int64_t, float, bool);
template Status SoftmaxCrossEntropy<bf16>(float*, bf16*, const int32_t*, int64_t, int64_t, int64_t,
                                          float, bool);
template Status SoftmaxCrossEntropy<double>(float*, double*, const int32_t*, int64_t, int64_t,
                                            int64_t, float, bool);

}  // namespace fp8rt::cpu

// Test helpers and the tolerance table with the reason for each entry.
#include "tests/common/test_util.h"

#include <cmath>
#include <random>
#include <sstream>

namespace fp8rt::test {

Tolerance ToleranceFor(OpKind kind, DType out) {
  const bool bf = out == DType::kBFloat16;
  switch (kind) {
    case OpKind::kExact:
      return {0, 0, 0};
    case OpKind::kElementwise:
      // fp32: device tanhf/expf are within 2 ulp of the host's. bf16: both sides compute in fp32
      // and round once; a 2-ulp fp32 difference can flip that rounding: one bf16 ulp (2^-7).
      return bf ? Tolerance{1e-5, 8e-3, 0} : Tolerance{1e-6, 1e-5, 0};
    case OpKind::kNormalization:
      // Row sums in another order (warp trees vs a sequential loop): ~sqrt(C) ulp in the
      // statistics; bf16 inputs/outputs add up to two bf16 roundings.
      return bf ? Tolerance{2e-3, 1.6e-2, 0} : Tolerance{1e-5, 1e-4, 0};
    case OpKind::kLoss:
      // Log-sum-exp over V in another order; dlogits = softmax - onehot is relative to 1/V.
      return bf ? Tolerance{1e-4, 1.6e-2, 0} : Tolerance{1e-6, 1e-4, 0};
    case OpKind::kOptimizer:
      // Same formula, but sqrt/div and fused multiply-adds round differently on the device.
      return bf ? Tolerance{1e-5, 8e-3, 0} : Tolerance{1e-7, 1e-5, 0};
    case OpKind::kGemm:
      // Compared by relative L2 against a reference on the same (dequantized) operands. fp32:
      // plain FP32 accumulation in another order. bf16 output: one rounding of each element
      // (2^-9 rms). fp8 (kE4M3): fast accumulation on Hopper keeps fewer bits of the partial sums.
      if (out == DType::kE4M3 || out == DType::kE5M2) return {0, 0, 2e-2};
      return bf ? Tolerance{0, 0, 8e-3} : Tolerance{0, 0, 1e-5};
    case OpKind::kAttention:
      // Three GEMMs and a softmax chained: bf16 rounds the scores, probabilities and output.
      return bf ? Tolerance{0, 0, 2e-2} : Tolerance{0, 0, 1e-4};
  }
  return {};
}

const std::vector<Shape2D>& AwkwardShapes() {
  static const std::vector<Shape2D> shapes = {
      {217, 256, "217x256"},
      {1, 16, "1x16"},
      {5 * 4 * 3, 160, "5x4x3x160"},
      {4096, 768, "4096x768"},
  };
  return shapes;
}

std::vector<float> RandomUniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> RandomNormal(size_t n, uint64_t seed, float mean, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<float>& want,
                                    Tolerance tol, const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != expected " << want.size();
  }
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) || std::isnan(g)) {
      if (std::isnan(w) != std::isnan(g)) {
        ++bad;
        worst = i;
        worst_excess = INFINITY;
      }
      continue;
    }
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) {
        ++bad;
        worst = i;
        worst_excess = INFINITY;
      }
      continue;
    }
    const double excess = std::fabs(g - w) - (tol.atol + tol.rtol * std::fabs(w));
    if (excess > 0) {
      ++bad;
      if (excess > worst_excess) worst_excess = excess, worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " elements outside atol=" << tol.atol
         << " rtol=" << tol.rtol << "; worst at [" << worst << "]: got " << got[worst]
         << ", want " << want[worst];
}

double RelL2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

::testing::AssertionResult RelL2Close(const std::vector<float>& got,
                                      const std::vector<float>& want, Tolerance tol,
                                      const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != expected " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && !std::isnan(want[i])) {
      return ::testing::AssertionFailure() << what << ": NaN at [" << i << "]";
    }
  }
  const double e = RelL2(got, want);
  if (e <= tol.rel_l2) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": relative L2 error " << e << " > " << tol.rel_l2;
}

}  // namespace fp8rt::test

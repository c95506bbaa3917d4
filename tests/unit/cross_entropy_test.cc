// The reference softmax + cross-entropy: a hand-computed row, padding and ignored targets, and a
// finite-difference check of dlogits.
#include "kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

TEST(CrossEntropyReference, HandComputedRowWithPadding) {
  // V = 3, Vp = 4: the padding column's 99 must not enter the softmax.
  std::vector<float> logits = {1, 2, 3, 99};
  const std::vector<int32_t> targets = {2};
  float loss = -1;
  const float dloss = 0.5f;
  ASSERT_TRUE(
      cpu::SoftmaxCrossEntropy(&loss, logits.data(), targets.data(), 1, 3, 4, dloss, true).ok());
  // lse = 3 + log(1 + e^-1 + e^-2); softmax = [0.0900..., 0.2447..., 0.6652...].
  EXPECT_FLOAT_EQ(loss, 0.4076059644443806f);
  EXPECT_FLOAT_EQ(logits[0], dloss * 0.09003057317038043f);
  EXPECT_FLOAT_EQ(logits[1], dloss * 0.24472847105479759f);
  EXPECT_FLOAT_EQ(logits[2], dloss * (0.6652409557748217f - 1.f));
  EXPECT_EQ(logits[3], 0.f);
}

TEST(CrossEntropyReference, IgnoredTargetGivesZeroLossAndGradient) {
  std::vector<float> logits = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> targets = {-1, 0};
  std::vector<float> losses = {-1, -1};
  ASSERT_TRUE(
      cpu::SoftmaxCrossEntropy(losses.data(), logits.data(), targets.data(), 2, 4, 4, 1.f, true)
          .ok());
  EXPECT_EQ(losses[0], 0.f);
  for (int v = 0; v < 4; ++v) EXPECT_EQ(logits[v], 0.f) << v;
  EXPECT_GT(losses[1], 0.f);
  EXPECT_LT(logits[4], 0.f);  // the target's gradient, softmax - 1
}

TEST(CrossEntropyReference, WithoutGradientLogitsAreUntouched) {
  std::vector<float> logits = {0.5f, -1, 2, 0};
  const std::vector<float> before = logits;
  const std::vector<int32_t> targets = {1};
  float loss = 0, loss_with_grad = 0;
  ASSERT_TRUE(
      cpu::SoftmaxCrossEntropy(&loss, logits.data(), targets.data(), 1, 3, 4, 1.f, false).ok());
  EXPECT_EQ(logits, before);
  ASSERT_TRUE(
      cpu::SoftmaxCrossEntropy(&loss_with_grad, logits.data(), targets.data(), 1, 3, 4, 1.f, true)
          .ok());
  EXPECT_EQ(loss, loss_with_grad);
  // Uniform logits: loss = log V exactly.
  std::vector<float> flat(5, 0.25f);
  ASSERT_TRUE(
      cpu::SoftmaxCrossEntropy(&loss, flat.data(), targets.data(), 1, 5, 5, 1.f, false).ok());
  EXPECT_FLOAT_EQ(loss, std::log(5.f));
}

TEST(CrossEntropyReference, RejectsBadArguments) {
  std::vector<float> logits(8);
  float losses[2];
  const std::vector<int32_t> bad = {0, 4};
  Status s = cpu::SoftmaxCrossEntropy(losses, logits.data(), bad.data(), 2, 4, 4, 1.f, true);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("targets[1]=4"), std::string::npos) << s.message();
  const std::vector<int32_t> ok = {0, 1};
  EXPECT_EQ(cpu::SoftmaxCrossEntropy(losses, logits.data(), ok.data(), 2, 5, 4, 1.f, true).code(),
            StatusCode::kInvalidArgument);  // Vp < V
  EXPECT_EQ(cpu::SoftmaxCrossEntropy<float>(nullptr, logits.data(), ok.data(), 2, 4, 4, 1.f, false)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(CrossEntropyReference, DlogitsMatchFiniteDifferences) {
  // L = dloss * sum_n losses[n]; rows 1 and 4 are ignored; 5 padding columns per row.
  const int64_t N = 5, V = 11, Vp = 16;
  const double dloss = 0.37;
  const auto lf = test::RandomNormal(N * Vp, 41, 0.f, 2.f);
  std::vector<double> logits(lf.begin(), lf.end());
  const std::vector<int32_t> targets = {3, -1, 0, 10, -7};
  std::vector<double> losses(N), work(N * Vp);
  auto loss = [&] {
    work = logits;
    EXPECT_TRUE(
        cpu::SoftmaxCrossEntropy(losses.data(), work.data(), targets.data(), N, V, Vp, dloss, false)
            .ok());
    double l = 0;
    for (double x : losses) l += dloss * x;
    return l;
  };
  std::vector<double> dlogits = logits;
  ASSERT_TRUE(
      cpu::SoftmaxCrossEntropy(losses.data(), dlogits.data(), targets.data(), N, V, Vp, dloss, true)
          .ok());
  const double h = 1e-5;
  double err = 0, scale = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double x0 = logits[i];
    logits[i] = x0 + h;
    const double lp = loss();
    logits[i] = x0 - h;
    const double lm = loss();
    logits[i] = x0;
    const double numeric = (lp - lm) / (2 * h);
    err = std::fmax(err, std::fabs(dlogits[i] - numeric));
    scale = std::fmax(scale, std::fabs(numeric));
    if (i % Vp >= static_cast<size_t>(V) || targets[i / Vp] < 0) {
      EXPECT_EQ(dlogits[i], 0.0) << "padding / ignored row at " << i;
    }
  }
  EXPECT_LT(err / scale, 1e-8);
  // Each kept row's gradient sums to 0 (softmax sums to 1, one-hot to 1).
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0;
    for (int64_t v = 0; v < Vp; ++v) sum += dlogits[n * Vp + v];
    EXPECT_NEAR(sum, 0.0, 1e-15) << n;
  }
}

TEST(CrossEntropyReference, MeanLossAveragesOverAllRows) {
  const std::vector<float> losses = {1, 2, 3, 0};
  float mean = -1;
  ASSERT_TRUE(cpu::MeanLoss(&mean, losses.data(), 4).ok());
  EXPECT_EQ(mean, 1.5f);
  EXPECT_EQ(cpu::MeanLoss(&mean, losses.data(), 0).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fp8rt

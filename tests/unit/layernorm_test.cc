// The reference LayerNorm: a hand-computed row and finite-difference checks of din, dweight, dbias.
#include "kernels/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "tests/common/finite_diff.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::MaxRelError;
using test::NumericGrad;

std::vector<double> RandomDoubles(size_t n, uint64_t seed, float mean = 0.f, float stddev = 1.f) {
  const auto f = test::RandomNormal(n, seed, mean, stddev);
  return std::vector<double>(f.begin(), f.end());
}

TEST(LayerNormReference, HandComputedRow) {
  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25; eps = 0.
  const std::vector<float> x = {1, 2, 3, 4}, w = {2, 1, 1, 0.5f}, b = {0, 1, 0, -1};
  std::vector<float> out(4), mean(1), rstd(1);
  ASSERT_TRUE(cpu::LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                    b.data(), 1, 4, 0.0f)
                  .ok());
  const double rs = 1 / std::sqrt(1.25);
  EXPECT_FLOAT_EQ(mean[0], 2.5f);
  EXPECT_FLOAT_EQ(rstd[0], static_cast<float>(rs));
  const double want[4] = {-1.5 * rs * 2, -0.5 * rs + 1, 0.5 * rs, 1.5 * rs * 0.5 - 1};
  for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(out[c], static_cast<float>(want[c])) << c;
}

TEST(LayerNormReference, EpsEntersTheVariance) {
  const std::vector<float> x = {3, 3, 3, 3}, w(4, 1.f), b(4, 0.f);
  std::vector<float> out(4), mean(1), rstd(1);
  ASSERT_TRUE(cpu::LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                    b.data(), 1, 4, 0.25f)
                  .ok());
  EXPECT_EQ(rstd[0], 2.0f);  // 1 / sqrt(0 + 0.25)
  EXPECT_EQ(out, std::vector<float>(4, 0.f));
  // Inference: no statistics wanted.
  ASSERT_TRUE(
      cpu::LayerNormForward(out.data(), nullptr, nullptr, x.data(), w.data(), b.data(), 1, 4, 0.25f)
          .ok());
}

TEST(LayerNormReference, RejectsBadArguments) {
  std::vector<float> buf(8), stat(2);
  EXPECT_EQ(cpu::LayerNormForward(buf.data(), stat.data(), stat.data(), buf.data(), buf.data(),
                                  buf.data(), 2, 0, 1e-5f)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::LayerNormForward(buf.data(), stat.data(), nullptr, buf.data(), buf.data(),
                                  buf.data(), 2, 4, 1e-5f)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::LayerNormBackward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                   buf.data(), nullptr, stat.data(), 2, 4, false)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(LayerNormReference, BackwardMatchesFiniteDifferences) {
  const int64_t N = 3, C = 7;
  // A non-zero mean and non-unit spread so every term of the gradient matters.
  std::vector<double> x = RandomDoubles(N * C, 11, 0.7f, 1.3f);
  std::vector<double> w = RandomDoubles(C, 12, 1.0f, 0.5f), b = RandomDoubles(C, 13);
  const std::vector<double> R = RandomDoubles(N * C, 14);
  const float eps = 1e-3f;
  std::vector<double> out(N * C);
  std::vector<float> mean(N), rstd(N);
  auto loss = [&] {
    EXPECT_TRUE(cpu::LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                      b.data(), N, C, eps)
                    .ok());
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * R[i];
    return l;
  };
  loss();  // mean, rstd of the unperturbed input
  const std::vector<float> mean0 = mean, rstd0 = rstd;
  std::vector<double> din(N * C, 0.0);
  std::vector<float> dw(C, 0.f), db(C, 0.f);
  ASSERT_TRUE(cpu::LayerNormBackward(din.data(), dw.data(), db.data(), R.data(), x.data(), w.data(),
                                     mean0.data(), rstd0.data(), N, C, false)
                  .ok());
  // The statistics are saved as fp32, so the analytic gradient carries ~1e-7 relative error.
  EXPECT_LT(MaxRelError(din, NumericGrad(x, loss)), 1e-6);
  EXPECT_LT(MaxRelError(dw, NumericGrad(w, loss)), 1e-6);
  EXPECT_LT(MaxRelError(db, NumericGrad(b, loss)), 1e-6);

  // accumulate_din adds to din; dweight/dbias always accumulate.
  std::vector<double> din2(N * C, 0.5);
  std::vector<float> dw2 = dw, db2 = db;
  ASSERT_TRUE(cpu::LayerNormBackward(din2.data(), dw2.data(), db2.data(), R.data(), x.data(),
                                     w.data(), mean0.data(), rstd0.data(), N, C, true)
                  .ok());
  for (size_t i = 0; i < din.size(); ++i) EXPECT_NEAR(din2[i], din[i] + 0.5, 1e-12);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_FLOAT_EQ(dw2[c], 2 * dw[c]);
    EXPECT_FLOAT_EQ(db2[c], 2 * db[c]);
  }
  // Without accumulate_din, din is overwritten whatever it held.
  std::vector<double> din3(N * C, 1e9);
  ASSERT_TRUE(cpu::LayerNormBackward(din3.data(), dw2.data(), db2.data(), R.data(), x.data(),
                                     w.data(), mean0.data(), rstd0.data(), N, C, false)
                  .ok());
  EXPECT_EQ(din3, din);
}

}  // namespace
}  // namespace fp8rt

// The reference tanh-GELU: known values and a finite-difference check of the backward.
#include "kernels/gelu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

TEST(GeluReference, KnownValues) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated in higher precision.
  const std::vector<double> x = {0, 1, -1, 2, -3, 0.5};
  const std::vector<double> want = {0.0,
                                    0.8411919906082768,
                                    -0.15880800939172324,
                                    1.954597694087775,
                                    -0.0036373920817729943,
                                    0.34571400982514394};
  std::vector<double> out(x.size());
  ASSERT_TRUE(cpu::GeluForward(out.data(), x.data(), static_cast<int64_t>(x.size())).ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-15) << x[i];
  // Far tails: identity on the right, zero on the left.
  const std::vector<float> xf = {30.f, -30.f};
  std::vector<float> of(2);
  ASSERT_TRUE(cpu::GeluForward(of.data(), xf.data(), 2).ok());
  EXPECT_EQ(of[0], 30.f);
  EXPECT_EQ(of[1], 0.f);
}

TEST(GeluReference, BackwardMatchesFiniteDifferences) {
  const auto xf = test::RandomNormal(257, 21, 0.f, 2.f);
  const auto rf = test::RandomNormal(257, 22);
  const std::vector<double> x(xf.begin(), xf.end()), R(rf.begin(), rf.end());
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<double> din(n);
  ASSERT_TRUE(cpu::GeluBackward(din.data(), x.data(), R.data(), n).ok());
  // GELU is element-wise: dL/dx_i of L = sum gelu(x) * R needs only element i.
  const double h = 1e-5;
  double err = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    double xp = x[i] + h, xm = x[i] - h, yp, ym;
    ASSERT_TRUE(cpu::GeluForward(&yp, &xp, 1).ok());
    ASSERT_TRUE(cpu::GeluForward(&ym, &xm, 1).ok());
    const double numeric = (yp - ym) / (2 * h) * R[i];
    err = std::fmax(err, std::fabs(din[i] - numeric));
    scale = std::fmax(scale, std::fabs(numeric));
  }
  EXPECT_LT(err / scale, 1e-8);
}

TEST(GeluReference, BackwardMayOverwriteDout) {
  const std::vector<float> x = {-1.5f, 0.25f, 3.f};
  std::vector<float> dout = {1.f, -2.f, 0.5f}, din(3);
  ASSERT_TRUE(cpu::GeluBackward(din.data(), x.data(), dout.data(), 3).ok());
  ASSERT_TRUE(cpu::GeluBackward(dout.data(), x.data(), dout.data(), 3).ok());
  EXPECT_EQ(dout, din);
}

TEST(GeluReference, RejectsNegativeCount) {
  float buf[1] = {0.f};
  EXPECT_EQ(cpu::GeluForward(buf, buf, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::GeluBackward<float>(buf, nullptr, buf, 1).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fp8rt

// The reference residual add: values, bf16 rounding, aliasing, and its (identity) gradient.
#include "kernels/residual.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

TEST(ResidualReference, AddsAndMayWriteInPlace) {
  std::vector<float> a = {1, 2, -3}, b = {3, 4.5f, 3};
  ASSERT_TRUE(cpu::ResidualAdd(a.data(), a.data(), b.data(), 3).ok());
  EXPECT_EQ(a, (std::vector<float>{4, 6.5f, 0}));
}

TEST(ResidualReference, Bf16SumIsRoundedOnceToNearestEven) {
  // bf16 keeps 7 mantissa bits: one ulp at 1 is 2^-7.
  const float ulp = std::ldexp(1.f, -7);
  const std::vector<bf16> a = {bf16(1.0f), bf16(1.0f), bf16(1.0f + ulp)};
  const std::vector<bf16> b = {bf16(0.5f * ulp), bf16(0.75f * ulp), bf16(0.5f * ulp)};
  std::vector<bf16> out(3);
  ASSERT_TRUE(cpu::ResidualAdd(out.data(), a.data(), b.data(), 3).ok());
  EXPECT_EQ(ToFloat(out[0]), 1.0f);            // tie, 1 is even: down
  EXPECT_EQ(ToFloat(out[1]), 1.0f + ulp);      // 0.75 ulp: up
  EXPECT_EQ(ToFloat(out[2]), 1.0f + 2 * ulp);  // tie, 1 + ulp is odd: up
}

TEST(ResidualReference, GradientIsTheIdentity) {
  // L = sum (a + b) * R: dL/da = dL/db = R, checked by central differences in fp64.
  const auto af = test::RandomNormal(33, 31), bf = test::RandomNormal(33, 32),
             rf = test::RandomNormal(33, 33);
  std::vector<double> a(af.begin(), af.end()), b(bf.begin(), bf.end()), out(33);
  const std::vector<double> R(rf.begin(), rf.end());
  auto loss = [&] {
    EXPECT_TRUE(cpu::ResidualAdd(out.data(), a.data(), b.data(), 33).ok());
    double l = 0;
    for (int i = 0; i < 33; ++i) l += out[i] * R[i];
    return l;
  };
  const double h = 1e-5;
  for (std::vector<double>* x : {&a, &b}) {
    for (int i = 0; i < 33; ++i) {
      const double x0 = (*x)[i];
      (*x)[i] = x0 + h;
      const double lp = loss();
      (*x)[i] = x0 - h;
      const double lm = loss();
      (*x)[i] = x0;
      EXPECT_NEAR((lp - lm) / (2 * h), R[i], 1e-9 * (1 + std::fabs(R[i])));
    }
  }
}

TEST(ResidualReference, RejectsNullBuffers) {
  float buf[2] = {0.f, 0.f};
  EXPECT_EQ(cpu::ResidualAdd<float>(buf, buf, nullptr, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(cpu::ResidualAdd<float>(nullptr, nullptr, nullptr, 0).ok());
}

}  // namespace
}  // namespace fp8rt

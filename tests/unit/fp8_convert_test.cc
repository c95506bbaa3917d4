// The reference FP8 conversion against the format definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/fp8.h"

namespace fp8rt {
namespace {

TEST(Fp8Reference, KnownCodesDecode) {
  EXPECT_EQ(Fp8Decode(0x00, Fp8Format::kE4M3), 0.f);
  EXPECT_TRUE(std::signbit(Fp8Decode(0x80, Fp8Format::kE4M3)));
  EXPECT_EQ(Fp8Decode(0x01, Fp8Format::kE4M3), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8Decode(0x08, Fp8Format::kE4M3), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_EQ(Fp8Decode(0x38, Fp8Format::kE4M3), 1.f);
  EXPECT_EQ(Fp8Decode(0x7e, Fp8Format::kE4M3), 448.f);
  EXPECT_EQ(Fp8Decode(0xfe, Fp8Format::kE4M3), -448.f);
  EXPECT_TRUE(std::isnan(Fp8Decode(0x7f, Fp8Format::kE4M3)));
  EXPECT_TRUE(std::isnan(Fp8Decode(0xff, Fp8Format::kE4M3)));

  EXPECT_EQ(Fp8Decode(0x01, Fp8Format::kE5M2), std::ldexp(1.f, -16));
  EXPECT_EQ(Fp8Decode(0x04, Fp8Format::kE5M2), std::ldexp(1.f, -14));
  EXPECT_EQ(Fp8Decode(0x3c, Fp8Format::kE5M2), 1.f);
  EXPECT_EQ(Fp8Decode(0x7b, Fp8Format::kE5M2), 57344.f);
  EXPECT_EQ(Fp8Decode(0x7c, Fp8Format::kE5M2), INFINITY);
  EXPECT_EQ(Fp8Decode(0xfc, Fp8Format::kE5M2), -INFINITY);
  for (uint8_t c : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) {
    EXPECT_TRUE(std::isnan(Fp8Decode(c, Fp8Format::kE5M2))) << int(c);
  }
}

class Fp8RoundTrip : public ::testing::TestWithParam<Fp8Format> {};

TEST_P(Fp8RoundTrip, EveryFiniteCodeEncodesToItself) {
  const Fp8Format f = GetParam();
  for (int c = 0; c < 256; ++c) {
    const float v = Fp8Decode(uint8_t(c), f);
    if (!std::isfinite(v)) continue;
    EXPECT_EQ(Fp8Encode(v, f), uint8_t(c)) << Fp8FormatName(f) << " code " << c << " value " << v;
  }
}

TEST_P(Fp8RoundTrip, EncodeIsMonotoneAndNearest) {
  const Fp8Format f = GetParam();
  // Nearest: |decode(encode(x)) - x| is no more than the distance to any other code.
  for (float x = -1.1f * Fp8MaxFinite(f); x <= 1.1f * Fp8MaxFinite(f);
       x += Fp8MaxFinite(f) / 4099.f) {
    const uint8_t q = Fp8Encode(x, f);
    const float got = Fp8Decode(q, f);
    const float clamped = std::fmin(std::fmax(x, -Fp8MaxFinite(f)), Fp8MaxFinite(f));
    for (int c = 0; c < 256; ++c) {
      const float other = Fp8Decode(uint8_t(c), f);
      if (!std::isfinite(other)) continue;
      ASSERT_LE(std::fabs(got - clamped), std::fabs(other - clamped)) << "x=" << x;
    }
  }
}

TEST_P(Fp8RoundTrip, TiesRoundToEven) {
  const Fp8Format f = GetParam();
  for (int c = 0; c + 1 < 0x7e; ++c) {
    const float a = Fp8Decode(uint8_t(c), f), b = Fp8Decode(uint8_t(c + 1), f);
    if (!std::isfinite(b)) continue;
    const uint8_t even = (c % 2 == 0) ? uint8_t(c) : uint8_t(c + 1);
    EXPECT_EQ(Fp8Encode(0.5f * (a + b), f), even) << "between codes " << c << " and " << c + 1;
  }
}

TEST_P(Fp8RoundTrip, SaturatesAndKeepsNaN) {
  const Fp8Format f = GetParam();
  const uint8_t maxcode = f == Fp8Format::kE4M3 ? 0x7e : 0x7b;
  EXPECT_EQ(Fp8Encode(INFINITY, f), maxcode);
  EXPECT_EQ(Fp8Encode(-INFINITY, f), maxcode | 0x80);
  EXPECT_EQ(Fp8Encode(1e30f, f), maxcode);
  EXPECT_EQ(Fp8Encode(-2.f * Fp8MaxFinite(f), f), maxcode | 0x80);
  EXPECT_EQ(Fp8Encode(std::numeric_limits<float>::quiet_NaN(), f), 0x7f);
  EXPECT_TRUE(std::isnan(Fp8Decode(Fp8Encode(-std::numeric_limits<float>::quiet_NaN(), f), f)));
  EXPECT_EQ(Fp8Encode(std::numeric_limits<float>::denorm_min(), f), 0x00);
  EXPECT_EQ(Fp8Encode(-std::numeric_limits<float>::denorm_min(), f), 0x80);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8RoundTrip,
                         ::testing::Values(Fp8Format::kE4M3, Fp8Format::kE5M2),
                         [](const auto& info) { return std::string(Fp8FormatName(info.param)); });

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16(BitsFloat(0x3f808000)).bits, 0x3f80);  // tie, even stays
  EXPECT_EQ(bf16(BitsFloat(0x3f818000)).bits, 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(bf16(BitsFloat(0x3f808001)).bits, 0x3f81);
  EXPECT_TRUE(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(float(bf16(-2.5f)), -2.5f);
}

}  // namespace
}  // namespace fp8rt

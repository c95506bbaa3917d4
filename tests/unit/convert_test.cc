// FP32 <-> BF16 buffers (kernels/convert.h), hand-checked.
#include "kernels/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace fp8rt {
namespace {

uint16_t Bits(bf16 b) { return b.bits; }

TEST(ConvertCpu, RoundsToNearestEvenAndKeepsSpecials) {
  auto f = [](uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
  };
  const std::vector<float> in = {
      1.0f,            // exact
      f(0x3f808000u),  // a tie between 0x3f80 and 0x3f81: to even
      f(0x3f818000u),  // a tie between 0x3f81 and 0x3f82: to even
      f(0x3f808001u),  // just above the tie: up
      -2.5f,
      std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::denorm_min(),  // rounds to +0
      f(0x7f7fffffu),                            // FLT_MAX rounds up to +Inf
  };
  std::vector<bf16> out(in.size());
  ASSERT_TRUE(cpu::FloatToBf16(out.data(), in.data(), static_cast<int64_t>(in.size())).ok());
  EXPECT_EQ(Bits(out[0]), 0x3f80);
  EXPECT_EQ(Bits(out[1]), 0x3f80);
  EXPECT_EQ(Bits(out[2]), 0x3f82);
  EXPECT_EQ(Bits(out[3]), 0x3f81);
  EXPECT_EQ(Bits(out[4]), 0xc020);
  EXPECT_EQ(Bits(out[5]), 0x7f80);
  EXPECT_TRUE(std::isnan(static_cast<float>(out[6])));
  EXPECT_EQ(Bits(out[7]), 0x0000);
  EXPECT_EQ(Bits(out[8]), 0x7f80);
  std::vector<float> back(in.size());
  ASSERT_TRUE(cpu::Bf16ToFloat(back.data(), out.data(), static_cast<int64_t>(out.size())).ok());
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[4], -2.5f);
  EXPECT_EQ(back[2], 1.015625f);
  EXPECT_TRUE(std::isinf(back[5]));
}

TEST(ConvertCpu, AccumulateShardCopiesOrAddsFromFp32AndBf16) {
  std::vector<float> out = {1.0f, 2.0f, -3.0f};
  const std::vector<float> f = {0.5f, -2.0f, 1e-8f};
  ASSERT_TRUE(cpu::AccumulateShard(out.data(), f.data(), 3, /*add=*/true).ok());
  EXPECT_EQ(out, (std::vector<float>{1.5f, 0.0f, -3.0f + 1e-8f}));
  const std::vector<bf16> b = {bf16(0.25f), bf16(-1.5f), bf16(1.0f / 3)};
  ASSERT_TRUE(cpu::AccumulateShard(out.data(), b.data(), 3, /*add=*/false).ok());
  EXPECT_EQ(out, (std::vector<float>{0.25f, -1.5f, static_cast<float>(bf16(1.0f / 3))}));
  ASSERT_TRUE(cpu::AccumulateShard(out.data(), b.data(), 3, /*add=*/true).ok());
  EXPECT_EQ(out[1], -3.0f);
  const Status s = cpu::AccumulateShard(out.data(), static_cast<const float*>(nullptr), 2, true);
  EXPECT_NE(s.message().find("AccumulateShard: n=2"), std::string::npos) << s.message();
}

TEST(ConvertCpu, PreconditionsNameTheOp) {
  const Status s = cpu::FloatToBf16(nullptr, nullptr, 3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("FloatToBf16: n=3"), std::string::npos) << s.message();
  EXPECT_TRUE(cpu::Bf16ToFloat(nullptr, nullptr, 0).ok());
  float x = 0;
  bf16 b;
  EXPECT_FALSE(cpu::Bf16ToFloat(&x, &b, -1).ok());
}

}  // namespace
}  // namespace fp8rt

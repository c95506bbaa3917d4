// FP32 <-> BF16 buffers on the GPU against the CPU reference, bit for bit, on awkward lengths
// with specials (NaN, infinities, denormals, ties).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/convert.h"
#include "tests/common/gpu_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;

class ConvertGpu : public test::GpuTest {};

TEST_F(ConvertGpu, BothDirectionsMatchTheReference) {
  for (const int64_t n :
       {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{1048577}, int64_t{3000001}}) {
    std::mt19937 rng(static_cast<unsigned>(n));
    std::vector<float> in(static_cast<size_t>(n));
    for (auto& x : in) {
      const uint32_t bits = static_cast<uint32_t>(rng());
      switch (rng() % 8) {
        case 0:
          x = std::numeric_limits<float>::quiet_NaN();
          break;
        case 1:
          x = -std::numeric_limits<float>::infinity();
          break;
        case 2: {
          const uint32_t t = (bits & 0xffff0000u) | 0x8000u;
          std::memcpy(&x, &t, 4);
          break;
        }
        default:
          std::memcpy(&x, &bits, 4);
      }
    }
    std::vector<bf16> want(in.size());
    ASSERT_TRUE(cpu::FloatToBf16(want.data(), in.data(), n).ok());
    DeviceBuffer<float> d_in(in);
    DeviceBuffer<bf16> d_out(in.size());
    ASSERT_TRUE(cuda::FloatToBf16(d_out.get(), d_in.get(), n, nullptr).ok());
    const std::vector<bf16> got = d_out.Download();
    for (int64_t i = 0; i < n; ++i) {
      const bool both_nan =
          std::isnan(static_cast<float>(got[i])) && std::isnan(static_cast<float>(want[i]));
      ASSERT_TRUE(both_nan || got[i].bits == want[i].bits) << "n " << n << " i " << i;
    }
    std::vector<float> back_want(in.size());
    ASSERT_TRUE(cpu::Bf16ToFloat(back_want.data(), want.data(), n).ok());
    DeviceBuffer<bf16> d_b(want);
    DeviceBuffer<float> d_back(in.size());
    ASSERT_TRUE(cuda::Bf16ToFloat(d_back.get(), d_b.get(), n, nullptr).ok());
    const std::vector<float> back = d_back.Download();
    ASSERT_EQ(std::memcmp(back.data(), back_want.data(), back.size() * 4), 0) << "n " << n;
  }
  EXPECT_FALSE(cuda::FloatToBf16(nullptr, nullptr, 2, nullptr).ok());
}

// ZeRO-3's shard accumulation, copy and add, from FP32 and BF16, bit for bit against the CPU.
TEST_F(ConvertGpu, AccumulateShardMatchesTheReference) {
  for (const int64_t n : {int64_t{1}, int64_t{257}, int64_t{1048577}}) {
    std::mt19937 rng(static_cast<unsigned>(n) + 7);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> base(static_cast<size_t>(n)), in(base.size());
    for (auto& x : base) x = normal(rng);
    for (auto& x : in) x = normal(rng);
    std::vector<bf16> in16(in.size());
    ASSERT_TRUE(cpu::FloatToBf16(in16.data(), in.data(), n).ok());
    for (const bool add : {false, true}) {
      for (const bool b16 : {false, true}) {
        std::vector<float> want = base;
        ASSERT_TRUE((b16 ? cpu::AccumulateShard(want.data(), in16.data(), n, add)
                         : cpu::AccumulateShard(want.data(), in.data(), n, add))
                        .ok());
        DeviceBuffer<float> d_out(base);
        DeviceBuffer<float> d_in(in);
        DeviceBuffer<bf16> d_in16(in16);
        ASSERT_TRUE((b16 ? cuda::AccumulateShard(d_out.get(), d_in16.get(), n, add, nullptr)
                         : cuda::AccumulateShard(d_out.get(), d_in.get(), n, add, nullptr))
                        .ok());
        const std::vector<float> got = d_out.Download();
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
            << "n " << n << " add " << add << " bf16 " << b16;
      }
    }
  }
}

}  // namespace
}  // namespace fp8rt

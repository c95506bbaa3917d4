// The CUDA casts of FP8 block scaling against the CPU references (kernels/block_quantize.h):
// codes and scales bit for bit (padding included), for float and bf16 inputs, both formats,
// power-of-two scales, partial blocks both ways, zero and NaN blocks, and the 128x128 transposed
// copy. (Not yet run on a GPU when written: the session's device time was spent.)
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/block_quantize.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;

template <typename T>
std::vector<T> Input(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = T(g(rng) * std::ldexp(1.0f, static_cast<int>(i % 7) * 3 - 9));
  }
  if (n > 300) v[7] = T(std::nanf("")), v[200] = T(INFINITY);  // a NaN and an inf somewhere
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class BlockQuantizeGpu : public test::GpuTest {
 protected:
  template <typename T>
  void Run(int64_t rows, int64_t cols, Fp8Format f, bool pow2) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " " << Fp8FormatName(f)
                                      << (pow2 ? " pow2" : ""));
    const auto x = Input<T>(rows * cols, static_cast<uint32_t>(rows * 7 + cols));
    std::vector<uint8_t> q(x.size()), qt(x.size());
    std::vector<float> s(BlockLayout::Vec128ScaleCount(rows, cols));
    ASSERT_TRUE(cpu::QuantizeVec128(x.data(), rows, cols, f, pow2, q.data(), s.data()).ok());
    DeviceBuffer<T> d_x(x);
    DeviceBuffer<uint8_t> d_q(q.size()), d_qt(q.size());
    DeviceBuffer<float> d_s(s.size());
    d_q.Poison(), d_s.Poison();
    ASSERT_TRUE(cuda::QuantizeVec128(d_x.get(), rows, cols, f, pow2, d_q.get(), d_s.get(), nullptr).ok());
    EXPECT_EQ(d_q.Download(), q) << "vec128 codes";
    EXPECT_TRUE(SameBits(d_s.Download(), s)) << "vec128 scales";

    std::vector<float> sb(BlockLayout::Blk128ScaleCount(rows, cols));
    std::vector<float> sbt(BlockLayout::Blk128ScaleCount(cols, rows));
    ASSERT_TRUE(cpu::QuantizeBlk128(x.data(), rows, cols, f, pow2, q.data(), sb.data(), qt.data(),
                                    sbt.data()).ok());
    DeviceBuffer<float> d_sb(sb.size()), d_sbt(sbt.size());
    d_q.Poison(), d_qt.Poison(), d_sb.Poison(), d_sbt.Poison();
    ASSERT_TRUE(cuda::QuantizeBlk128(d_x.get(), rows, cols, f, pow2, d_q.get(), d_sb.get(),
                                     d_qt.get(), d_sbt.get(), nullptr).ok());
    EXPECT_EQ(d_q.Download(), q) << "blk128 codes";
    EXPECT_EQ(d_qt.Download(), qt) << "blk128 transposed codes";
    EXPECT_TRUE(SameBits(d_sb.Download(), sb)) << "blk128 scales";
    EXPECT_TRUE(SameBits(d_sbt.Download(), sbt)) << "blk128 transposed scales";
  }
};

TEST_F(BlockQuantizeGpu, MatchesTheReferenceBitForBit) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},    {3, 127},  {5, 128},  {7, 129},
                                                {64, 300}, {130, 257}, {256, 256}, {1000, 768}};
  for (const auto& [rows, cols] : shapes) {
    for (const Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      for (const bool pow2 : {false, true}) {
        Run<float>(rows, cols, f, pow2);
        Run<bf16>(rows, cols, f, pow2);
      }
    }
  }
}

TEST_F(BlockQuantizeGpu, PreconditionsAreCheckedBeforeLaunching) {
  DeviceBuffer<float> x(16), s(16);
  DeviceBuffer<uint8_t> q(16);
  const Status r1 =
      cuda::QuantizeVec128(x.get(), -1, 4, Fp8Format::kE4M3, false, q.get(), s.get(), nullptr);
  EXPECT_NE(r1.message().find("rows=-1"), std::string::npos) << r1.message();
  const Status r2 = cuda::QuantizeBlk128(x.get(), 4, 4, Fp8Format::kE4M3, false, q.get(), s.get(),
                                         q.get(), nullptr, nullptr);
  EXPECT_NE(r2.message().find("data_t and scale_inv_t"), std::string::npos) << r2.message();
}

}  // namespace
}  // namespace fp8rt

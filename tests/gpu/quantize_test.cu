// CUDA quantize/dequantize/amax/current scaling against the CPU reference: FP8 codes (both
// orientations), amax, saturation counts and scale_inv must match exactly; the FP8 byte transpose
// and ScaleFromAmax too. The fused casts are in cast_transpose_test.cu.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/quantize.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"
#include "tests/gpu/quantize_test_util.h"

namespace fp8rt {
namespace {

using test::AllCases;
using test::Case;
using test::CaseName;
using test::DeviceBuffer;
using test::DeviceFp8;
using test::ExpectSameTelemetry;
using test::HostFp8;
using test::Inputs;
using test::SameBits;
using test::SameCodes;
using test::SaturatingScale;

class QuantizeGpu : public test::QuantizeCaseGpuTest {
 protected:
  template <typename T>
  void RunQuantize() {
    const Case& c = GetParam();
    const int64_t rows = c.shape.rows, cols = c.shape.cols, n = rows * cols;
    const std::vector<T> in = test::CastVector<T>(Inputs(n, 17 + n));
    const float scale = SaturatingScale(c.format);
    const float amax0 = 0.125f;  // accumulated into: the max must come out as max(0.125, ...)

    HostFp8 want(rows, cols, c.format, scale, c.transpose, amax0);
    uint64_t want_sat = 5;
    ASSERT_TRUE(cpu::Quantize(in.data(), want.t, &want_sat).ok());
    ASSERT_GT(want_sat, 5u) << "the inputs must saturate somewhere";

    DeviceBuffer<T> d_in(in);
    DeviceFp8 got(rows, cols, c.format, c.transpose, scale, amax0);
    DeviceBuffer<unsigned long long> d_sat(std::vector<unsigned long long>{5});
    ASSERT_TRUE(cuda::Quantize(d_in.get(), got.t, d_sat.get(), nullptr).ok());

    EXPECT_TRUE(SameCodes(got.data.Download(), want.data, "data"));
    if (c.transpose) EXPECT_TRUE(SameCodes(got.data_t.Download(), want.data_t, "data_t"));
    EXPECT_TRUE(SameBits(got.scalars.Download()[0], scale, "scale (unchanged)"));
    ExpectSameTelemetry(got, want, d_sat, want_sat);

    // Dequantize the reference codes on both sides.
    std::vector<T> want_x(n), got_x;
    ASSERT_TRUE(cpu::Dequantize(want.t, want_x.data()).ok());
    DeviceBuffer<T> d_out(n);
    d_out.Poison();
    ASSERT_TRUE(cuda::Dequantize(got.t, d_out.get(), nullptr).ok());
    got_x = d_out.Download();
    EXPECT_TRUE(test::AllClose(test::ToFloatVector(got_x), test::ToFloatVector(want_x),
                               test::ToleranceFor(test::OpKind::kElementwise, DTypeOf<T>()),
                               "dequantize"));
  }

  template <typename T>
  void RunCurrentScaling() {
    const Case& c = GetParam();
    const int64_t rows = c.shape.rows, cols = c.shape.cols, n = rows * cols;
    const std::vector<T> in = test::CastVector<T>(Inputs(n, 99 + n));
    HostFp8 want(rows, cols, c.format, 3.f, c.transpose, 1e9f);
    uint64_t want_sat = 0;
    ASSERT_TRUE(cpu::QuantizeCurrentScaling(in.data(), want.t, /*margin=*/1, &want_sat).ok());
    DeviceBuffer<T> d_in(in);
    DeviceFp8 got(rows, cols, c.format, c.transpose, 3.f, 1e9f);
    DeviceBuffer<unsigned long long> d_sat(std::vector<unsigned long long>{0});
    ASSERT_TRUE(
        cuda::QuantizeCurrentScaling(d_in.get(), got.t, /*margin=*/1, d_sat.get(), nullptr).ok());
    const std::vector<float> scalars = got.scalars.Download();
    EXPECT_TRUE(SameBits(scalars[0], want.scale, "scale"));
    EXPECT_TRUE(SameBits(scalars[1], want.scale_inv, "scale_inv"));
    EXPECT_TRUE(SameBits(scalars[2], want.amax, "amax"));
    EXPECT_EQ(d_sat.Download()[0], want_sat);
    EXPECT_TRUE(SameCodes(got.data.Download(), want.data, "data"));
    if (c.transpose) EXPECT_TRUE(SameCodes(got.data_t.Download(), want.data_t, "data_t"));
  }

  template <typename T>
  void RunAmax() {
    const Case& c = GetParam();
    const int64_t n = c.shape.rows * c.shape.cols;
    const std::vector<T> in = test::CastVector<T>(Inputs(n, 5 + n));
    float want = 0.5f;
    ASSERT_TRUE(cpu::ComputeAmax(in.data(), n, &want).ok());
    DeviceBuffer<T> d_in(in);
    DeviceBuffer<float> d_amax(std::vector<float>{0.5f});
    ASSERT_TRUE(cuda::ComputeAmax(d_in.get(), n, d_amax.get(), nullptr).ok());
    EXPECT_TRUE(SameBits(d_amax.Download()[0], want, "amax"));
  }
};

TEST_P(QuantizeGpu, MatchesReferenceExactly) {
  if (GetParam().dtype == DType::kFloat32) {
    RunQuantize<float>();
  } else {
    RunQuantize<bf16>();
  }
}

TEST_P(QuantizeGpu, CurrentScalingMatchesReferenceExactly) {
  if (GetParam().dtype == DType::kFloat32) {
    RunCurrentScaling<float>();
  } else {
    RunCurrentScaling<bf16>();
  }
}

TEST_P(QuantizeGpu, AmaxMatchesReferenceExactly) {
  if (GetParam().transpose) GTEST_SKIP() << "amax does not depend on the transpose flag";
  if (GetParam().dtype == DType::kFloat32) {
    RunAmax<float>();
  } else {
    RunAmax<bf16>();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, QuantizeGpu, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return CaseName(info.param); });

// Buffers offset from their allocation so no vector path applies: the guarded code everywhere.
class QuantizeGpuMisc : public test::GpuTest {};

TEST_F(QuantizeGpuMisc, UnalignedBuffersTakeTheGuardedPaths) {
  const int64_t rows = 64, cols = 96, n = rows * cols;
  const std::vector<float> in = Inputs(n, 3);
  const float scale = SaturatingScale(Fp8Format::kE4M3);
  for (bool transpose : {true, false}) {
    HostFp8 want(rows, cols, Fp8Format::kE4M3, scale, transpose, 0.f);
    uint64_t want_sat = 0;
    ASSERT_TRUE(cpu::Quantize(in.data(), want.t, &want_sat).ok());

    std::vector<float> padded(n + 1);
    std::copy(in.begin(), in.end(), padded.begin() + 1);
    DeviceBuffer<float> d_in(padded);
    DeviceFp8 got(rows, cols + 1, Fp8Format::kE4M3, transpose, scale, 0.f);  // room for +1
    got.t.cols = cols;
    got.t.data += 1;
    if (transpose) got.t.data_t += 1;
    DeviceBuffer<unsigned long long> d_sat(std::vector<unsigned long long>{0});
    ASSERT_TRUE(cuda::Quantize(d_in.get() + 1, got.t, d_sat.get(), nullptr).ok());
    std::vector<uint8_t> data = got.data.Download();
    EXPECT_TRUE(
        SameCodes(std::vector<uint8_t>(data.begin() + 1, data.begin() + 1 + n), want.data, "data"));
    if (transpose) {
      std::vector<uint8_t> data_t = got.data_t.Download();
      EXPECT_TRUE(SameCodes(std::vector<uint8_t>(data_t.begin() + 1, data_t.begin() + 1 + n),
                            want.data_t, "data_t"));
    }
    EXPECT_EQ(d_sat.Download()[0], want_sat);
    EXPECT_TRUE(SameBits(got.scalars.Download()[2], want.amax, "amax"));

    DeviceBuffer<float> d_out(n + 1);
    d_out.Poison();
    Fp8Tensor deq = got.t;
    ASSERT_TRUE(cuda::Dequantize(deq, d_out.get() + 1, nullptr).ok());
    std::vector<float> want_x(n);
    ASSERT_TRUE(cpu::Dequantize(want.t, want_x.data()).ok());
    const std::vector<float> got_x = d_out.Download();
    EXPECT_TRUE(test::AllClose(std::vector<float>(got_x.begin() + 1, got_x.end()), want_x,
                               test::ToleranceFor(test::OpKind::kElementwise, DType::kFloat32),
                               "dequantize"));
  }
}

TEST_F(QuantizeGpuMisc, NanAndInfInputsMatchTheReference) {
  const int64_t rows = 256, cols = 128, n = rows * cols;  // one full fp32 tile: the fast path
  std::vector<float> in = Inputs(n, 8);
  in[77] = -INFINITY;
  in[5000] = -std::numeric_limits<float>::quiet_NaN();
  for (bool transpose : {true, false}) {
    HostFp8 want(rows, cols, Fp8Format::kE5M2, 1.f, transpose, 0.f);
    uint64_t want_sat = 0;
    ASSERT_TRUE(cpu::Quantize(in.data(), want.t, &want_sat).ok());
    ASSERT_TRUE(std::isnan(want.amax));
    DeviceBuffer<float> d_in(in);
    DeviceFp8 got(rows, cols, Fp8Format::kE5M2, transpose, 1.f, 0.f);
    DeviceBuffer<unsigned long long> d_sat(std::vector<unsigned long long>{0});
    ASSERT_TRUE(cuda::Quantize(d_in.get(), got.t, d_sat.get(), nullptr).ok());
    EXPECT_TRUE(SameCodes(got.data.Download(), want.data, "data"));
    if (transpose) EXPECT_TRUE(SameCodes(got.data_t.Download(), want.data_t, "data_t"));
    EXPECT_TRUE(SameBits(got.scalars.Download()[2], want.amax, "amax (NaN)"));
    EXPECT_EQ(d_sat.Download()[0], want_sat);
  }
}

TEST_F(QuantizeGpuMisc, NullTelemetryAndEmptyTensors) {
  const std::vector<float> in = Inputs(16 * 16, 4);
  // No amax, no counter: codes still right.
  HostFp8 want(16, 16, Fp8Format::kE4M3, 100.f, true, 0.f);
  ASSERT_TRUE(cpu::Quantize(in.data(), want.t).ok());
  DeviceBuffer<float> d_in(in);
  DeviceFp8 got(16, 16, Fp8Format::kE4M3, true, 100.f, 0.f);
  got.t.amax = nullptr;
  ASSERT_TRUE(cuda::Quantize(d_in.get(), got.t, nullptr, nullptr).ok());
  EXPECT_TRUE(SameCodes(got.data.Download(), want.data, "data"));
  EXPECT_TRUE(SameCodes(got.data_t.Download(), want.data_t, "data_t"));
  EXPECT_EQ(got.scalars.Download()[2], 0.f) << "amax untouched";

  // Empty: only scale_inv is written.
  for (bool transpose : {true, false}) {
    DeviceFp8 empty(0, 16, Fp8Format::kE4M3, transpose, 4.f, -1.f);
    DeviceBuffer<unsigned long long> d_sat(std::vector<unsigned long long>{3});
    ASSERT_TRUE(cuda::Quantize<float>(nullptr, empty.t, d_sat.get(), nullptr).ok());
    const std::vector<float> s = empty.scalars.Download();
    EXPECT_EQ(s[1], 0.25f);
    EXPECT_EQ(s[2], -1.f);
    EXPECT_EQ(d_sat.Download()[0], 3u);
  }
}

TEST_F(QuantizeGpuMisc, PreconditionsAreCheckedBeforeLaunching) {
  DeviceFp8 t(4, 4, Fp8Format::kE4M3, true, 1.f, 0.f);
  DeviceBuffer<float> d_in(16);
  Fp8Tensor bad = t.t;
  bad.data_t = bad.data;
  const Status s1 = cuda::Quantize(d_in.get(), bad, nullptr, nullptr);
  EXPECT_EQ(s1.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s1.message().find("data_t"), std::string::npos) << s1.message();
  const Status s2 = cuda::QuantizeCurrentScaling(d_in.get(), t.t, -1, nullptr, nullptr);
  EXPECT_NE(s2.message().find("margin=-1"), std::string::npos) << s2.message();
  const Status s3 = cuda::ComputeAmax(d_in.get(), 16, nullptr, nullptr);
  EXPECT_NE(s3.message().find("amax"), std::string::npos) << s3.message();
}

// The FP8 byte transpose (the dgrad's weight operand) against the CPU reference on shapes that
// leave partial tiles in both directions, a single row or column, and a tall and a wide case;
// those with both sides multiples of 4 take the word kernel (64 x 64 tiles), partial tiles
// included (4 x 4, 36 x 100, 196 x 68), the rest the byte kernel.
TEST_F(QuantizeGpuMisc, TransposeFp8MatchesReference) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},     {1, 77},   {77, 1},    {31, 33},
                                                {32, 32},   {33, 95},  {257, 3},   {3, 1000},
                                                {768, 2304}, {4, 4},   {36, 100},  {196, 68},
                                                {64, 64},   {2048, 6144}, {50304, 16}};
  std::mt19937 rng(7);
  for (const auto& [rows, cols] : shapes) {
    std::vector<uint8_t> in(static_cast<size_t>(rows * cols)), want(in.size());
    for (auto& b : in) b = static_cast<uint8_t>(rng());
    ASSERT_TRUE(cpu::TransposeFp8(want.data(), in.data(), rows, cols).ok());
    DeviceBuffer<uint8_t> d_in(in), d_out(in.size());
    d_out.Poison();
    ASSERT_TRUE(cuda::TransposeFp8(d_out.get(), d_in.get(), rows, cols, nullptr).ok());
    EXPECT_EQ(d_out.Download(), want) << rows << " x " << cols;
  }
  DeviceBuffer<uint8_t> b(16);
  EXPECT_FALSE(cuda::TransposeFp8(b.get(), b.get(), 4, 4, nullptr).ok()) << "in place is refused";
}

// ScaleFromAmax (fp8.scaling: current's middle step, after an amax reduction): the device's
// scale equals the reference's for ordinary, tiny, huge, zero, inf and NaN amaxes (the last three
// keep the old scale), in both formats and at margins 0 and 3.
TEST_F(QuantizeGpuMisc, ScaleFromAmaxMatchesReference) {
  const float amaxes[] = {1.0f, 3.7e-3f, 448.0f, 1e-30f, 1e-45f, 3e38f, 0.0f,
                          std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  for (const Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (const int margin : {0, 3}) {
      for (const float a : amaxes) {
        float want = 0.25f;  // the old scale
        ASSERT_TRUE(cpu::ScaleFromAmax(&a, &want, f, margin).ok());
        DeviceBuffer<float> d(std::vector<float>{a, 0.25f});
        ASSERT_TRUE(cuda::ScaleFromAmax(d.get(), d.get() + 1, f, margin, nullptr).ok());
        const float got = d.Download()[1];
        EXPECT_EQ(std::memcmp(&got, &want, 4), 0)
            << "amax " << a << " margin " << margin << ": " << got << " vs " << want;
      }
    }
  }
  DeviceBuffer<float> d(2);
  EXPECT_FALSE(cuda::ScaleFromAmax(d.get(), d.get() + 1, Fp8Format::kE4M3, 33, nullptr).ok());
  EXPECT_FALSE(cuda::ScaleFromAmax(nullptr, d.get(), Fp8Format::kE4M3, 0, nullptr).ok());
}

}  // namespace
}  // namespace fp8rt

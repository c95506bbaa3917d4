// FP8 conversion on the GPU is bit-identical to the CPU reference.
#include <cmath>

#include "kernels/fp8.h"
#include "tests/common/fp8_sweep.h"
#include "tests/common/gpu_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;

class Fp8ConvertGpu : public test::GpuTest, public ::testing::WithParamInterface<Fp8Format> {};

TEST_P(Fp8ConvertGpu, All256CodesDecodeLikeTheReference) {
  const Fp8Format f = GetParam();
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = uint8_t(c);
  DeviceBuffer<uint8_t> d_codes(codes);
  DeviceBuffer<float> d_out(256);
  d_out.Poison();
  FP8RT_CHECK_OK(cuda::Fp8DecodeArray(d_codes.get(), d_out.get(), 256, f, nullptr));
  const std::vector<float> got = d_out.Download();
  for (int c = 0; c < 256; ++c) {
    const float want = Fp8Decode(uint8_t(c), f);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[c])) << "code " << c;
    } else {
      EXPECT_EQ(FloatBits(got[c]), FloatBits(want)) << "code " << c << ": " << got[c] << " vs " << want;
    }
  }
}

TEST_P(Fp8ConvertGpu, DenseFloatSweepEncodesBitIdentically) {
  const Fp8Format f = GetParam();
  const std::vector<float> in = test::Fp8ConversionSweep(f);
  std::vector<uint8_t> want(in.size());
  cpu::Fp8EncodeArray(in.data(), want.data(), in.size(), f);
  DeviceBuffer<float> d_in(in);
  DeviceBuffer<uint8_t> d_out(in.size());
  d_out.Poison();
  FP8RT_CHECK_OK(cuda::Fp8EncodeArray(d_in.get(), d_out.get(), in.size(), f, nullptr));
  const std::vector<uint8_t> got = d_out.Download();
  size_t mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (got[i] != want[i] && mismatches++ < 10) {
      ADD_FAILURE() << Fp8FormatName(f) << " input " << in[i] << " (bits 0x" << std::hex
                    << FloatBits(in[i]) << "): gpu 0x" << int(got[i]) << ", cpu 0x"
                    << int(want[i]) << std::dec;
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << in.size() << " inputs";
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8ConvertGpu,
                         ::testing::Values(Fp8Format::kE4M3, Fp8Format::kE5M2),
                         [](const auto& info) { return std::string(Fp8FormatName(info.param)); });

}  // namespace
}  // namespace fp8rt

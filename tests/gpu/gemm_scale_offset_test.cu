// FP8 GEMMs and the alignment of their scale_inv pointers: cuBLASLt (13.1, H200) refuses a
// scale pointer that is not 16-byte aligned with a bare "not supported", so GemmRunner checks it
// and says so; 16-byte-aligned pointers inside a shared array work.
#include "kernels/gemm.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

class GemmScaleOffsetGpu : public test::GpuTest,
                           public ::testing::WithParamInterface<std::tuple<int, bool, bool, int>> {};

TEST_P(GemmScaleOffsetGpu, FpropRuns) {
  if (test::ComputeCapability() < 89) GTEST_SKIP() << "FP8 needs compute capability 8.9";
  const auto [offsets, with_bias, fast, shape] = GetParam();
  const int x_off = offsets / 100, w_off = offsets % 100;  // in floats
  // The shapes of the tiny, quickstart and test models' linear layers.
  const int64_t shapes[][3] = {{1024, 384, 128}, {128, 192, 64}, {256, 64, 256}, {1024, 128, 512}};
  const int64_t M = shapes[shape][0], N = shapes[shape][1], K = shapes[shape][2];
  std::vector<uint8_t> xs(M * K), ws(N * K);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = uint8_t(0x30 + i % 7);
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = uint8_t(0x31 + i % 5);
  test::DeviceBuffer<uint8_t> x(xs), w(ws);
  test::DeviceBuffer<float> scales(std::vector<float>(64, 0.5f));
  test::DeviceBuffer<bf16> bias(std::vector<bf16>(N, bf16(1.0f))), y(M * N);
  Fp8Tensor xt, wt;
  xt.data = x.get(), xt.rows = M, xt.cols = K, xt.scale_inv = scales.get() + x_off;
  wt.data = w.get(), wt.rows = N, wt.cols = K, wt.scale_inv = scales.get() + w_off;
  auto args = Fp8Fprop(xt, wt, y.get(), DType::kBFloat16, with_bias ? bias.get() : nullptr, fast);
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  auto runner = GemmRunner::Create();
  ASSERT_TRUE(runner.ok());
  const Status s = (*runner)->Run(*args, nullptr);
  if (x_off % 4 == 0 && w_off % 4 == 0) {
    EXPECT_TRUE(s.ok()) << s.ToString();
  } else {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("16-byte"), std::string::npos) << s.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Offsets, GemmScaleOffsetGpu,
                         ::testing::Combine(::testing::Values(0, 4, 416, 1, 102, 308), ::testing::Bool(),
                                            ::testing::Bool(), ::testing::Range(0, 4)));

}  // namespace
}  // namespace fp8rt

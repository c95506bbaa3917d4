// Flash attention (BF16) against the CPU reference: output, saved log-sum-exp and the backward's
// dq/dk/dv over head sizes 16..128 and sequence lengths that are not multiples of the tiles;
// bit-for-bit determinism of the backward; clear errors for shapes it cannot take.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention.h"
#include "tests/common/attention_ref.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;

const AttentionShape kShapes[] = {
    {1, 1, 1, 16},   {2, 37, 3, 16},   {1, 100, 2, 32},  {3, 129, 2, 64},
    {4, 128, 4, 64}, {1, 1024, 12, 64}, {2, 65, 1, 128}, {1, 517, 4, 128},
};

class FlashAttentionGpu : public test::GpuTest,
                          public ::testing::WithParamInterface<AttentionShape> {};

TEST_P(FlashAttentionGpu, MatchesReference) {
  if (test::ComputeCapability() < 80) GTEST_SKIP() << "bf16 mma needs sm_80";
  const AttentionShape s = GetParam();
  const Status supported = cuda::FlashAttentionCheck(s);
  ASSERT_TRUE(supported.ok()) << supported.ToString();
  const test::AttentionReference ref = test::MakeAttentionReference(s, 11, 12);
  ASSERT_FALSE(HasFailure()) << "the CPU reference failed";
  DeviceBuffer<bf16> d_qkv(ref.qkv), d_dout(ref.dout), d_out(ref.out.size()),
      d_dqkv(ref.qkv.size());
  DeviceBuffer<float> d_lse(ref.lse.size());
  DeviceBuffer<uint8_t> scratch(cuda::FlashAttentionScratchBytes(s));
  const test::Tolerance tol = test::ToleranceFor(test::OpKind::kAttention, DType::kBFloat16);
  const std::vector<cuda::FlashTiling> tilings = cuda::FlashTilings(s.HS);
  ASSERT_FALSE(tilings.empty());
  // Every compiled tiling (the default and the benchmark's alternatives) must be right.
  for (int t = 0; t < static_cast<int>(tilings.size()); ++t) {
    SCOPED_TRACE(StrCat("tiling ", t, ": ", tilings[t].Name()));
    d_out.Poison(), d_lse.Poison(), d_dqkv.Poison(), scratch.Poison();
    const Status fwd =
        cuda::FlashAttentionForward(d_out.get(), d_lse.get(), d_qkv.get(), s, nullptr, t);
    ASSERT_TRUE(fwd.ok()) << fwd.ToString();
    const Status bwd =
        cuda::FlashAttentionBackward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                                     d_lse.get(), scratch.get(), scratch.size(), s, nullptr, t);
    ASSERT_TRUE(bwd.ok()) << bwd.ToString();

    const std::vector<float> got_out = test::ToFloatVector(d_out.Download());
    EXPECT_TRUE(test::RelL2Close(got_out, test::ToFloatVector(ref.out), tol, "out"));
    // The log-sum-exp of bf16 inputs with FP32 dot products: absolute error, in log2 units.
    EXPECT_TRUE(test::AllClose(d_lse.Download(), ref.lse, test::Tolerance{2e-3, 1e-4, 0}, "lse"));
    const std::vector<bf16> got_dqkv = d_dqkv.Download();
    test::ExpectAttentionGradientsClose(test::ToFloatVector(got_dqkv),
                                        test::ToFloatVector(ref.dqkv), s, tol, t == 0);

    // Deterministic: a second backward gives the same bits.
    d_dqkv.Poison();
    ASSERT_TRUE(cuda::FlashAttentionBackward(d_dqkv.get(), d_dout.get(), d_qkv.get(),
                                             d_out.get(), d_lse.get(), scratch.get(),
                                             scratch.size(), s, nullptr, t)
                    .ok());
    EXPECT_TRUE(test::SameBits(d_dqkv.Download(), got_dqkv, "dqkv"));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionGpu, ::testing::ValuesIn(kShapes),
                         [](const auto& info) { return test::AttentionShapeName(info.param); });

class FlashAttentionGpuErrors : public test::GpuTest {};

TEST_F(FlashAttentionGpuErrors, UnsupportedHeadSizeIsNamed) {
  const AttentionShape s{1, 16, 2, 48};
  const Status st = cuda::FlashAttentionCheck(s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("head size 48"), std::string::npos) << st.ToString();
  DeviceBuffer<bf16> qkv(16 * 3 * 96), out(16 * 96);
  DeviceBuffer<float> lse(2 * 16);
  EXPECT_EQ(cuda::FlashAttentionForward(out.get(), lse.get(), qkv.get(), s, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(FlashAttentionGpuErrors, SmallScratchIsAnInvalidArgument) {
  const AttentionShape s{1, 16, 2, 64};
  DeviceBuffer<bf16> qkv(16 * 3 * 128), out(16 * 128), dout(16 * 128), dqkv(16 * 3 * 128);
  DeviceBuffer<float> lse(2 * 16);
  DeviceBuffer<uint8_t> scratch(cuda::FlashAttentionScratchBytes(s));
  const Status st =
      cuda::FlashAttentionBackward(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.get(),
                                   scratch.get(), scratch.size() - 1, s, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("scratch_bytes"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace fp8rt

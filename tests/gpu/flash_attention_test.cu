// Flash attention (BF16) against the CPU reference: output, saved log-sum-exp and the backward's
// dq/dk/dv over head sizes 16..128 and sequence lengths that are not multiples of the tiles;
// bit-for-bit determinism of the backward; clear errors for shapes it cannot take.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention.h"
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
  const int64_t C = s.C(), n_qkv = s.B * s.T * 3 * C, n_out = s.B * s.T * C;
  const int64_t n_rows = s.B * s.NH * s.T;
  const std::vector<bf16> qkv = test::CastVector<bf16>(test::RandomUniform(n_qkv, 11, -2.f, 2.f));
  const std::vector<bf16> dout = test::CastVector<bf16>(test::RandomUniform(n_out, 12));

  std::vector<bf16> out(n_out), att(s.B * s.NH * s.T * s.T), dqkv(n_qkv);
  std::vector<float> lse(n_rows);
  ASSERT_TRUE(cpu::AttentionForward(out.data(), att.data(), qkv.data(), s).ok());
  ASSERT_TRUE(cpu::AttentionLse(lse.data(), qkv.data(), s).ok());
  ASSERT_TRUE(cpu::AttentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), s).ok());

  DeviceBuffer<bf16> d_qkv(qkv), d_dout(dout), d_out(n_out), d_dqkv(n_qkv);
  DeviceBuffer<float> d_lse(n_rows);
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
    EXPECT_TRUE(test::RelL2Close(got_out, test::ToFloatVector(out), tol, "out"));
    // The log-sum-exp of bf16 inputs with FP32 dot products: absolute error, in log2 units.
    EXPECT_TRUE(test::AllClose(d_lse.Download(), lse, test::Tolerance{2e-3, 1e-4, 0}, "lse"));
    const std::vector<bf16> got_dqkv = d_dqkv.Download();
    const std::vector<float> got = test::ToFloatVector(got_dqkv), want = test::ToFloatVector(dqkv);
    EXPECT_TRUE(test::RelL2Close(got, want, tol, "dqkv"));
    // Each of dq, dk, dv on its own (a slip in one would hide in the norm of the three).
    const char* names[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; ++part) {
      std::vector<float> g, w;
      for (int64_t r = 0; r < s.B * s.T; ++r) {
        for (int64_t c = 0; c < C; ++c) {
          g.push_back(got[r * 3 * C + part * C + c]);
          w.push_back(want[r * 3 * C + part * C + c]);
        }
      }
      EXPECT_TRUE(test::RelL2Close(g, w, tol, names[part]));
      if (t == 0) {
        ::testing::Test::RecordProperty(StrCat("rel_l2_", names[part]),
                                        std::to_string(test::RelL2(g, w)));
      }
    }

    // Deterministic: a second backward gives the same bits.
    d_dqkv.Poison();
    ASSERT_TRUE(cuda::FlashAttentionBackward(d_dqkv.get(), d_dout.get(), d_qkv.get(),
                                             d_out.get(), d_lse.get(), scratch.get(),
                                             scratch.size(), s, nullptr, t)
                    .ok());
    const std::vector<bf16> again = d_dqkv.Download();
    for (int64_t i = 0; i < n_qkv; ++i) {
      ASSERT_EQ(again[i].bits, got_dqkv[i].bits) << "dqkv[" << i << "] differs between runs";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionGpu, ::testing::ValuesIn(kShapes),
                         [](const auto& info) {
                           const AttentionShape& s = info.param;
                           return StrCat("B", s.B, "_T", s.T, "_NH", s.NH, "_HS", s.HS);
                         });

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

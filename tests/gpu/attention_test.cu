// CUDA causal attention (forward and backward) against the CPU reference, float and bf16, and
// run-to-run determinism of the backward.
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;

GemmRunner& Runner() {
  // Never destroyed: at exit the CUDA runtime may already be gone.
  static GemmRunner* runner = [] {
    auto r = GemmRunner::Create();
    FP8RT_CHECK_OK(r.status());
    return std::move(r).value().release();
  }();
  return *runner;
}

const AttentionShape kShapes[] = {
    {1, 16, 1, 16}, {2, 37, 3, 16}, {4, 128, 4, 64}, {1, 1024, 12, 64}};

template <typename T>
void RunCase(const AttentionShape& s) {
  const int64_t C = s.C(), n_qkv = s.B * s.T * 3 * C, n_out = s.B * s.T * C;
  const int64_t n_att = s.B * s.NH * s.T * s.T;
  const DType dt = DTypeOf<T>();
  const std::vector<T> qkv = test::CastVector<T>(test::RandomUniform(n_qkv, 1, -2.f, 2.f));
  const std::vector<T> dout = test::CastVector<T>(test::RandomUniform(n_out, 2));

  std::vector<T> out(n_out), att(n_att), dqkv(n_qkv);
  ASSERT_TRUE(cpu::AttentionForward(out.data(), att.data(), qkv.data(), s).ok());
  ASSERT_TRUE(cpu::AttentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), s).ok());

  DeviceBuffer<T> d_qkv(qkv), d_dout(dout), d_out(n_out), d_att(n_att), d_dqkv(n_qkv);
  DeviceBuffer<uint8_t> scratch(AttentionScratchBytes(s, dt));
  d_out.Poison(), d_att.Poison(), d_dqkv.Poison(), scratch.Poison();
  const Status fwd = cuda::AttentionForward(Runner(), d_out.get(), d_att.get(), d_qkv.get(),
                                            scratch.get(), scratch.size(), s, nullptr);
  ASSERT_TRUE(fwd.ok()) << fwd.ToString();
  scratch.Poison();  // the backward must not rely on anything the forward left in scratch
  const Status bwd =
      cuda::AttentionBackward(Runner(), d_dqkv.get(), d_dout.get(), d_qkv.get(), d_att.get(),
                              scratch.get(), scratch.size(), s, nullptr);
  ASSERT_TRUE(bwd.ok()) << bwd.ToString();

  const test::Tolerance tol = test::ToleranceFor(test::OpKind::kAttention, dt);
  const std::vector<float> got_out = test::ToFloatVector(d_out.Download());
  EXPECT_TRUE(test::RelL2Close(got_out, test::ToFloatVector(out), tol, "out"));
  const std::vector<float> got_att = test::ToFloatVector(d_att.Download());
  EXPECT_TRUE(test::RelL2Close(got_att, test::ToFloatVector(att), tol, "att"));
  // The margins, for --gtest_output=xml.
  ::testing::Test::RecordProperty("rel_l2_out",
                                  std::to_string(test::RelL2(got_out, test::ToFloatVector(out))));
  ::testing::Test::RecordProperty("rel_l2_att",
                                  std::to_string(test::RelL2(got_att, test::ToFloatVector(att))));
  // Above the diagonal the saved probabilities are exactly zero (the backward GEMMs read them).
  for (int64_t r = 0; r < s.B * s.NH * s.T; ++r) {
    for (int64_t j = r % s.T + 1; j < s.T; ++j) {
      ASSERT_EQ(got_att[r * s.T + j], 0.f) << "row " << r << " col " << j;
    }
  }
  const std::vector<T> got_dqkv = d_dqkv.Download();
  EXPECT_TRUE(
      test::RelL2Close(test::ToFloatVector(got_dqkv), test::ToFloatVector(dqkv), tol, "dqkv"));
  ::testing::Test::RecordProperty(
      "rel_l2_dqkv",
      std::to_string(test::RelL2(test::ToFloatVector(got_dqkv), test::ToFloatVector(dqkv))));

  // Deterministic: a second backward gives the same bits.
  d_dqkv.Poison();
  const Status bwd2 =
      cuda::AttentionBackward(Runner(), d_dqkv.get(), d_dout.get(), d_qkv.get(), d_att.get(),
                              scratch.get(), scratch.size(), s, nullptr);
  ASSERT_TRUE(bwd2.ok()) << bwd2.ToString();
  const std::vector<T> again = d_dqkv.Download();
  for (int64_t i = 0; i < n_qkv; ++i) {
    ASSERT_EQ(ToFloat(again[i]), ToFloat(got_dqkv[i])) << "dqkv[" << i << "] differs between runs";
  }
}

class AttentionGpu : public test::GpuTest,
                     public ::testing::WithParamInterface<std::tuple<DType, AttentionShape>> {};

TEST_P(AttentionGpu, ForwardAndBackwardMatchReference) {
  const auto [dt, s] = GetParam();
  if (dt == DType::kBFloat16) {
    if (test::ComputeCapability() < 80) GTEST_SKIP() << "bf16 GEMMs need sm_80";
    RunCase<bf16>(s);
  } else {
    RunCase<float>(s);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionGpu,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::ValuesIn(kShapes)),
                         [](const auto& info) {
                           const AttentionShape& s = std::get<1>(info.param);
                           return StrCat(DTypeName(std::get<0>(info.param)), "_B", s.B, "_T", s.T,
                                         "_NH", s.NH, "_HS", s.HS);
                         });

class AttentionGpuErrors : public test::GpuTest {};

TEST_F(AttentionGpuErrors, SmallScratchIsAnInvalidArgument) {
  const AttentionShape s{1, 16, 2, 16};
  DeviceBuffer<float> qkv(16 * 3 * 32), out(16 * 32), att(2 * 16 * 16);
  DeviceBuffer<uint8_t> scratch(AttentionScratchBytes(s, DType::kFloat32));
  const Status st = cuda::AttentionForward(Runner(), out.get(), att.get(), qkv.get(), scratch.get(),
                                           scratch.size() - 1, s, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("scratch_bytes"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace fp8rt

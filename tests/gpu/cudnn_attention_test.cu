// cuDNN fused attention (BF16, loaded at run time) against the CPU reference: output, saved
// log-sum-exp and the backward's dq/dk/dv on sequence lengths that are not multiples of the tiles;
// bit-for-bit determinism of the backward; clear errors. Skips, saying why, where there is no GPU
// or no cuDNN, or where cuDNN refuses a shape (the runtime then uses the flash kernels).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cudnn_attention.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;

const AttentionShape kShapes[] = {
    {1, 1, 1, 64},    {2, 37, 3, 64},    {3, 129, 2, 64},   {4, 128, 4, 64},
    {1, 517, 4, 128}, {2, 1024, 12, 64}, {1, 2048, 2, 128},
};

// The CPU reference of one shape, and the device copies of its inputs.
struct Reference {
  std::vector<bf16> qkv, dout, out, dqkv;
  std::vector<float> stats;  // natural-log log-sum-exp, as cuDNN saves it
};
Reference MakeReference(const AttentionShape& s) {
  const int64_t n_qkv = s.B * s.T * 3 * s.C(), n_out = s.B * s.T * s.C();
  Reference r;
  r.qkv = test::CastVector<bf16>(test::RandomUniform(n_qkv, 21, -2.f, 2.f));
  r.dout = test::CastVector<bf16>(test::RandomUniform(n_out, 22));
  r.out.resize(n_out), r.dqkv.resize(n_qkv), r.stats.resize(s.B * s.NH * s.T);
  std::vector<bf16> att(s.B * s.NH * s.T * s.T);
  EXPECT_TRUE(cpu::AttentionForward(r.out.data(), att.data(), r.qkv.data(), s).ok());
  EXPECT_TRUE(cpu::AttentionLse(r.stats.data(), r.qkv.data(), s).ok());
  EXPECT_TRUE(
      cpu::AttentionBackward(r.dqkv.data(), r.dout.data(), r.qkv.data(), att.data(), s).ok());
  for (float& x : r.stats) x *= static_cast<float>(M_LN2);  // base 2 -> natural log
  return r;
}

// Creates the cuDNN path or says why the test cannot run here ("" when it can).
std::string CreateAndPrepare(std::unique_ptr<cuda::CudnnAttention>* att, const AttentionShape& s,
                             cuda::CudnnAttentionOptions options = {}) {
  if (test::ComputeCapability() < 80) return "cuDNN's fused attention needs sm_80 or newer";
  auto created = cuda::CudnnAttention::Create(options);
  if (!created.ok()) return "cuDNN unavailable: " + created.status().ToString();
  *att = std::move(created).value();
  const Status prepared = (*att)->Prepare(s);
  if (!prepared.ok()) return (*att)->Version() + " refuses the shape: " + prepared.ToString();
  return "";
}

// Compares dq, dk and dv each on its own (a slip in one would hide in the norm of the three).
void ExpectGradientsClose(const std::vector<float>& got, const std::vector<float>& want,
                          const AttentionShape& s, test::Tolerance tol, bool record) {
  EXPECT_TRUE(test::RelL2Close(got, want, tol, "dqkv"));
  const int64_t C = s.C();
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
    if (record) {
      ::testing::Test::RecordProperty(StrCat("rel_l2_", names[part]),
                                      std::to_string(test::RelL2(g, w)));
    }
  }
}

class CudnnAttentionGpu : public test::GpuTest,
                          public ::testing::WithParamInterface<AttentionShape> {};

TEST_P(CudnnAttentionGpu, MatchesReferenceAndIsDeterministic) {
  const AttentionShape s = GetParam();
  std::unique_ptr<cuda::CudnnAttention> att;
  const std::string why = CreateAndPrepare(&att, s);
  if (!why.empty()) GTEST_SKIP() << why;
  RecordProperty("cudnn", att->Version() + ": " + att->PlanSummary(s));
  const Reference ref = MakeReference(s);

  DeviceBuffer<bf16> qkv(ref.qkv), dout(ref.dout), out(ref.out.size()), dqkv(ref.qkv.size());
  DeviceBuffer<float> stats(ref.stats.size());
  DeviceBuffer<uint8_t> ws(std::max<size_t>(att->WorkspaceBytes(s), 1));
  out.Poison(), stats.Poison(), dqkv.Poison(), ws.Poison();
  const Status fwd =
      att->Forward(out.get(), stats.get(), qkv.get(), s, ws.get(), ws.size(), nullptr);
  ASSERT_TRUE(fwd.ok()) << fwd.ToString();
  const Status bwd = att->Backward(dqkv.get(), dout.get(), qkv.get(), out.get(), stats.get(), s,
                                   ws.get(), ws.size(), nullptr);
  ASSERT_TRUE(bwd.ok()) << bwd.ToString();

  // Tolerances as for the flash kernels (one table): bf16 rounds the inputs, P before P V and
  // the outputs, so the relative L2 error of out and of each gradient sits near 1e-3..1e-2. The
  // log-sum-exp comes from FP32 dot products of bf16 inputs: absolute error, in natural-log units.
  const test::Tolerance tol = test::ToleranceFor(test::OpKind::kAttention, DType::kBFloat16);
  EXPECT_TRUE(test::RelL2Close(test::ToFloatVector(out.Download()), test::ToFloatVector(ref.out),
                               tol, "out"));
  EXPECT_TRUE(test::AllClose(stats.Download(), ref.stats, test::Tolerance{2e-3, 1e-4, 0}, "stats"));
  const std::vector<bf16> got = dqkv.Download();
  ExpectGradientsClose(test::ToFloatVector(got), test::ToFloatVector(ref.dqkv), s, tol, true);

  // Deterministic: a second backward (over a poisoned workspace) gives the same bits.
  dqkv.Poison(), ws.Poison();
  ASSERT_TRUE(att->Backward(dqkv.get(), dout.get(), qkv.get(), out.get(), stats.get(), s, ws.get(),
                            ws.size(), nullptr)
                  .ok());
  const std::vector<bf16> again = dqkv.Download();
  for (size_t i = 0; i < again.size(); ++i) {
    ASSERT_EQ(again[i].bits, got[i].bits) << "dqkv[" << i << "] differs between runs";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionGpu, ::testing::ValuesIn(kShapes),
                         [](const auto& info) {
                           const AttentionShape& s = info.param;
                           return StrCat("B", s.B, "_T", s.T, "_NH", s.NH, "_HS", s.HS);
                         });

class CudnnAttentionGpuMisc : public test::GpuTest {};

// deterministic = false (atomic dQ accumulation) computes the same function.
TEST_F(CudnnAttentionGpuMisc, NondeterministicOptionMatchesReference) {
  const AttentionShape s{2, 200, 3, 64};
  std::unique_ptr<cuda::CudnnAttention> att;
  const std::string why =
      CreateAndPrepare(&att, s, cuda::CudnnAttentionOptions{.deterministic = false});
  if (!why.empty()) GTEST_SKIP() << why;
  const Reference ref = MakeReference(s);
  DeviceBuffer<bf16> qkv(ref.qkv), dout(ref.dout), out(ref.out.size()), dqkv(ref.qkv.size());
  DeviceBuffer<float> stats(ref.stats.size());
  DeviceBuffer<uint8_t> ws(std::max<size_t>(att->WorkspaceBytes(s), 1));
  dqkv.Poison(), ws.Poison();
  ASSERT_TRUE(
      att->Forward(out.get(), stats.get(), qkv.get(), s, ws.get(), ws.size(), nullptr).ok());
  const Status bwd = att->Backward(dqkv.get(), dout.get(), qkv.get(), out.get(), stats.get(), s,
                                   ws.get(), ws.size(), nullptr);
  ASSERT_TRUE(bwd.ok()) << bwd.ToString();
  const test::Tolerance tol = test::ToleranceFor(test::OpKind::kAttention, DType::kBFloat16);
  ExpectGradientsClose(test::ToFloatVector(dqkv.Download()), test::ToFloatVector(ref.dqkv), s, tol,
                       false);
}

TEST_F(CudnnAttentionGpuMisc, ErrorsAreNamed) {
  const AttentionShape s{1, 64, 2, 64};
  std::unique_ptr<cuda::CudnnAttention> att;
  const std::string why = CreateAndPrepare(&att, s);
  if (!why.empty()) GTEST_SKIP() << why;
  EXPECT_NE(att->Version().find("cuDNN 9."), std::string::npos) << att->Version();

  const Status bad_head = att->Prepare(AttentionShape{1, 16, 2, 20});
  EXPECT_EQ(bad_head.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_head.message().find("head size 20"), std::string::npos) << bad_head.ToString();

  DeviceBuffer<bf16> qkv(64 * 3 * 128), out(64 * 128), dout(64 * 128), dqkv(64 * 3 * 128);
  DeviceBuffer<float> stats(2 * 64);
  const AttentionShape unprepared{1, 32, 2, 64};
  EXPECT_EQ(att->Forward(out.get(), stats.get(), qkv.get(), unprepared, nullptr, 0, nullptr).code(),
            StatusCode::kFailedPrecondition);

  const size_t need = att->WorkspaceBytes(s);
  ASSERT_GT(need, 0u);  // the backward keeps rowsum(dout * out) there at least
  DeviceBuffer<uint8_t> ws(need);
  const Status small = att->Backward(dqkv.get(), dout.get(), qkv.get(), out.get(), stats.get(), s,
                                     ws.get(), need - 1, nullptr);
  EXPECT_EQ(small.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.message().find("ws_bytes"), std::string::npos) << small.ToString();
}

}  // namespace
}  // namespace fp8rt

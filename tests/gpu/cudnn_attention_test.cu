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
#include "tests/common/attention_ref.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;

const AttentionShape kShapes[] = {
    {1, 1, 1, 64},    {2, 37, 3, 64},    {3, 129, 2, 64},   {4, 128, 4, 64},
    {1, 517, 4, 128}, {2, 1024, 12, 64}, {1, 2048, 2, 128},
};

// The CPU reference, with the log-sum-exp in natural-log units as cuDNN saves it.
test::AttentionReference MakeReference(const AttentionShape& s) {
  test::AttentionReference r = test::MakeAttentionReference(s, 21, 22);
  for (float& x : r.lse) x *= static_cast<float>(M_LN2);  // base 2 -> natural log
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

class CudnnAttentionGpu : public test::GpuTest,
                          public ::testing::WithParamInterface<AttentionShape> {};

TEST_P(CudnnAttentionGpu, MatchesReferenceAndIsDeterministic) {
  const AttentionShape s = GetParam();
  std::unique_ptr<cuda::CudnnAttention> att;
  const std::string why = CreateAndPrepare(&att, s);
  if (!why.empty()) GTEST_SKIP() << why;
  RecordProperty("cudnn", att->Version() + ": " + att->PlanSummary(s));
  const test::AttentionReference ref = MakeReference(s);

  DeviceBuffer<bf16> qkv(ref.qkv), dout(ref.dout), out(ref.out.size()), dqkv(ref.qkv.size());
  DeviceBuffer<float> stats(ref.lse.size());
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
  EXPECT_TRUE(test::AllClose(stats.Download(), ref.lse, test::Tolerance{2e-3, 1e-4, 0}, "stats"));
  const std::vector<bf16> got = dqkv.Download();
  test::ExpectAttentionGradientsClose(test::ToFloatVector(got), test::ToFloatVector(ref.dqkv), s,
                                      tol, true);

  // Deterministic: a second backward (over a poisoned workspace) gives the same bits.
  dqkv.Poison(), ws.Poison();
  ASSERT_TRUE(att->Backward(dqkv.get(), dout.get(), qkv.get(), out.get(), stats.get(), s, ws.get(),
                            ws.size(), nullptr)
                  .ok());
  EXPECT_TRUE(test::SameBits(dqkv.Download(), got, "dqkv"));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnAttentionGpu, ::testing::ValuesIn(kShapes),
                         [](const auto& info) { return test::AttentionShapeName(info.param); });

class CudnnAttentionGpuMisc : public test::GpuTest {};

// deterministic = false (atomic dQ accumulation) computes the same function.
TEST_F(CudnnAttentionGpuMisc, NondeterministicOptionMatchesReference) {
  const AttentionShape s{2, 200, 3, 64};
  std::unique_ptr<cuda::CudnnAttention> att;
  const std::string why =
      CreateAndPrepare(&att, s, cuda::CudnnAttentionOptions{.deterministic = false});
  if (!why.empty()) GTEST_SKIP() << why;
  const test::AttentionReference ref = MakeReference(s);
  DeviceBuffer<bf16> qkv(ref.qkv), dout(ref.dout), out(ref.out.size()), dqkv(ref.qkv.size());
  DeviceBuffer<float> stats(ref.lse.size());
  DeviceBuffer<uint8_t> ws(std::max<size_t>(att->WorkspaceBytes(s), 1));
  dqkv.Poison(), ws.Poison();
  ASSERT_TRUE(
      att->Forward(out.get(), stats.get(), qkv.get(), s, ws.get(), ws.size(), nullptr).ok());
  const Status bwd = att->Backward(dqkv.get(), dout.get(), qkv.get(), out.get(), stats.get(), s,
                                   ws.get(), ws.size(), nullptr);
  ASSERT_TRUE(bwd.ok()) << bwd.ToString();
  const test::Tolerance tol = test::ToleranceFor(test::OpKind::kAttention, DType::kBFloat16);
  test::ExpectAttentionGradientsClose(test::ToFloatVector(dqkv.Download()),
                                      test::ToFloatVector(ref.dqkv), s, tol, false);
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

// Softmax + cross-entropy on the GPU against the CPU reference: losses and in-place dlogits over
// dtype x (rows = N, cols = V, Vp = V rounded up to 128) plus GPT-2's 50257 -> 50304, with ignored
// and out-of-vocabulary targets; and the mean loss.
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "kernels/cross_entropy.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;
using test::OpKind;
using test::ToleranceFor;

std::vector<int32_t> Targets(int64_t N, int64_t V, uint64_t seed) {
  const std::vector<float> u = test::RandomUniform(N, seed, 0.f, 1.f);
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) {
    t[n] = n % 7 == 3 ? -1 : static_cast<int32_t>(std::fmin(u[n] * V, V - 1));  // some ignored
  }
  return t;
}

template <typename T>
void CheckCrossEntropy(int64_t N, int64_t V) {
  const int64_t Vp = (V + 127) / 128 * 128;
  const DType dt = DTypeOf<T>();
  const auto tol = ToleranceFor(OpKind::kLoss, dt);
  const auto tol32 = ToleranceFor(OpKind::kLoss, DType::kFloat32);
  const float dloss = 0.5f;
  // Padding columns hold large values: they must not leak into the softmax.
  std::vector<float> lf = test::RandomNormal(N * Vp, 201, 0.f, 2.f);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = V; v < Vp; ++v) lf[n * Vp + v] = 50.f;
  }
  const std::vector<T> logits = test::CastVector<T>(lf);
  const std::vector<int32_t> targets = Targets(N, V, 202);

  std::vector<T> dlogits_ref = logits;
  std::vector<float> losses_ref(N);
  ASSERT_TRUE(cpu::SoftmaxCrossEntropy(losses_ref.data(), dlogits_ref.data(), targets.data(), N, V,
                                       Vp, dloss, true)
                  .ok());

  DeviceBuffer<T> d_logits(logits);
  DeviceBuffer<int32_t> d_targets(targets);
  DeviceBuffer<float> d_losses(N);
  // Loss only: logits stay as they were, bit for bit.
  d_losses.Poison();
  FP8RT_CHECK_OK(cuda::SoftmaxCrossEntropy(d_losses.get(), d_logits.get(), d_targets.get(), N, V,
                                           Vp, dloss, false, nullptr));
  EXPECT_TRUE(test::AllClose(d_losses.Download(), losses_ref, tol32, "losses (no grad)"));
  const std::vector<T> after = d_logits.Download();
  EXPECT_EQ(0, std::memcmp(after.data(), logits.data(), logits.size() * sizeof(T)));

  d_losses.Poison();
  FP8RT_CHECK_OK(cuda::SoftmaxCrossEntropy(d_losses.get(), d_logits.get(), d_targets.get(), N, V,
                                           Vp, dloss, true, nullptr));
  const std::vector<float> losses = d_losses.Download();
  EXPECT_TRUE(test::AllClose(losses, losses_ref, tol32, "losses"));
  const std::vector<float> dlogits = test::ToFloatVector(d_logits.Download());
  EXPECT_TRUE(test::AllClose(dlogits, test::ToFloatVector(dlogits_ref), tol, "dlogits"));
  for (int64_t n = 0; n < N; ++n) {  // padding and ignored rows: exactly 0
    for (int64_t v = 0; v < Vp; ++v) {
      if (v >= V || targets[n] < 0) {
        ASSERT_EQ(dlogits[n * Vp + v], 0.f) << "row " << n << " col " << v;
      }
    }
  }

  // Mean loss over the rows, deterministic single-block sum.
  float mean_ref = 0;
  ASSERT_TRUE(cpu::MeanLoss(&mean_ref, losses_ref.data(), N).ok());
  DeviceBuffer<float> d_mean(1);
  d_mean.Poison();
  FP8RT_CHECK_OK(cuda::MeanLoss(d_mean.get(), d_losses.get(), N, nullptr));
  EXPECT_TRUE(test::AllClose(d_mean.Download(), {mean_ref}, tol32, "mean loss"));
}

class CrossEntropyGpu : public test::GpuTest,
                        public ::testing::WithParamInterface<std::tuple<DType, test::Shape2D>> {};

TEST_P(CrossEntropyGpu, MatchesReference) {
  const auto& [dtype, shape] = GetParam();
  if (dtype == DType::kFloat32) {
    CheckCrossEntropy<float>(shape.rows, shape.cols);
  } else {
    CheckCrossEntropy<bf16>(shape.rows, shape.cols);
  }
}

// GPT-2's vocabulary with a few rows; V = 1 (one class: loss 0, gradient 0).
const std::vector<test::Shape2D>& VocabShapes() {
  static const std::vector<test::Shape2D> shapes = {{5, 50257, "5x50257"}, {3, 1, "3x1"}};
  return shapes;
}

std::string Name(const ::testing::TestParamInfo<std::tuple<DType, test::Shape2D>>& info) {
  return std::string(DTypeName(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(AwkwardShapes, CrossEntropyGpu,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::ValuesIn(test::AwkwardShapes())),
                         Name);
INSTANTIATE_TEST_SUITE_P(Vocab, CrossEntropyGpu,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::ValuesIn(VocabShapes())),
                         Name);

class CrossEntropyGpuEdge : public test::GpuTest {};

TEST_F(CrossEntropyGpuEdge, UnpaddedUnalignedRowsUseScalarLoads) {
  // Vp = V = 1001 (odd): no 16-byte vectors; rows start at odd offsets.
  const int64_t N = 9, V = 1001;
  std::vector<float> logits = test::RandomNormal(N * V, 211, 0.f, 3.f);
  const std::vector<int32_t> targets = Targets(N, V, 212);
  std::vector<float> ref = logits, losses_ref(N);
  ASSERT_TRUE(
      cpu::SoftmaxCrossEntropy(losses_ref.data(), ref.data(), targets.data(), N, V, V, 1.f, true)
          .ok());
  DeviceBuffer<float> d_logits(logits), d_losses(N);
  DeviceBuffer<int32_t> d_targets(targets);
  d_losses.Poison();
  FP8RT_CHECK_OK(cuda::SoftmaxCrossEntropy(d_losses.get(), d_logits.get(), d_targets.get(), N, V, V,
                                           1.f, true, nullptr));
  const auto tol = ToleranceFor(OpKind::kLoss, DType::kFloat32);
  EXPECT_TRUE(test::AllClose(d_losses.Download(), losses_ref, tol, "losses"));
  EXPECT_TRUE(test::AllClose(d_logits.Download(), ref, tol, "dlogits"));
}

TEST_F(CrossEntropyGpuEdge, OutOfVocabularyTargetGivesNaNRowOnly) {
  const int64_t N = 3, V = 200, Vp = 256;
  const std::vector<float> logits = test::RandomNormal(N * Vp, 221);
  const std::vector<int32_t> targets = {5, 200, 7};  // row 1 is out of the vocabulary
  DeviceBuffer<float> d_logits(logits), d_losses(N);
  DeviceBuffer<int32_t> d_targets(targets);
  FP8RT_CHECK_OK(cuda::SoftmaxCrossEntropy(d_losses.get(), d_logits.get(), d_targets.get(), N, V,
                                           Vp, 1.f, true, nullptr));
  const std::vector<float> losses = d_losses.Download(), dlogits = d_logits.Download();
  EXPECT_FALSE(std::isnan(losses[0]));
  EXPECT_TRUE(std::isnan(losses[1]));
  EXPECT_FALSE(std::isnan(losses[2]));
  for (int64_t v = 0; v < V; ++v) {
    EXPECT_TRUE(std::isnan(dlogits[Vp + v])) << v;
    EXPECT_FALSE(std::isnan(dlogits[v])) << v;
    EXPECT_FALSE(std::isnan(dlogits[2 * Vp + v])) << v;
  }
}

TEST_F(CrossEntropyGpuEdge, RejectsBadArguments) {
  DeviceBuffer<float> buf(16);
  DeviceBuffer<int32_t> t(1);
  EXPECT_EQ(cuda::SoftmaxCrossEntropy(buf.get(), buf.get(), t.get(), 1, 17, 16, 1.f, true, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      cuda::SoftmaxCrossEntropy<float>(nullptr, buf.get(), t.get(), 1, 16, 16, 1.f, false, nullptr)
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::MeanLoss(buf.get(), buf.get(), 0, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fp8rt

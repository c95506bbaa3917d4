// Token + position embedding on the GPU against the CPU reference, over dtype x the awkward shapes
// (rows = B*T, cols = C) with a skewed token distribution (long runs of one token); the backward
// is bit-identical run to run; out-of-vocabulary ids never read out of bounds.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "kernels/embedding.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;
using test::OpKind;
using test::ToleranceFor;

// u^3 puts ~22% of the positions on token 0 of V = 97: runs of hundreds in the 4096-row shape.
std::vector<int32_t> SkewedTokens(int64_t n, int64_t V, uint64_t seed) {
  const std::vector<float> u = test::RandomUniform(n, seed, 0.f, 1.f);
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) {
    t[i] = static_cast<int32_t>(std::fmin(u[i] * u[i] * u[i] * V, V - 1));
  }
  return t;
}

std::unique_ptr<DeviceBuffer<char>> Scratch(int64_t B, int64_t T, int64_t V, int64_t C,
                                            size_t* bytes) {
  auto r = cuda::EmbeddingBackwardScratchBytes(B, T, V, C);
  FP8RT_CHECK_OK(r.status());
  *bytes = r.value();
  return std::make_unique<DeviceBuffer<char>>(*bytes);
}

template <typename T>
void CheckEmbedding(int64_t rows, int64_t C) {
  const int64_t B = rows % 4 == 0 ? 4 : 1, Tn = rows / B, V = 97, maxT = Tn + 3;
  const int64_t n = B * Tn;
  const DType dt = DTypeOf<T>();
  const std::vector<T> wte = test::CastVector<T>(test::RandomNormal(V * C, 301));
  const std::vector<T> wpe = test::CastVector<T>(test::RandomNormal(maxT * C, 302));
  const std::vector<int32_t> tokens = SkewedTokens(n, V, 303);

  std::vector<T> out_ref(n * C);
  ASSERT_TRUE(
      cpu::EmbeddingForward(out_ref.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C, V)
          .ok());
  DeviceBuffer<T> d_wte(wte), d_wpe(wpe), d_out(n * C);
  DeviceBuffer<int32_t> d_tokens(tokens);
  d_out.Poison();
  FP8RT_CHECK_OK(cuda::EmbeddingForward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B,
                                        Tn, C, V, nullptr));
  EXPECT_TRUE(test::AllClose(test::ToFloatVector(d_out.Download()), test::ToFloatVector(out_ref),
                             ToleranceFor(OpKind::kElementwise, dt), "out"));

  // Backward: gradients accumulate onto non-zero tables. Sums of up to hundreds of rows in
  // another order: the normalization tolerance, in fp32 (the gradients' dtype).
  const std::vector<T> dout = test::CastVector<T>(test::RandomNormal(n * C, 304));
  const std::vector<float> dwte0 = test::RandomNormal(V * C, 305);
  const std::vector<float> dwpe0 = test::RandomNormal(maxT * C, 306);
  std::vector<float> dwte_ref = dwte0, dwpe_ref = dwpe0;
  ASSERT_TRUE(cpu::EmbeddingBackward(dwte_ref.data(), dwpe_ref.data(), dout.data(), tokens.data(),
                                     B, Tn, C, V)
                  .ok());
  DeviceBuffer<T> d_dout(dout);
  DeviceBuffer<float> d_dwte(V * C), d_dwpe(maxT * C);
  size_t scratch_bytes = 0;
  auto scratch = Scratch(B, Tn, V, C, &scratch_bytes);
  const auto tol = ToleranceFor(OpKind::kNormalization, DType::kFloat32);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    d_dwte.Upload(dwte0);
    d_dwpe.Upload(dwpe0);
    scratch->Poison();
    FP8RT_CHECK_OK(cuda::EmbeddingBackward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(),
                                           B, Tn, C, V, scratch->get(), scratch_bytes, nullptr));
    std::vector<float> dwte = d_dwte.Download(), dwpe = d_dwpe.Download();
    EXPECT_TRUE(test::AllClose(dwte, dwte_ref, tol, "dwte"));
    EXPECT_TRUE(test::AllClose(dwpe, dwpe_ref, tol, "dwpe"));
    dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
    if (run == 0) {
      first = dwte;
    } else {
      EXPECT_EQ(0, std::memcmp(first.data(), dwte.data(), first.size() * sizeof(float)))
          << "backward is not bit-identical run to run";
    }
  }

  // The window form (data parallelism's sparse embedding gradient, ZeRO-1's parts): windows that
  // cut the table inside rows, each against the CPU reference's window, and put together equal to
  // the whole table's backward bit for bit.
  const std::vector<float> whole(first.begin(), first.begin() + V * C);
  for (const int64_t parts : {1, 3, 4}) {
    std::vector<float> pieced(V * C);
    const int64_t step = (V * C + parts - 1) / parts;
    for (int64_t lo = 0; lo < V * C; lo += step) {
      const int64_t count = std::min(step, V * C - lo);
      std::vector<float> ref(dwte0.begin() + lo, dwte0.begin() + lo + count);
      ASSERT_TRUE(cpu::EmbeddingBackwardSlice(ref.data(), lo, count, dout.data(), tokens.data(), n,
                                              C, V)
                      .ok());
      DeviceBuffer<float> d_part(ref.size());
      d_part.Upload(std::vector<float>(dwte0.begin() + lo, dwte0.begin() + lo + count));
      scratch->Poison();
      FP8RT_CHECK_OK(cuda::EmbeddingBackwardSlice(d_part.get(), lo, count, d_dout.get(),
                                                  d_tokens.get(), n, C, V, scratch->get(),
                                                  scratch_bytes, nullptr));
      const std::vector<float> got = d_part.Download();
      EXPECT_TRUE(test::AllClose(got, ref, tol, "dwte window"));
      std::copy(got.begin(), got.end(), pieced.begin() + lo);
    }
    EXPECT_EQ(0, std::memcmp(pieced.data(), whole.data(), whole.size() * sizeof(float)))
        << parts << " windows differ from the whole table's backward";
  }
  // The position table alone: dwte left out.
  d_dwpe.Upload(dwpe0);
  FP8RT_CHECK_OK(cuda::EmbeddingBackward(static_cast<float*>(nullptr), d_dwpe.get(), d_dout.get(),
                                         d_tokens.get(), B, Tn, C, V, scratch->get(),
                                         scratch_bytes, nullptr));
  EXPECT_EQ(d_dwpe.Download(), std::vector<float>(first.begin() + V * C, first.end()));
}

class EmbeddingGpu : public test::GpuTest,
                     public ::testing::WithParamInterface<std::tuple<DType, test::Shape2D>> {};

TEST_P(EmbeddingGpu, MatchesReference) {
  const auto& [dtype, shape] = GetParam();
  if (dtype == DType::kFloat32) {
    CheckEmbedding<float>(shape.rows, shape.cols);
  } else {
    CheckEmbedding<bf16>(shape.rows, shape.cols);
  }
}

// Beyond the awkward shapes: C not a multiple of the vector width (scalar path), and C over the
// token-table kernels' 1024-channel chunk (three chunks, the last partial) with runs that cross
// segments of 32 sorted positions.
const std::vector<test::Shape2D>& ExtraShapes() {
  static const std::vector<test::Shape2D> shapes = {{12, 30, "12x30"}, {96, 2100, "96x2100"}};
  return shapes;
}

std::string Name(const ::testing::TestParamInfo<std::tuple<DType, test::Shape2D>>& info) {
  return std::string(DTypeName(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(AwkwardShapes, EmbeddingGpu,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::ValuesIn(test::AwkwardShapes())),
                         Name);
INSTANTIATE_TEST_SUITE_P(Extra, EmbeddingGpu,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kBFloat16),
                                            ::testing::ValuesIn(ExtraShapes())),
                         Name);

class EmbeddingGpuEdge : public test::GpuTest {};

TEST_F(EmbeddingGpuEdge, OutOfVocabularyIdsAreFlaggedNotRead) {
  const int64_t B = 1, Tn = 4, C = 8, V = 5;
  const std::vector<float> wte = test::RandomNormal(V * C, 311),
                           wpe = test::RandomNormal(Tn * C, 312);
  const std::vector<int32_t> tokens = {1, 5, -3, 1};  // positions 1, 2 are out of the vocabulary
  DeviceBuffer<float> d_wte(wte), d_wpe(wpe), d_out(Tn * C);
  DeviceBuffer<int32_t> d_tokens(tokens);
  FP8RT_CHECK_OK(cuda::EmbeddingForward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B,
                                        Tn, C, V, nullptr));
  const std::vector<float> out = d_out.Download();
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(out[c], wte[C + c] + wpe[c]);
    EXPECT_TRUE(std::isnan(out[C + c]));
    EXPECT_TRUE(std::isnan(out[2 * C + c]));
    EXPECT_EQ(out[3 * C + c], wte[C + c] + wpe[3 * C + c]);
  }
  // Backward: the bad positions add nothing to dwte, but still reach dwpe.
  const std::vector<float> dout = test::RandomNormal(Tn * C, 313);
  DeviceBuffer<float> d_dout(dout), d_dwte(V * C), d_dwpe(Tn * C);
  FP8RT_CUDA_CHECK(cudaMemset(d_dwte.get(), 0, V * C * sizeof(float)));
  FP8RT_CUDA_CHECK(cudaMemset(d_dwpe.get(), 0, Tn * C * sizeof(float)));
  size_t scratch_bytes = 0;
  auto scratch = Scratch(B, Tn, V, C, &scratch_bytes);
  FP8RT_CHECK_OK(cuda::EmbeddingBackward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(),
                                         B, Tn, C, V, scratch->get(), scratch_bytes, nullptr));
  const std::vector<float> dwte = d_dwte.Download(), dwpe = d_dwpe.Download();
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(dwte[C + c], dout[c] + dout[3 * C + c]);
    for (int64_t v : {0, 2, 3, 4}) EXPECT_EQ(dwte[v * C + c], 0.f) << v;
  }
  EXPECT_EQ(dwpe, dout);
}

TEST_F(EmbeddingGpuEdge, RejectsShortScratch) {
  DeviceBuffer<float> buf(64);
  DeviceBuffer<int32_t> tokens(8);
  const Status s = cuda::EmbeddingBackward(buf.get(), buf.get(), buf.get(), tokens.get(), 2, 4, 8,
                                           8, buf.get(), 16, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fp8rt

// The reference embedding: hand-computed cases and a finite-difference check of the backward.
#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "tests/common/finite_diff.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::MaxRelError;
using test::NumericGrad;

TEST(EmbeddingReference, ForwardAddsTokenAndPositionRows) {
  const std::vector<float> wte = {1, 2, 3, 4, 5, 6};           // (V=3, C=2)
  const std::vector<float> wpe = {0.5f, 0.25f, 10, 20, 7, 7};  // (maxT=3, C=2)
  const std::vector<int32_t> tokens = {2, 0};                  // (B=1, T=2)
  std::vector<float> out(4, -1.f);
  ASSERT_TRUE(
      cpu::EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), 1, 2, 2, 3).ok());
  EXPECT_EQ(out, (std::vector<float>{5.5f, 6.25f, 11, 22}));
}

TEST(EmbeddingReference, BackwardAccumulatesPerTokenAndPerPosition) {
  // B=2, T=2, C=2, V=3; tokens [[1, 1], [0, 1]].
  const std::vector<int32_t> tokens = {1, 1, 0, 1};
  const std::vector<float> dout = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> dwte = {100, 100, 100, 100, 100, 100};  // accumulated into
  std::vector<float> dwpe = {0, 0, 0, 0, -1, -1};            // maxT=3: row 2 untouched
  ASSERT_TRUE(
      cpu::EmbeddingBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), 2, 2, 2, 3)
          .ok());
  EXPECT_EQ(dwte, (std::vector<float>{105, 106, 100 + 1 + 3 + 7, 100 + 2 + 4 + 8, 100, 100}));
  EXPECT_EQ(dwpe, (std::vector<float>{1 + 5, 2 + 6, 3 + 7, 4 + 8, -1, -1}));
}

TEST(EmbeddingReference, OutOfVocabularyTokenIsRejected) {
  const std::vector<float> wte(6, 1.f), wpe(4, 1.f);
  std::vector<float> out(4, -1.f), dwte(6, 0.f), dwpe(4, 0.f);
  for (int32_t bad : {3, -1}) {
    const std::vector<int32_t> tokens = {0, bad};
    Status s = cpu::EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), 1, 2, 2, 3);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("tokens[1]"), std::string::npos) << s.message();
    s = cpu::EmbeddingBackward(dwte.data(), dwpe.data(), out.data(), tokens.data(), 1, 2, 2, 3);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(out, std::vector<float>(4, -1.f));  // nothing written before the check
  EXPECT_EQ(dwte, std::vector<float>(6, 0.f));
}

// The window form (data parallelism's sparse embedding gradient): windows that split the table
// anywhere, rows included, add up to the whole table's gradient bit for bit, and the whole window
// is EmbeddingBackward's dwte; the position table alone leaves dwte out.
TEST(EmbeddingReference, SliceWindowsAddUpToTheWholeTableBitForBit) {
  const int64_t n = 37, C = 5, V = 11;
  std::vector<float> dout(n * C);
  const auto r = test::RandomNormal(dout.size(), 7);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = static_cast<float>(r[i]);
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((i * 7 + i / 3) % (V - 2));
  std::vector<float> whole(V * C, 0.5f), dwpe(n * C, 0.f);
  ASSERT_TRUE(cpu::EmbeddingBackward(whole.data(), dwpe.data(), dout.data(), tokens.data(), 1, n,
                                     C, V)
                  .ok());
  std::vector<float> all(V * C, 0.5f);
  ASSERT_TRUE(
      cpu::EmbeddingBackwardSlice(all.data(), 0, V * C, dout.data(), tokens.data(), n, C, V).ok());
  EXPECT_EQ(all, whole);
  for (const int64_t parts : {2, 3, 4, 7}) {  // 55 elements: every cut falls inside a row
    std::vector<float> pieced(V * C, 0.5f);
    const int64_t step = (V * C + parts - 1) / parts;
    for (int64_t lo = 0; lo < V * C; lo += step) {
      const int64_t count = std::min(step, V * C - lo);
      std::vector<float> part(count, 0.5f);
      ASSERT_TRUE(cpu::EmbeddingBackwardSlice(part.data(), lo, count, dout.data(), tokens.data(), n,
                                              C, V)
                      .ok());
      std::copy(part.begin(), part.end(), pieced.begin() + lo);
    }
    EXPECT_EQ(pieced, whole) << parts << " windows";
  }
  // Rows V-2 and V-1 never occur: untouched.
  for (int64_t e = (V - 2) * C; e < V * C; ++e) EXPECT_EQ(whole[e], 0.5f);
  std::vector<float> wpe_only(n * C, 0.f);
  ASSERT_TRUE(
      cpu::EmbeddingBackward<float>(nullptr, wpe_only.data(), dout.data(), tokens.data(), 1, n, C, V)
          .ok());
  EXPECT_EQ(wpe_only, dwpe);
}

TEST(EmbeddingReference, SliceRejectsBadTokensAndWindowsNamingThem) {
  const std::vector<float> dout(4, 1.f);
  std::vector<float> dst(6, 0.f);
  const std::vector<int32_t> bad = {0, 3};
  Status s = cpu::EmbeddingBackwardSlice(dst.data(), 0, 6, dout.data(), bad.data(), 2, 2, 3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tokens[1]"), std::string::npos) << s.message();
  const std::vector<int32_t> good = {0, 2};
  s = cpu::EmbeddingBackwardSlice(dst.data(), -2, 6, dout.data(), good.data(), 2, 2, 3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("window"), std::string::npos) << s.message();
  EXPECT_EQ(dst, std::vector<float>(6, 0.f));
}

TEST(EmbeddingReference, Bf16RoundsTheSumOnce) {
  // The fp32 sum is rounded once to bf16 (7 mantissa bits), ties to even: 1 + 2^-8 is half an
  // ulp above 1 and stays 1; 1 + 3*2^-8 is 1.5 ulps and goes up to 1 + 2^-6.
  const std::vector<bf16> wte = {bf16(1.0f), bf16(1.0f)};
  const std::vector<bf16> wpe = {bf16(std::ldexp(1.f, -8)), bf16(3 * std::ldexp(1.f, -8))};
  const std::vector<int32_t> tokens = {0, 0};
  std::vector<bf16> out(2);
  ASSERT_TRUE(
      cpu::EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), 1, 2, 1, 1).ok());
  EXPECT_EQ(ToFloat(out[0]), 1.0f);
  EXPECT_EQ(ToFloat(out[1]), 1.0f + std::ldexp(1.f, -6));
}

TEST(EmbeddingReference, BackwardMatchesFiniteDifferences) {
  const int64_t B = 3, T = 5, C = 4, V = 6, maxT = 7;
  std::vector<double> wte(V * C), wpe(maxT * C), R(B * T * C);
  const auto r1 = test::RandomNormal(wte.size(), 1), r2 = test::RandomNormal(wpe.size(), 2),
             r3 = test::RandomNormal(R.size(), 3);
  for (size_t i = 0; i < wte.size(); ++i) wte[i] = r1[i];
  for (size_t i = 0; i < wpe.size(); ++i) wpe[i] = r2[i];
  for (size_t i = 0; i < R.size(); ++i) R[i] = r3[i];
  std::vector<int32_t> tokens(B * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * i + 1) % 4);
  std::vector<double> out(B * T * C);
  auto loss = [&] {
    EXPECT_TRUE(
        cpu::EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V).ok());
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * R[i];
    return l;
  };
  std::vector<float> dwte(V * C, 0.f), dwpe(maxT * C, 0.f);
  ASSERT_TRUE(
      cpu::EmbeddingBackward(dwte.data(), dwpe.data(), R.data(), tokens.data(), B, T, C, V).ok());
  EXPECT_LT(MaxRelError(dwte, NumericGrad(wte, loss)), 1e-6);
  EXPECT_LT(MaxRelError(dwpe, NumericGrad(wpe, loss)), 1e-6);
  // Tokens 4 and 5 never occur and rows T..maxT-1 of wpe are unused: their gradients stay 0.
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(dwte[4 * C + c], 0.f);
    EXPECT_EQ(dwpe[(maxT - 1) * C + c], 0.f);
  }
}

}  // namespace
}  // namespace fp8rt

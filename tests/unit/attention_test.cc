// Reference causal attention: a hand-computed case, the saved probabilities, causality, and a
// finite-difference check of the backward in double.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

std::vector<double> RandomDouble(size_t n, uint64_t seed) {
  const std::vector<float> f = test::RandomUniform(n, seed);
  return std::vector<double>(f.begin(), f.end());
}

TEST(AttentionReference, TwoTokensOneHeadByHand) {
  // B=1, T=2, NH=1, HS=1: qkv rows are (q, k, v). Token 0 sees only itself; token 1 mixes
  // v0 and v1 with softmax([q1 k0, q1 k1]).
  const AttentionShape s{1, 2, 1, 1};
  const std::vector<double> qkv = {0.5, 2.0, 3.0, 1.5, -1.0, 7.0};
  std::vector<double> out(2), att(4, -1);
  ASSERT_TRUE(cpu::AttentionForward(out.data(), att.data(), qkv.data(), s).ok());
  const double e0 = std::exp(1.5 * 2.0), e1 = std::exp(1.5 * -1.0);
  EXPECT_DOUBLE_EQ(out[0], 3.0);
  EXPECT_NEAR(out[1], (e0 * 3.0 + e1 * 7.0) / (e0 + e1), 1e-12);
  EXPECT_EQ(att[0], 1.0);
  EXPECT_EQ(att[1], 0.0);
  EXPECT_NEAR(att[2], e0 / (e0 + e1), 1e-12);
  EXPECT_NEAR(att[3], e1 / (e0 + e1), 1e-12);
}

TEST(AttentionReference, ProbabilitiesAreCausalRowsSummingToOne) {
  const AttentionShape s{2, 7, 3, 4};
  const std::vector<float> qkv = test::RandomNormal(s.B * s.T * 3 * s.C(), 1, 0.f, 2.f);
  std::vector<float> out(s.B * s.T * s.C()), att(s.B * s.NH * s.T * s.T, -1.f);
  ASSERT_TRUE(cpu::AttentionForward(out.data(), att.data(), qkv.data(), s).ok());
  for (int64_t r = 0; r < s.B * s.NH * s.T; ++r) {
    const int64_t t = r % s.T;
    double sum = 0;
    for (int64_t j = 0; j < s.T; ++j) {
      const float p = att[r * s.T + j];
      if (j > t) {
        EXPECT_EQ(p, 0.f) << "row " << r << " col " << j;
      } else {
        EXPECT_GT(p, 0.f);
        sum += p;
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
  }
}

TEST(AttentionReference, OutputAtTDoesNotDependOnLaterTokens) {
  const AttentionShape s{2, 6, 2, 4};
  const int64_t C = s.C();
  const std::vector<double> qkv = RandomDouble(s.B * s.T * 3 * C, 2);
  std::vector<double> out(s.B * s.T * C), att(s.B * s.NH * s.T * s.T);
  ASSERT_TRUE(cpu::AttentionForward(out.data(), att.data(), qkv.data(), s).ok());
  for (int64_t tp = 1; tp < s.T; ++tp) {
    // Change every q, k, v of token tp (and later) in batch 1.
    std::vector<double> changed = qkv;
    for (int64_t t = tp; t < s.T; ++t) {
      for (int64_t c = 0; c < 3 * C; ++c) changed[((1 * s.T) + t) * 3 * C + c] += 0.75;
    }
    std::vector<double> out2(out.size()), att2(att.size());
    ASSERT_TRUE(cpu::AttentionForward(out2.data(), att2.data(), changed.data(), s).ok());
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t t = 0; t < s.T; ++t) {
        for (int64_t c = 0; c < C; ++c) {
          const size_t i = (b * s.T + t) * C + c;
          if (b == 0 || t < tp) {
            EXPECT_EQ(out2[i], out[i]) << "b=" << b << " t=" << t << " changed from " << tp;
          }
        }
      }
      // The perturbation must be visible at tp itself, or this test proves nothing.
      if (b == 1) {
        EXPECT_NE(out2[(b * s.T + tp) * C], out[(b * s.T + tp) * C]);
      }
    }
  }
}

TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  const AttentionShape s{2, 5, 2, 4};
  const int64_t C = s.C(), n_qkv = s.B * s.T * 3 * C, n_out = s.B * s.T * C;
  std::vector<double> qkv = RandomDouble(n_qkv, 3);
  const std::vector<double> gout = RandomDouble(n_out, 4);
  std::vector<double> out(n_out), att(s.B * s.NH * s.T * s.T), dqkv(n_qkv, 123.0);
  ASSERT_TRUE(cpu::AttentionForward(out.data(), att.data(), qkv.data(), s).ok());
  ASSERT_TRUE(cpu::AttentionBackward(dqkv.data(), gout.data(), qkv.data(), att.data(), s).ok());
  auto loss = [&]() {
    std::vector<double> o(n_out), a(att.size());
    EXPECT_TRUE(cpu::AttentionForward(o.data(), a.data(), qkv.data(), s).ok());
    double l = 0;
    for (int64_t i = 0; i < n_out; ++i) l += o[i] * gout[i];
    return l;
  };
  const double eps = 1e-5;
  double max_err = 0, max_grad = 0;
  for (int64_t i = 0; i < n_qkv; ++i) {
    const double saved = qkv[i];
    qkv[i] = saved + eps;
    const double up = loss();
    qkv[i] = saved - eps;
    const double down = loss();
    qkv[i] = saved;
    const double fd = (up - down) / (2 * eps);
    EXPECT_NEAR(dqkv[i], fd, 1e-7 + 1e-6 * std::fabs(fd)) << "dqkv[" << i << "]";
    max_err = std::max(max_err, std::fabs(dqkv[i] - fd));
    max_grad = std::max(max_grad, std::fabs(fd));
  }
  EXPECT_GT(max_grad, 1e-2) << "gradients should not all vanish";
  // The first token's query gets no gradient: its softmax has one entry.
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(dqkv[c], 0.0);
}

TEST(AttentionReference, FloatAndBf16TrackDouble) {
  const AttentionShape s{1, 9, 2, 8};
  const int64_t C = s.C(), n_qkv = s.T * 3 * C, n_out = s.T * C;
  const std::vector<float> qkv = test::RandomNormal(n_qkv, 5);
  const std::vector<float> gout = test::RandomNormal(n_out, 6);
  const std::vector<double> qkv_d(qkv.begin(), qkv.end()), gout_d(gout.begin(), gout.end());
  std::vector<double> out_d(n_out), att_d(s.NH * s.T * s.T), dqkv_d(n_qkv);
  ASSERT_TRUE(cpu::AttentionForward(out_d.data(), att_d.data(), qkv_d.data(), s).ok());
  ASSERT_TRUE(
      cpu::AttentionBackward(dqkv_d.data(), gout_d.data(), qkv_d.data(), att_d.data(), s).ok());
  const std::vector<float> want_out(out_d.begin(), out_d.end());
  const std::vector<float> want_dqkv(dqkv_d.begin(), dqkv_d.end());

  std::vector<float> out(n_out), att(att_d.size()), dqkv(n_qkv);
  ASSERT_TRUE(cpu::AttentionForward(out.data(), att.data(), qkv.data(), s).ok());
  ASSERT_TRUE(cpu::AttentionBackward(dqkv.data(), gout.data(), qkv.data(), att.data(), s).ok());
  EXPECT_LT(test::RelL2(out, want_out), 1e-6);
  EXPECT_LT(test::RelL2(dqkv, want_dqkv), 1e-6);

  const std::vector<bf16> qkv_b = test::CastVector<bf16>(qkv),
                          gout_b = test::CastVector<bf16>(gout);
  std::vector<bf16> out_b(n_out), att_b(att_d.size()), dqkv_b(n_qkv);
  ASSERT_TRUE(cpu::AttentionForward(out_b.data(), att_b.data(), qkv_b.data(), s).ok());
  ASSERT_TRUE(
      cpu::AttentionBackward(dqkv_b.data(), gout_b.data(), qkv_b.data(), att_b.data(), s).ok());
  // bf16 inputs alone move the result by ~2^-9 relative; roundings of att and dpre add a little.
  EXPECT_LT(test::RelL2(test::ToFloatVector(out_b), want_out), 2e-2);
  EXPECT_LT(test::RelL2(test::ToFloatVector(dqkv_b), want_dqkv), 3e-2);
  EXPECT_GT(test::RelL2(test::ToFloatVector(out_b), want_out), 0.0) << "bf16 must round";
}

TEST(AttentionReference, RejectsBadShapesAndNullBuffers) {
  std::vector<float> buf(64);
  const Status s = cpu::AttentionForward(buf.data(), buf.data(), buf.data(), {1, 0, 1, 4});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("T=0"), std::string::npos) << s.ToString();
  const Status n =
      cpu::AttentionBackward<float>(buf.data(), nullptr, buf.data(), buf.data(), {1, 2, 1, 4});
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.message().find("dout"), std::string::npos) << n.ToString();
}

TEST(AttentionScratch, PiecesAreAlignedAndDisjoint) {
  const AttentionShape s{2, 37, 3, 16};
  const AttentionScratchLayout l = AttentionScratchPlan(s, DType::kBFloat16);
  const size_t heads = 2 * 37 * 3 * 16 * 2, tt = 2 * 3 * 37 * 37;
  const size_t offs[] = {l.q, l.k, l.v, l.y, l.dq, l.dk, l.dv, l.scores, l.dpre};
  const size_t sizes[] = {heads, heads, heads, heads, heads, heads, heads, tt * 4, tt * 2};
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(offs[i] % 256, 0u) << i;
    if (i > 0) {
      EXPECT_GE(offs[i], offs[i - 1] + sizes[i - 1]) << i;
    }
  }
  EXPECT_GE(l.total, l.dpre + tt * 2);
  EXPECT_EQ(AttentionScratchBytes(s, DType::kBFloat16), l.total);
  EXPECT_GT(AttentionScratchBytes(s, DType::kFloat32), l.total);
}

}  // namespace
}  // namespace fp8rt

// The FP8 attention reference (kernels/fp8_attention.h) against FP64 attention on the decoded
// inputs: the same function up to its FP8 quantization points (P, dS and the outputs), with GQA
// matching attention over repeated key/value heads whose dK/dV add up over each group; amaxes
// are the largest magnitudes before scaling; clear errors.
#include "kernels/fp8_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

TEST(Fp8AttentionReference, IsAttentionUpToItsQuantizationPointsWithGqa) {
  const Fp8AttentionShape s{2, 37, 4, 2, 16};
  const int64_t W = s.QkvWidth(), C = s.C(), group = s.NH / s.NKV, HS = s.HS;
  const std::vector<float> x = test::RandomNormal(s.B * s.T * W, 11);
  const std::vector<float> g = test::RandomNormal(s.B * s.T * C, 12, 0.f, 0.1f);
  std::vector<uint8_t> qkv(x.size()), dout(g.size());
  for (size_t i = 0; i < x.size(); ++i) qkv[i] = Fp8Encode(x[i] * 64.f, Fp8Format::kE4M3);
  for (size_t i = 0; i < g.size(); ++i) dout[i] = Fp8Encode(g[i] * 1024.f, Fp8Format::kE5M2);
  // The decoded inputs with every query head's key/value head repeated: plain (B, T, 3C).
  const AttentionShape plain{s.B, s.T, s.NH, s.HS};
  std::vector<double> qkv3(s.B * s.T * 3 * C), dout64(g.size());
  for (int64_t r = 0; r < s.B * s.T; ++r) {
    for (int64_t h = 0; h < s.NH; ++h) {
      const int64_t kvh = h / group;
      for (int64_t d = 0; d < HS; ++d) {
        auto dec = [&](int64_t col) { return Fp8Decode(qkv[r * W + col], Fp8Format::kE4M3) / 64.0; };
        qkv3[r * 3 * C + h * HS + d] = dec(h * HS + d);
        qkv3[r * 3 * C + C + h * HS + d] = dec(C + kvh * HS + d);
        qkv3[r * 3 * C + 2 * C + h * HS + d] = dec(C + s.NKV * HS + kvh * HS + d);
      }
    }
  }
  for (size_t i = 0; i < g.size(); ++i) dout64[i] = Fp8Decode(dout[i], Fp8Format::kE5M2) / 1024.0;
  std::vector<double> out64(s.B * s.T * C), att(s.B * s.NH * s.T * s.T), dqkv64(qkv3.size());
  ASSERT_TRUE(cpu::AttentionForward(out64.data(), att.data(), qkv3.data(), plain).ok());
  // The FP8 forward with O's scale from its amax (a first pass), then the backward's outputs'.
  float dq64 = 1.f / 64, dq1024 = 1.f / 1024, s_s = 448, ds_s = 1.f / 448;
  float scale_o = 1, descale_o = 1, scale_dp = 1, descale_dp = 1, scale_g = 1;
  float amax[6] = {};
  Fp8AttentionScales sc;
  sc.descale_q = sc.descale_k = sc.descale_v = &dq64;
  sc.scale_s = &s_s, sc.descale_s = &ds_s, sc.scale_o = &scale_o, sc.descale_o = &descale_o;
  sc.descale_do = &dq1024, sc.scale_dp = &scale_dp, sc.descale_dp = &descale_dp;
  sc.scale_dq = sc.scale_dk = sc.scale_dv = &scale_g;
  sc.amax_s = &amax[0], sc.amax_o = &amax[1], sc.amax_dp = &amax[2], sc.amax_dq = &amax[3];
  sc.amax_dk = &amax[4], sc.amax_dv = &amax[5];
  std::vector<uint8_t> out(s.B * s.T * C), dqkv(qkv.size());
  std::vector<float> stats(s.B * s.NH * s.T);
  ASSERT_TRUE(cpu::Fp8AttentionForward(out.data(), stats.data(), qkv.data(), s, sc).ok());
  scale_o = 448.f / amax[1], descale_o = 1.f / scale_o;
  ASSERT_TRUE(cpu::Fp8AttentionForward(out.data(), stats.data(), qkv.data(), s, sc).ok());
  ASSERT_TRUE(
      cpu::Fp8AttentionBackward(dqkv.data(), dout.data(), qkv.data(), out.data(), stats.data(), s,
                                sc)
          .ok());
  scale_dp = 57344.f / amax[2], descale_dp = 1.f / scale_dp;
  scale_g = 57344.f / std::fmax(amax[3], std::fmax(amax[4], amax[5]));
  ASSERT_TRUE(
      cpu::Fp8AttentionBackward(dqkv.data(), dout.data(), qkv.data(), out.data(), stats.data(), s,
                                sc)
          .ok());
  // The FP64 backward takes the FP8 forward's output, as the FP8 backward does.
  std::vector<double> out8(out.size());
  for (size_t i = 0; i < out.size(); ++i) out8[i] = Fp8Decode(out[i], Fp8Format::kE4M3) * descale_o;
  ASSERT_TRUE(
      cpu::AttentionBackward(dqkv64.data(), dout64.data(), qkv3.data(), att.data(), plain).ok());

  // amax_s is the largest probability (1 at the first query); amax_o the output's magnitude.
  EXPECT_FLOAT_EQ(amax[0], 1.0f);
  double omax = 0;
  for (double v : out64) omax = std::fmax(omax, std::fabs(v));
  EXPECT_NEAR(amax[1], omax, 0.05 * omax);
  auto rel = [](const std::vector<double>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]),
                                            den += want[i] * want[i];
    return std::sqrt(num / den);
  };
  EXPECT_LT(rel(out8, out64), 0.05) << "out";
  // The statistic: log-sum-exp of the scaled scores (natural log) from the decoded inputs.
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.NH; ++h) {
      const int64_t t = s.T - 1;
      double m = -1e300, z = 0;
      std::vector<double> sc_row(t + 1);
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < HS; ++d) {
          dot += qkv3[(b * s.T + t) * 3 * C + h * HS + d] * qkv3[(b * s.T + j) * 3 * C + C + h * HS + d];
        }
        sc_row[j] = dot / std::sqrt(static_cast<double>(HS));
        m = std::fmax(m, sc_row[j]);
      }
      for (double v : sc_row) z += std::exp(v - m);
      EXPECT_NEAR(stats[(b * s.NH + h) * s.T + t], m + std::log(z), 1e-4);
    }
  }
  // dQ per query head; dK and dV per key/value head, the sums over its query heads.
  std::vector<double> want[3], got[3];
  for (int64_t r = 0; r < s.B * s.T; ++r) {
    for (int64_t h = 0; h < s.NH; ++h) {
      for (int64_t d = 0; d < HS; ++d) {
        want[0].push_back(dqkv64[r * 3 * C + h * HS + d]);
        got[0].push_back(Fp8Decode(dqkv[r * W + h * HS + d], Fp8Format::kE5M2) / scale_g);
      }
    }
    for (int64_t kvh = 0; kvh < s.NKV; ++kvh) {
      for (int64_t d = 0; d < HS; ++d) {
        for (int part = 1; part <= 2; ++part) {
          double sum = 0;
          for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
            sum += dqkv64[r * 3 * C + part * C + h * HS + d];
          }
          want[part].push_back(sum);
          got[part].push_back(
              Fp8Decode(dqkv[r * W + C + (part - 1) * s.NKV * HS + kvh * HS + d], Fp8Format::kE5M2) /
              scale_g);
        }
      }
    }
  }
  const char* names[3] = {"dq", "dk", "dv"};
  for (int p = 0; p < 3; ++p) EXPECT_LT(rel(got[p], want[p]), 0.12) << names[p];
}

TEST(Fp8AttentionReference, RefusesBadShapesAndMissingScalesNamingThem) {
  EXPECT_NE(ValidateFp8Attention({1, 8, 6, 4, 64}).message().find("NH=6 is not a multiple of NKV=4"),
            std::string::npos);
  EXPECT_NE(ValidateFp8Attention({1, 0, 2, 2, 64}).message().find("T=0"), std::string::npos);
  std::vector<uint8_t> qkv(4 * 3 * 16), out(4 * 16);
  std::vector<float> stats(4);
  Fp8AttentionScales none;
  const Status st =
      cpu::Fp8AttentionForward(out.data(), stats.data(), qkv.data(), {1, 4, 1, 1, 16}, none);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("descale_q is null"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace fp8rt

// The CPU references of Llama's ops (kernels/rmsnorm.h, swiglu.h, rope.h): hand-computed cases,
// finite-difference gradient checks in double, transformers' rotate_half written out
// independently, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kernels/embedding.h"
#include "kernels/gqa.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

std::vector<double> Rand(size_t n, uint64_t seed, double scale = 1.0) {
  const auto f = test::RandomNormal(n, seed);
  std::vector<double> d(f.begin(), f.end());
  for (double& v : d) v *= scale;
  return d;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d/dv of L(v) = <f(v), r> by central differences, for every element of v.
std::vector<double> NumericGrad(std::vector<double> v,
                                const std::function<std::vector<double>(const std::vector<double>&)>& f,
                                const std::vector<double>& r) {
  std::vector<double> g(v.size());
  const double h = 1e-6;
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + h;
    const double up = Dot(f(v), r);
    v[i] = keep - h;
    const double down = Dot(f(v), r);
    v[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double tol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << "[" << i << "]";
  }
}

TEST(RmsNorm, AHandComputedRow) {
  const std::vector<float> x = {3, 4}, w = {1, 2};
  std::vector<float> out(2), rstd(1);
  ASSERT_TRUE(cpu::RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), 1, 2, 0.0f).ok());
  const double r = 1 / std::sqrt(12.5);
  EXPECT_FLOAT_EQ(rstd[0], r);
  EXPECT_FLOAT_EQ(out[0], 3 * r);
  EXPECT_FLOAT_EQ(out[1], 8 * r);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t N = 3, C = 7;
  const auto x = Rand(N * C, 1), w = Rand(C, 2), r = Rand(N * C, 3);
  auto fwd_x = [&](const std::vector<double>& v) {
    std::vector<double> o(N * C);
    EXPECT_TRUE(cpu::RmsNormForward(o.data(), nullptr, v.data(), w.data(), N, C, 1e-5f).ok());
    return o;
  };
  auto fwd_w = [&](const std::vector<double>& v) {
    std::vector<double> o(N * C);
    EXPECT_TRUE(cpu::RmsNormForward(o.data(), nullptr, x.data(), v.data(), N, C, 1e-5f).ok());
    return o;
  };
  std::vector<double> out(N * C), din(N * C, 0.5);
  std::vector<float> rstd(N), dw(C, 0.25f);
  ASSERT_TRUE(cpu::RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f).ok());
  ASSERT_TRUE(cpu::RmsNormBackward(din.data(), dw.data(), r.data(), x.data(), w.data(),
                                   rstd.data(), N, C, /*accumulate_din=*/true).ok());
  // rstd is stored in FP32: the analytic gradient carries its rounding (~1e-7 relative).
  std::vector<double> want_x = NumericGrad(x, fwd_x, r);
  for (double& v : want_x) v += 0.5;  // accumulated onto what din held
  ExpectNear(din, want_x, 1e-5, "din");
  std::vector<double> want_w = NumericGrad(w, fwd_w, r), got_w(dw.begin(), dw.end());
  for (double& v : want_w) v += 0.25;  // dweight accumulates
  ExpectNear(got_w, want_w, 1e-5, "dweight");
}

TEST(SwiGlu, ForwardAndBackwardMatchTheDefinitionAndFiniteDifferences) {
  const int64_t N = 2, F = 5;
  auto gu = Rand(N * 2 * F, 4, 3.0);
  gu[0] = 0.0, gu[F] = 7.0;  // silu(0) * u = 0
  std::vector<double> out(N * F);
  ASSERT_TRUE(cpu::SwiGluForward(out.data(), gu.data(), N, F).ok());
  EXPECT_EQ(out[0], 0.0);
  const double g = gu[1], u = gu[F + 1];
  EXPECT_NEAR(out[1], g / (1 + std::exp(-g)) * u, 1e-15);
  const auto r = Rand(N * F, 5);
  std::vector<double> dgu(N * 2 * F);
  ASSERT_TRUE(cpu::SwiGluBackward(dgu.data(), gu.data(), r.data(), N, F).ok());
  auto fwd = [&](const std::vector<double>& v) {
    std::vector<double> o(N * F);
    EXPECT_TRUE(cpu::SwiGluForward(o.data(), v.data(), N, F).ok());
    return o;
  };
  ExpectNear(dgu, NumericGrad(gu, fwd, r), 1e-7, "dgu");
}

// transformers' apply_rotary_pos_emb, written out: q * cos + rotate_half(q) * sin with
// rotate_half(q) = [-q2, q1] and cos/sin of (position * inv_freq) repeated over both halves.
std::vector<double> HfRope(const std::vector<double>& q, int64_t T, int64_t NH, int64_t HS,
                           double theta) {
  std::vector<double> out(q.size());
  const int64_t h = HS / 2;
  for (size_t row = 0; row < q.size() / (NH * HS); ++row) {
    const double p = static_cast<double>(row % T);
    for (int64_t hd = 0; hd < NH; ++hd) {
      const double* x = q.data() + row * NH * HS + hd * HS;
      double* y = out.data() + row * NH * HS + hd * HS;
      for (int64_t j = 0; j < HS; ++j) {
        const int64_t i = j % h;
        const float inv = 1.0f / std::pow(static_cast<float>(theta),
                                          static_cast<float>(2 * i) / static_cast<float>(HS));
        const double a = static_cast<float>(static_cast<float>(p) * inv);
        const double rot = j < h ? -x[j + h] : x[j - h];
        y[j] = x[j] * std::cos(a) + rot * std::sin(a);
      }
    }
  }
  return out;
}

TEST(Rope, MatchesTransformersRotateHalfAndItsBackwardIsTheTranspose) {
  const int64_t B = 2, T = 9, NH = 3, HS = 16;
  const auto q = Rand(B * T * NH * HS, 6);
  std::vector<double> out(q.size());
  ASSERT_TRUE(cpu::RopeForward(out.data(), q.data(), B, T, NH, HS, NH * HS, 500000.0f).ok());
  ExpectNear(out, HfRope(q, T, NH, HS, 500000.0), 1e-12, "rope");
  // Position 0 is the identity.
  for (int64_t i = 0; i < NH * HS; ++i) EXPECT_EQ(out[i], q[i]);
  // The rotation is linear and orthogonal: <R x, y> = <x, R^T y>, R^T R = 1.
  const auto y = Rand(q.size(), 7);
  std::vector<double> rty(q.size()), back(q.size());
  ASSERT_TRUE(cpu::RopeBackward(rty.data(), y.data(), B, T, NH, HS, NH * HS, 500000.0f).ok());
  EXPECT_NEAR(Dot(out, y), Dot(q, rty), 1e-10);
  ASSERT_TRUE(cpu::RopeBackward(back.data(), out.data(), B, T, NH, HS, NH * HS, 500000.0f).ok());
  ExpectNear(back, q, 1e-12, "R^T R x");
}

TEST(Rope, InPlaceOnThePartOfAWiderRowWithAnOffsetPosition) {
  // Rows of 3 heads of 8 plus 5 other values (a fused QKV row's Q part), positions from 4.
  const int64_t T = 5, NH = 3, HS = 8, ld = NH * HS + 5;
  auto buf = Rand(T * ld, 8);
  const auto before = buf;
  ASSERT_TRUE(cpu::RopeForward(buf.data(), buf.data(), 1, T, NH, HS, ld, 10000.0f, 4).ok());
  for (int64_t r = 0; r < T; ++r) {
    for (int64_t c = NH * HS; c < ld; ++c) EXPECT_EQ(buf[r * ld + c], before[r * ld + c]);
  }
  // Row 0 at position 4 equals a separate call's position 4 (row 4 of a 5-token sequence).
  std::vector<double> row4(T * NH * HS), packed(T * NH * HS);
  for (int64_t r = 0; r < T; ++r) {
    for (int64_t c = 0; c < NH * HS; ++c) packed[r * NH * HS + c] = before[c];  // row 0 repeated
  }
  ASSERT_TRUE(cpu::RopeForward(row4.data(), packed.data(), 1, T, NH, HS, NH * HS, 10000.0f).ok());
  for (int64_t c = 0; c < NH * HS; ++c) EXPECT_EQ(buf[c], row4[4 * NH * HS + c]) << c;
}

// Grouped-query expansion written out by hand: 2 query heads per key/value head, head size 2.
TEST(Gqa, ExpandRepeatsEachKeyValueHeadAndReduceSumsItsCopies) {
  const int64_t M = 2, NH = 4, KV = 2, HS = 2, ldi = (NH + 2 * KV) * HS, ldo = 3 * NH * HS;
  std::vector<double> in(M * ldi);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<double>(i);
  std::vector<double> out(M * ldo, -1);
  ASSERT_TRUE(cpu::GqaExpand(out.data(), in.data(), M, NH, KV, HS).ok());
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t c = 0; c < NH * HS; ++c) EXPECT_EQ(out[m * ldo + c], in[m * ldi + c]);
    for (int64_t part = 0; part < 2; ++part) {
      for (int64_t h = 0; h < NH; ++h) {
        for (int64_t d = 0; d < HS; ++d) {
          // heads 0, 1 read head 0; heads 2, 3 read head 1
          EXPECT_EQ(out[m * ldo + NH * HS + part * NH * HS + h * HS + d],
                    in[m * ldi + NH * HS + part * KV * HS + (h / 2) * HS + d]);
        }
      }
    }
  }
  // The backward is the transpose: <reduce(dy), x> == <dy, expand(x)>.
  const auto dy = Rand(M * ldo, 5), x = Rand(M * ldi, 6);
  std::vector<double> ex(M * ldo), dx(M * ldi);
  ASSERT_TRUE(cpu::GqaExpand(ex.data(), x.data(), M, NH, KV, HS).ok());
  ASSERT_TRUE(cpu::GqaReduce(dx.data(), dy.data(), M, NH, KV, HS).ok());
  EXPECT_NEAR(Dot(dx, x), Dot(dy, ex), 1e-12);
  // KV == NH: both are copies.
  std::vector<double> same(M * 3 * NH * HS);
  const auto y = Rand(M * 3 * NH * HS, 7);
  ASSERT_TRUE(cpu::GqaReduce(same.data(), y.data(), M, NH, NH, HS).ok());
  EXPECT_EQ(same, y);
  EXPECT_FALSE(cpu::GqaExpand(ex.data(), x.data(), M, 4, 3, HS).ok());
}

// Llama's token embedding: no position table (wpe and dwpe null).
TEST(Embedding, WithoutAPositionTableIsTheTokenRowAlone) {
  const std::vector<float> wte = {1, 2, 3, 4, 5, 6};  // (V=3, C=2)
  const std::vector<int32_t> tokens = {2, 0, 2};
  std::vector<float> out(6, -1);
  ASSERT_TRUE(cpu::EmbeddingForward(out.data(), tokens.data(), wte.data(),
                                    static_cast<const float*>(nullptr), 1, 3, 2, 3).ok());
  EXPECT_EQ(out, (std::vector<float>{5, 6, 1, 2, 5, 6}));
  const std::vector<float> dout = {1, 1, 2, 2, 3, 3};
  std::vector<float> dwte(6, 0);
  ASSERT_TRUE(cpu::EmbeddingBackward(dwte.data(), nullptr, dout.data(), tokens.data(), 1, 3, 2, 3)
                  .ok());
  EXPECT_EQ(dwte, (std::vector<float>{2, 2, 0, 0, 4, 4}));
}

TEST(LlamaOps, BadArgumentsAreRefusedNamingThem) {
  std::vector<float> x(64), w(64), o(64);
  auto has = [](const Status& s, const char* what) {
    return s.message().find(what) != std::string::npos;
  };
  EXPECT_TRUE(has(cpu::RmsNormForward(o.data(), nullptr, x.data(), w.data(), -1, 4, 1e-5f), "N=-1"));
  EXPECT_TRUE(has(cpu::RmsNormBackward(o.data(), w.data(), x.data(), x.data(), w.data(), nullptr,
                                       4, 4, false),
                  "rstd is null"));
  EXPECT_TRUE(has(cpu::SwiGluForward<float>(o.data(), nullptr, 2, 2), "null"));
  EXPECT_TRUE(has(cpu::RopeForward(o.data(), x.data(), 1, 2, 2, 3, 6, 1e4f), "head size 3"));
  EXPECT_TRUE(has(cpu::RopeForward(o.data(), x.data(), 1, 2, 2, 4, 6, 1e4f), "ld=6"));
  EXPECT_TRUE(has(cpu::RopeForward(o.data(), x.data(), 1, 2, 2, 4, 8, 0.0f), "theta=0"));
  EXPECT_TRUE(has(cpu::RopeForward(o.data(), x.data(), 1, 1, 1, 512, 512, 1e4f), "head size 512"));
}

}  // namespace
}  // namespace fp8rt

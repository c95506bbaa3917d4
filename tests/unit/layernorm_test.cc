// The reference LayerNorm: a hand-computed row and finite-difference checks of din, dweight, dbias.
// The norms' forwards with the FP8 cast fused (LayerNormForwardFp8, RmsNormForwardFp8) against
// the forward followed by Quantize, and their refusals.
#include "kernels/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/quantize.h"
#include "kernels/rmsnorm.h"
#include "tests/common/finite_diff.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::MaxRelError;
using test::NumericGrad;

std::vector<double> RandomDoubles(size_t n, uint64_t seed, float mean = 0.f, float stddev = 1.f) {
  const auto f = test::RandomNormal(n, seed, mean, stddev);
  return std::vector<double>(f.begin(), f.end());
}

TEST(LayerNormReference, HandComputedRow) {
  // x = [1, 2, 3, 4]: mean 2.5, biased variance 1.25; eps = 0.
  const std::vector<float> x = {1, 2, 3, 4}, w = {2, 1, 1, 0.5f}, b = {0, 1, 0, -1};
  std::vector<float> out(4), mean(1), rstd(1);
  ASSERT_TRUE(cpu::LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                    b.data(), 1, 4, 0.0f)
                  .ok());
  const double rs = 1 / std::sqrt(1.25);
  EXPECT_FLOAT_EQ(mean[0], 2.5f);
  EXPECT_FLOAT_EQ(rstd[0], static_cast<float>(rs));
  const double want[4] = {-1.5 * rs * 2, -0.5 * rs + 1, 0.5 * rs, 1.5 * rs * 0.5 - 1};
  for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(out[c], static_cast<float>(want[c])) << c;
}

TEST(LayerNormReference, EpsEntersTheVariance) {
  const std::vector<float> x = {3, 3, 3, 3}, w(4, 1.f), b(4, 0.f);
  std::vector<float> out(4), mean(1), rstd(1);
  ASSERT_TRUE(cpu::LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                    b.data(), 1, 4, 0.25f)
                  .ok());
  EXPECT_EQ(rstd[0], 2.0f);  // 1 / sqrt(0 + 0.25)
  EXPECT_EQ(out, std::vector<float>(4, 0.f));
  // Inference: no statistics wanted.
  ASSERT_TRUE(
      cpu::LayerNormForward(out.data(), nullptr, nullptr, x.data(), w.data(), b.data(), 1, 4, 0.25f)
          .ok());
}

TEST(LayerNormReference, RejectsBadArguments) {
  std::vector<float> buf(8), stat(2);
  EXPECT_EQ(cpu::LayerNormForward(buf.data(), stat.data(), stat.data(), buf.data(), buf.data(),
                                  buf.data(), 2, 0, 1e-5f)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::LayerNormForward(buf.data(), stat.data(), nullptr, buf.data(), buf.data(),
                                  buf.data(), 2, 4, 1e-5f)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cpu::LayerNormBackward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                   buf.data(), nullptr, stat.data(), 2, 4, false)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(LayerNormReference, BackwardMatchesFiniteDifferences) {
  const int64_t N = 3, C = 7;
  // A non-zero mean and non-unit spread so every term of the gradient matters.
  std::vector<double> x = RandomDoubles(N * C, 11, 0.7f, 1.3f);
  std::vector<double> w = RandomDoubles(C, 12, 1.0f, 0.5f), b = RandomDoubles(C, 13);
  const std::vector<double> R = RandomDoubles(N * C, 14);
  const float eps = 1e-3f;
  std::vector<double> out(N * C);
  std::vector<float> mean(N), rstd(N);
  auto loss = [&] {
    EXPECT_TRUE(cpu::LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                      b.data(), N, C, eps)
                    .ok());
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * R[i];
    return l;
  };
  loss();  // mean, rstd of the unperturbed input
  const std::vector<float> mean0 = mean, rstd0 = rstd;
  std::vector<double> din(N * C, 0.0);
  std::vector<float> dw(C, 0.f), db(C, 0.f);
  ASSERT_TRUE(cpu::LayerNormBackward(din.data(), dw.data(), db.data(), R.data(), x.data(), w.data(),
                                     mean0.data(), rstd0.data(), N, C, false)
                  .ok());
  // The statistics are saved as fp32, so the analytic gradient carries ~1e-7 relative error.
  EXPECT_LT(MaxRelError(din, NumericGrad(x, loss)), 1e-6);
  EXPECT_LT(MaxRelError(dw, NumericGrad(w, loss)), 1e-6);
  EXPECT_LT(MaxRelError(db, NumericGrad(b, loss)), 1e-6);

  // accumulate_din adds to din; dweight/dbias always accumulate.
  std::vector<double> din2(N * C, 0.5);
  std::vector<float> dw2 = dw, db2 = db;
  ASSERT_TRUE(cpu::LayerNormBackward(din2.data(), dw2.data(), db2.data(), R.data(), x.data(),
                                     w.data(), mean0.data(), rstd0.data(), N, C, true)
                  .ok());
  for (size_t i = 0; i < din.size(); ++i) EXPECT_NEAR(din2[i], din[i] + 0.5, 1e-12);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_FLOAT_EQ(dw2[c], 2 * dw[c]);
    EXPECT_FLOAT_EQ(db2[c], 2 * db[c]);
  }
  // Without accumulate_din, din is overwritten whatever it held.
  std::vector<double> din3(N * C, 1e9);
  ASSERT_TRUE(cpu::LayerNormBackward(din3.data(), dw2.data(), db2.data(), R.data(), x.data(),
                                     w.data(), mean0.data(), rstd0.data(), N, C, false)
                  .ok());
  EXPECT_EQ(din3, din);
}

// ---- the forwards with the FP8 cast fused ----

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A host FP8 tensor with data alone, amax starting at 0.125 (the casts max-accumulate).
struct HostCodes : test::HostFp8 {
  HostCodes(int64_t rows, int64_t cols, Fp8Format f, float s)
      : test::HostFp8(rows, cols, f, s, /*transpose=*/false, /*amax0=*/0.125f) {}
};

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

struct Fp8NormCase {
  int64_t N, C;
  Fp8Format format;
};

// Random rows (mean 0.3, spread 1.5) with one far value in row 0 and, with nan_row >= 0, a NaN in
// that row; the scale saturates |y| > 2.5: row 0's far value, and a few others.
template <typename T>
void CheckFusedNorm(bool rms, const Fp8NormCase& c, int nan_row) {
  const int64_t N = c.N, C = c.C;
  std::vector<float> xf = test::RandomNormal(N * C, 31 + N * C, 0.3f, 1.5f);
  xf[0] = 40.f;
  if (nan_row >= 0) xf[nan_row * C + C / 2] = kNaN;
  const std::vector<T> x = test::CastVector<T>(xf);
  const std::vector<T> w = test::CastVector<T>(test::RandomNormal(C, 32, 1.f, 0.3f));
  const std::vector<T> b = test::CastVector<T>(test::RandomNormal(C, 33, 0.f, 0.3f));
  const float scale = Fp8MaxFinite(c.format) / 2.5f;

  // The composition: the forward into y, then Quantize of y with data alone.
  std::vector<T> y(N * C);
  std::vector<float> mean(N, kNaN), rstd(N, kNaN);
  HostCodes want(N, C, c.format, scale);
  uint64_t want_sat = 5;
  ASSERT_TRUE((rms ? cpu::RmsNormForward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f)
                   : cpu::LayerNormForward(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                           b.data(), N, C, 1e-5f))
                  .ok());
  ASSERT_TRUE(cpu::Quantize(y.data(), want.t, &want_sat).ok());

  std::vector<float> got_mean(N, kNaN), got_rstd(N, kNaN);
  HostCodes got(N, C, c.format, scale);
  uint64_t got_sat = 5;
  const Status st =
      rms ? cpu::RmsNormForwardFp8(got.t, got_rstd.data(), x.data(), w.data(), N, C, 1e-5f,
                                   &got_sat)
          : cpu::LayerNormForwardFp8(got.t, got_mean.data(), got_rstd.data(), x.data(), w.data(),
                                     b.data(), N, C, 1e-5f, &got_sat);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got.data, want.data) << "codes";
  EXPECT_EQ(0, std::memcmp(got_mean.data(), mean.data(), N * sizeof(float))) << "mean";
  EXPECT_EQ(0, std::memcmp(got_rstd.data(), rstd.data(), N * sizeof(float))) << "rstd";
  EXPECT_TRUE(SameBits(got.amax, want.amax)) << got.amax << " vs " << want.amax;
  EXPECT_TRUE(SameBits(got.scale_inv, want.scale_inv)) << got.scale_inv;
  EXPECT_EQ(got_sat, want_sat);
  if (nan_row >= 0) {
    EXPECT_TRUE(std::isnan(got.amax)) << "a NaN output is never dropped from the amax";
  }
  if (C >= 64) {  // row 0's far value normalises to about sqrt(C) or more
    EXPECT_GT(got_sat, 5u) << "the scale must saturate some outputs";
  }
}

// Odd and vector-unfriendly widths, one row, many short rows, and the model's width.
const Fp8NormCase kFp8NormCases[] = {
    {1, 1, Fp8Format::kE4M3},     {7, 3, Fp8Format::kE5M2},    {1, 16, Fp8Format::kE4M3},
    {33, 1001, Fp8Format::kE4M3}, {5, 2050, Fp8Format::kE5M2}, {217, 256, Fp8Format::kE5M2},
    {60, 160, Fp8Format::kE4M3},  {16, 768, Fp8Format::kE4M3},
};

// Every case in float, bf16 and double, then with a NaN in a middle row (float) and the last
// row (bf16).
void CheckFusedNormCases(bool rms) {
  for (const Fp8NormCase& c : kFp8NormCases) {
    SCOPED_TRACE(std::to_string(c.N) + "x" + std::to_string(c.C) + " " + Fp8FormatName(c.format));
    CheckFusedNorm<float>(rms, c, -1);
    CheckFusedNorm<bf16>(rms, c, -1);
    CheckFusedNorm<double>(rms, c, -1);
    CheckFusedNorm<float>(rms, c, static_cast<int>(c.N / 2));
    CheckFusedNorm<bf16>(rms, c, static_cast<int>(c.N - 1));
  }
}

TEST(NormForwardFp8, LayerNormEqualsTheForwardThenQuantize) { CheckFusedNormCases(false); }

TEST(NormForwardFp8, RmsNormEqualsTheForwardThenQuantize) { CheckFusedNormCases(true); }

TEST(NormForwardFp8, NoRowsWriteScaleInvAlone) {
  const std::vector<float> w(8, 1.f), b(8, 0.f);
  for (bool rms : {false, true}) {
    HostCodes q(0, 8, Fp8Format::kE4M3, 4.f);
    uint64_t sat = 3;
    const Status st =
        rms ? cpu::RmsNormForwardFp8<float>(q.t, nullptr, nullptr, w.data(), 0, 8, 1e-5f, &sat)
            : cpu::LayerNormForwardFp8<float>(q.t, nullptr, nullptr, nullptr, w.data(), b.data(), 0,
                                              8, 1e-5f, &sat);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(q.scale_inv, 0.25f);
    EXPECT_EQ(q.amax, 0.125f);
    EXPECT_EQ(sat, 3u);
  }
}

// Each refusal names the op: a transposed copy asked for, no data, a shape other than (N, C),
// and the forward's own arguments.
TEST(NormForwardFp8, RefusalsNameTheOp) {
  const int64_t N = 2, C = 4;
  std::vector<float> x(N * C, 1.f), w(C, 1.f), b(C, 0.f), mean(N), rstd(N);
  std::vector<uint8_t> t_codes(N * C);
  auto expect_refused = [](const Status& st, const std::string& op, const std::string& what) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(st.message().find(op + ":"), std::string::npos) << what << ": " << st.message();
  };
  auto ln = [&](const Fp8Tensor& t, float* m, float* r, int64_t n) {
    return cpu::LayerNormForwardFp8(t, m, r, x.data(), w.data(), b.data(), n, C, 1e-5f);
  };
  auto rms = [&](const Fp8Tensor& t, float* r, int64_t n) {
    return cpu::RmsNormForwardFp8(t, r, x.data(), w.data(), n, C, 1e-5f);
  };
  HostCodes with_t(N, C, Fp8Format::kE4M3, 1.f);
  with_t.t.data_t = t_codes.data();
  expect_refused(ln(with_t.t, mean.data(), rstd.data(), N), "LayerNormForwardFp8", "data_t");
  expect_refused(rms(with_t.t, rstd.data(), N), "RmsNormForwardFp8", "data_t");
  HostCodes no_data(N, C, Fp8Format::kE4M3, 1.f);
  no_data.t.data = nullptr;
  expect_refused(ln(no_data.t, mean.data(), rstd.data(), N), "LayerNormForwardFp8", "no data");
  expect_refused(rms(no_data.t, rstd.data(), N), "RmsNormForwardFp8", "no data");
  HostCodes ok(N, C, Fp8Format::kE4M3, 1.f);
  expect_refused(ln(ok.t, mean.data(), rstd.data(), 1), "LayerNormForwardFp8", "rows != N");
  expect_refused(rms(ok.t, rstd.data(), 1), "RmsNormForwardFp8", "rows != N");
  expect_refused(ln(ok.t, mean.data(), nullptr, N), "LayerNormForwardFp8", "mean without rstd");
  expect_refused(cpu::LayerNormForwardFp8<float>(ok.t, nullptr, nullptr, x.data(), w.data(),
                                                 nullptr, N, C, 1e-5f),
                 "LayerNormForwardFp8", "no bias");
  expect_refused(cpu::RmsNormForwardFp8<float>(ok.t, nullptr, nullptr, w.data(), N, C, 1e-5f),
                 "RmsNormForwardFp8", "no input");
  // Statistics are optional (inference), as in the plain forwards.
  EXPECT_TRUE(ln(ok.t, nullptr, nullptr, N).ok());
  EXPECT_TRUE(rms(ok.t, nullptr, N).ok());
}

}  // namespace
}  // namespace fp8rt

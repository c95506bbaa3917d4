// The reference quantize/dequantize/amax/current-scaling against hand-computed codes, the
// transpose relation, amax and saturation telemetry, and the round-trip error bound of FP8.
#include "kernels/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/scaling.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::HostFp8;
using test::kAllOutputs;
using test::Outputs;
using test::OutputsName;
using test::Select;

TEST(QuantizeCpu, HandCheckedE4M3CodesSaturationAmaxAndScaleInv) {
  // scale 2: 1 -> 2 (0x40), -0.25 -> -0.5 (0xb0), 300 -> 600 saturates to 448 (0x7e),
  // 3.25 -> 6.5 = 1.625 * 4 (0x4d), 224 -> 448 exactly (0x7e, not counted), 232 -> 464 (0x7e,
  // counted), -1000 -> -2000 (0xfe, counted).
  const std::vector<float> in = {1.f, -0.25f, 300.f, 0.f, 3.25f, 224.f, 232.f, -1000.f};
  HostFp8 q(2, 4, Fp8Format::kE4M3, 2.f);
  uint64_t saturated = 0;
  ASSERT_TRUE(cpu::Quantize(in.data(), q.t, &saturated).ok());
  const std::vector<uint8_t> want = {0x40, 0xb0, 0x7e, 0x00, 0x4d, 0x7e, 0x7e, 0xfe};
  EXPECT_EQ(q.data, want);
  const std::vector<uint8_t> want_t = {0x40, 0x4d, 0xb0, 0x7e, 0x7e, 0x7e, 0x00, 0xfe};
  EXPECT_EQ(q.data_t, want_t);
  EXPECT_EQ(saturated, 3u);
  EXPECT_EQ(q.amax, 1000.f);
  EXPECT_EQ(q.scale_inv, 0.5f);
  EXPECT_EQ(q.scale, 2.f);  // read, never written
}

TEST(QuantizeCpu, HandCheckedE5M2Codes) {
  // scale 0.5: 3 -> 1.5 (0x3e), -1 -> -0.5 (0xb8), 1e6 -> 5e5 saturates to 57344 (0x7b),
  // 2^-17 -> 2^-18: below half the smallest subnormal 2^-16, rounds to 0.
  const std::vector<float> in = {3.f, -1.f, 1e6f, std::ldexp(1.f, -17)};
  HostFp8 q(1, 4, Fp8Format::kE5M2, 0.5f);
  uint64_t saturated = 0;
  ASSERT_TRUE(cpu::Quantize(in.data(), q.t, &saturated).ok());
  EXPECT_EQ(q.data, (std::vector<uint8_t>{0x3e, 0xb8, 0x7b, 0x00}));
  EXPECT_EQ(saturated, 1u);
  EXPECT_EQ(q.scale_inv, 2.f);
}

TEST(QuantizeCpu, TransposedCopyIsTheTransposeOfData) {
  const int64_t rows = 37, cols = 53;
  const std::vector<float> in = test::RandomNormal(rows * cols, 7, 0.f, 3.f);
  HostFp8 q(rows, cols, Fp8Format::kE4M3, 40.f);
  ASSERT_TRUE(cpu::Quantize(in.data(), q.t).ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(q.data_t[c * rows + r], q.data[r * cols + c]) << r << "," << c;
      ASSERT_EQ(q.data[r * cols + c], Fp8Encode(in[r * cols + c] * 40.f, Fp8Format::kE4M3));
    }
  }
}

TEST(QuantizeCpu, WithoutTransposeLeavesNoCopyAndSameCodes) {
  const std::vector<float> in = test::RandomUniform(64, 3, -5.f, 5.f);
  HostFp8 with(8, 8, Fp8Format::kE5M2, 3.f, true), without(8, 8, Fp8Format::kE5M2, 3.f, false);
  ASSERT_TRUE(cpu::Quantize(in.data(), with.t).ok());
  ASSERT_TRUE(cpu::Quantize(in.data(), without.t).ok());
  EXPECT_EQ(with.data, without.data);
  EXPECT_EQ(with.amax, without.amax);
}

// Casts a into qa and b into qb: the same transposed codes (and row-major ones when
// compare_data), amax and saturation count, which is not zero.
template <typename A, typename B>
void ExpectSameCasts(const A* a, HostFp8* qa, const B* b, HostFp8* qb, bool compare_data) {
  uint64_t sa = 0, sb = 0;
  ASSERT_TRUE(cpu::Quantize(a, qa->t, &sa).ok());
  ASSERT_TRUE(cpu::Quantize(b, qb->t, &sb).ok());
  if (compare_data) {
    EXPECT_EQ(qa->data, qb->data);
  }
  EXPECT_EQ(qa->data_t, qb->data_t);
  EXPECT_EQ(qa->amax, qb->amax);
  EXPECT_EQ(sa, sb);
  EXPECT_GT(sa, 0u);
}

// data null, data_t given: the transposed copy alone, the same codes, amax and saturation.
TEST(QuantizeCpu, TransposedOnlyCastWritesTheSameTransposedCodes) {
  const int64_t rows = 37, cols = 53;
  std::vector<float> in = test::RandomNormal(rows * cols, 9, 0.f, 3.f);
  in[5] = 1e6f;  // saturates
  HostFp8 full(rows, cols, Fp8Format::kE4M3, 40.f), only(rows, cols, Fp8Format::kE4M3, 40.f);
  only.t.data = nullptr;
  ExpectSameCasts(in.data(), &full, in.data(), &only, /*compare_data=*/false);
  EXPECT_EQ(only.scale_inv, full.scale_inv);
  only.t.data_t = nullptr;  // neither: refused, naming both
  const Status s = cpu::Quantize(in.data(), only.t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("data_t"), std::string::npos) << s.message();
}

TEST(QuantizeCpu, AmaxAndSaturationAccumulate) {
  const std::vector<float> in = {0.5f, -3.f, 1000.f, -2000.f};
  HostFp8 q(2, 2, Fp8Format::kE4M3, 1.f);
  q.amax = 5000.f;  // larger than this tensor's: stays
  uint64_t saturated = 10;
  ASSERT_TRUE(cpu::Quantize(in.data(), q.t, &saturated).ok());
  EXPECT_EQ(q.amax, 5000.f);
  EXPECT_EQ(saturated, 12u);
  q.amax = 1.f;  // smaller: replaced by 2000
  ASSERT_TRUE(cpu::Quantize(in.data(), q.t, &saturated).ok());
  EXPECT_EQ(q.amax, 2000.f);
  EXPECT_EQ(saturated, 14u);
}

TEST(QuantizeCpu, NanInputMakesAmaxNanAndInfSaturates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> in = {1.f, -nan, -INFINITY, 2.f};
  HostFp8 q(1, 4, Fp8Format::kE4M3, 1.f);
  uint64_t saturated = 0;
  ASSERT_TRUE(cpu::Quantize(in.data(), q.t, &saturated).ok());
  EXPECT_TRUE(std::isnan(q.amax));
  EXPECT_EQ(q.data[1], 0x7f);  // canonical NaN
  EXPECT_EQ(q.data[2], 0xfe);  // -inf saturates to -448
  EXPECT_EQ(saturated, 1u);    // inf counts, NaN does not

  // Without the NaN, inf is the amax.
  const std::vector<float> in2 = {1.f, -INFINITY};
  HostFp8 q2(1, 2, Fp8Format::kE4M3, 1.f);
  ASSERT_TRUE(cpu::Quantize(in2.data(), q2.t).ok());
  EXPECT_EQ(q2.amax, INFINITY);
}

TEST(QuantizeCpu, Bf16InputMatchesFloatInputOfTheSameValues) {
  const std::vector<float> f = test::RandomNormal(96, 11, 0.f, 10.f);
  const std::vector<bf16> b = test::CastVector<bf16>(f);
  const std::vector<float> fb = test::ToFloatVector(b);
  HostFp8 qb(12, 8, Fp8Format::kE4M3, 40.f), qf(12, 8, Fp8Format::kE4M3, 40.f);
  // (40 * N(0, 10) exceeds 448 for about a quarter of the values: both saturate)
  ExpectSameCasts(b.data(), &qb, fb.data(), &qf, /*compare_data=*/true);
}

// Round trip: with the scale from the amax, every value in the normal range comes back within
// half an FP8 ulp: relative 2^-4 (E4M3, 3 mantissa bits) or 2^-3 (E5M2, 2 bits).
class QuantizeRoundTrip : public ::testing::TestWithParam<Fp8Format> {};

TEST_P(QuantizeRoundTrip, DequantizeOfQuantizeIsWithinHalfAnUlp) {
  const Fp8Format f = GetParam();
  const int64_t rows = 16, cols = 48;
  const std::vector<float> in = test::RandomUniform(rows * cols, 5, -30.f, 30.f);
  HostFp8 q(rows, cols, f, 1.f);
  ASSERT_TRUE(cpu::QuantizeCurrentScaling(in.data(), q.t).ok());
  std::vector<float> back(in.size(), -1.f);
  ASSERT_TRUE(cpu::Dequantize(q.t, back.data()).ok());
  const double rel = f == Fp8Format::kE4M3 ? 1.0 / 16 : 1.0 / 8;
  const float smallest_normal = f == Fp8Format::kE4M3 ? std::ldexp(1.f, -6) : std::ldexp(1.f, -14);
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::fabs(in[i] * q.scale) < smallest_normal) continue;
    EXPECT_LE(std::fabs(back[i] - in[i]), rel * std::fabs(in[i]) * 1.0001) << i << ": " << in[i];
  }
  // Dequantize is exactly decode * scale_inv.
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(back[i], Fp8Decode(q.data[i], f) * q.scale_inv);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizeRoundTrip,
                         ::testing::Values(Fp8Format::kE4M3, Fp8Format::kE5M2),
                         [](const auto& info) { return std::string(Fp8FormatName(info.param)); });

TEST(QuantizeCpu, DequantizeToBf16RoundsTheProduct) {
  std::vector<uint8_t> codes = {0x38, 0x40, 0xb0, 0x7e};  // 1, 2, -0.5, 448 (E4M3)
  float scale = 3.f, scale_inv = 1.f / 3.f;
  Fp8Tensor t;
  t.data = codes.data();
  t.rows = 1;
  t.cols = 4;
  t.scale = &scale;
  t.scale_inv = &scale_inv;
  std::vector<bf16> out(4);
  ASSERT_TRUE(cpu::Dequantize(t, out.data()).ok());
  EXPECT_EQ(out[0].bits, bf16(scale_inv).bits);
  EXPECT_EQ(out[1].bits, bf16(2.f * scale_inv).bits);
  EXPECT_EQ(out[2].bits, bf16(-0.5f * scale_inv).bits);
  EXPECT_EQ(out[3].bits, bf16(448.f * scale_inv).bits);
}

TEST(QuantizeCpu, DbiasAddsColumnSumsAndKeepsTheCodes) {
  const int64_t rows = 5, cols = 3;
  std::vector<float> in(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) in[i] = 0.25f * static_cast<float>(i) - 1.0f;
  std::vector<uint8_t> d1(in.size()), t1(in.size()), d2(in.size()), t2(in.size());
  float s1 = 2.f, si1 = 0, a1 = 0, s2 = 2.f, si2 = 0, a2 = 0;
  auto tensor = [&](uint8_t* d, uint8_t* t, float* s, float* si, float* a) {
    Fp8Tensor q;
    q.data = d, q.data_t = t, q.rows = rows, q.cols = cols;
    q.scale = s, q.scale_inv = si, q.amax = a;
    return q;
  };
  const Fp8Tensor q1 = tensor(d1.data(), t1.data(), &s1, &si1, &a1);
  Fp8Tensor q2 = tensor(d2.data(), t2.data(), &s2, &si2, &a2);
  ASSERT_TRUE(cpu::Quantize(in.data(), q1).ok());
  std::vector<float> db = {10.f, 20.f, 30.f};
  ASSERT_TRUE(cpu::QuantizeDbias(in.data(), q2, db.data()).ok());
  EXPECT_EQ(d1, d2);
  EXPECT_EQ(t1, t2);
  EXPECT_EQ(a1, a2);
  for (int64_t c = 0; c < cols; ++c) {
    float sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += in[r * cols + c];
    EXPECT_FLOAT_EQ(db[c], 10.f * (c + 1) + sum) << "column " << c;
  }
  // Without the transposed copy there is no cast+transpose pass to ride on.
  q2.data_t = nullptr;
  const Status st = cpu::QuantizeDbias(in.data(), q2, db.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("data_t"), std::string::npos) << st.ToString();
}

// QuantizeDbiasGeluGrad is QuantizeDbias of GeluBackward's output: same codes, amax, bias sums.
TEST(QuantizeCpu, DbiasGeluGradIsGeluBackwardThenDbias) {
  const int64_t rows = 6, cols = 4, n = rows * cols;
  std::vector<float> dout(n), pre(n), din(n);
  for (int64_t i = 0; i < n; ++i) {
    dout[i] = 0.3f * static_cast<float>(i % 7) - 0.9f;
    pre[i] = 0.37f * static_cast<float>(i) - 4.0f;
  }
  ASSERT_TRUE(cpu::GeluBackward(din.data(), pre.data(), dout.data(), n).ok());
  std::vector<uint8_t> d1(n), t1(n), d2(n), t2(n);
  float s1 = 8.f, si1 = 0, a1 = 0, s2 = 8.f, si2 = 0, a2 = 0;
  Fp8Tensor q1, q2;
  q1.data = d1.data(), q1.data_t = t1.data(), q1.rows = rows, q1.cols = cols;
  q1.scale = &s1, q1.scale_inv = &si1, q1.amax = &a1;
  q2 = q1;
  q2.data = d2.data(), q2.data_t = t2.data(), q2.scale = &s2, q2.scale_inv = &si2, q2.amax = &a2;
  std::vector<float> db1(cols, 1.f), db2(cols, 1.f);
  ASSERT_TRUE(cpu::QuantizeDbias(din.data(), q1, db1.data()).ok());
  ASSERT_TRUE(cpu::QuantizeDbiasGeluGrad(dout.data(), pre.data(), q2, db2.data()).ok());
  EXPECT_EQ(d1, d2);
  EXPECT_EQ(t1, t2);
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(db1, db2);
  const Status st =
      cpu::QuantizeDbiasGeluGrad<float>(dout.data(), static_cast<const float*>(nullptr), q2,
                                        db2.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("pre"), std::string::npos) << st.ToString();
}

// With gelu_out, the GELU forward's codes ride along (train.recompute's FC2 input, cast again
// in FC's dY cast): out exactly as without it, gelu_out's transposed codes and scale_inv
// QuantizeGelu's, its data untouched; and each wrong gelu_out is named.
TEST(QuantizeCpu, DbiasGeluGradWithGeluOutAlsoWritesQuantizeGelusTransposedCodes) {
  const int64_t rows = 6, cols = 5, n = rows * cols;
  std::vector<float> dout(n), pre(n);
  for (int64_t i = 0; i < n; ++i) {
    dout[i] = 0.3f * static_cast<float>(i % 7) - 0.9f;
    pre[i] = 0.37f * static_cast<float>(i) - 4.0f;
  }
  pre[7] = 900.f;  // GELU(900) * 2 saturates E4M3
  for (const Fp8Format gf : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    HostFp8 plain(rows, cols, Fp8Format::kE5M2, 8.f), fused(rows, cols, Fp8Format::kE5M2, 8.f);
    HostFp8 want_g(rows, cols, gf, 2.f), got_g(rows, cols, gf, 2.f, true, 0.5f);
    want_g.t.data = nullptr, want_g.t.amax = nullptr;
    got_g.t.data = nullptr, got_g.t.amax = nullptr;
    std::vector<float> db1(cols, 1.f), db2(cols, 1.f);
    uint64_t sat1 = 0, sat2 = 0;
    ASSERT_TRUE(
        cpu::QuantizeDbiasGeluGrad(dout.data(), pre.data(), plain.t, db1.data(), &sat1).ok());
    ASSERT_TRUE(cpu::QuantizeGelu(pre.data(), want_g.t).ok());
    const Status st =
        cpu::QuantizeDbiasGeluGrad(dout.data(), pre.data(), fused.t, db2.data(), &sat2, &got_g.t);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(fused.data, plain.data);
    EXPECT_EQ(fused.data_t, plain.data_t);
    EXPECT_EQ(fused.amax, plain.amax);
    EXPECT_EQ(sat2, sat1);
    EXPECT_EQ(db2, db1);
    EXPECT_EQ(got_g.data_t, want_g.data_t);
    EXPECT_EQ(got_g.data, std::vector<uint8_t>(n, 0xAA)) << "gelu_out.data is not written";
    EXPECT_EQ(got_g.scale_inv, 0.5f);
  }

  HostFp8 out(rows, cols, Fp8Format::kE5M2, 8.f);
  std::vector<float> db(cols, 0.f);
  auto error_of = [&](const Fp8Tensor& g) {
    return cpu::QuantizeDbiasGeluGrad(dout.data(), pre.data(), out.t, db.data(), nullptr, &g);
  };
  HostFp8 g(rows, cols, Fp8Format::kE4M3, 2.f);
  g.t.amax = nullptr;
  const std::pair<std::function<void(Fp8Tensor&)>, std::string> cases[] = {
      {[](Fp8Tensor&) {}, "its data must be null and data_t set"},
      {[](Fp8Tensor& t) { t.data = nullptr, t.data_t = nullptr; },
       "(gelu_out): data is null for a (6, 5) tensor (and so is data_t)"},
      {[&](Fp8Tensor& t) { t.data = nullptr, t.amax = &g.amax; }, "gelu_out.amax is set"},
      {[](Fp8Tensor& t) { t.data = nullptr, t.cols = 4; }, "gelu_out is (6, 4); out is (6, 5)"},
      {[&](Fp8Tensor& t) { t.data = nullptr, t.data_t = out.t.data_t; },
       "gelu_out.data_t must not alias out's codes"},
      {[&](Fp8Tensor& t) { t.data = nullptr, t.data_t = out.t.data + 3; },
       "gelu_out.data_t must not alias out's codes"},
      {[&](Fp8Tensor& t) { t.data = nullptr, t.scale_inv = out.t.scale_inv; },
       "gelu_out.scale_inv must not alias out's"},
  };
  for (const auto& [mutate, want] : cases) {
    Fp8Tensor bad = g.t;
    mutate(bad);
    const Status st = error_of(bad);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << want;
    EXPECT_NE(st.message().find("QuantizeDbiasGeluGrad"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
  }
}

// The GELU input as E4M3 codes at scale 1 (fp8.gelu_input_fp8): the same result as the T
// version given the codes' values, which T holds exactly; saturated codes read as +-448.
TEST(QuantizeCpu, DbiasGeluGradFromE4m3CodesIsTheDecodedValuesVersion) {
  const int64_t rows = 7, cols = 9, n = rows * cols;
  std::vector<bf16> dout(n);
  std::vector<uint8_t> codes(n);
  std::vector<bf16> decoded(n);
  for (int64_t i = 0; i < n; ++i) {
    dout[i] = bf16(0.3f * static_cast<float>(i % 7) - 0.9f);
    codes[i] = Fp8Encode(0.41f * static_cast<float>(i) - 9.0f, Fp8Format::kE4M3);
  }
  codes[3] = Fp8Encode(1e5f, Fp8Format::kE4M3);  // satfinite: 448
  for (int64_t i = 0; i < n; ++i) decoded[i] = bf16(Fp8Decode(codes[i], Fp8Format::kE4M3));
  EXPECT_EQ(ToFloat(decoded[3]), 448.f);
  HostFp8 a(rows, cols, Fp8Format::kE5M2, 4.f), b(rows, cols, Fp8Format::kE5M2, 4.f);
  std::vector<float> dba(cols, 1.f), dbb(cols, 1.f);
  uint64_t sa = 0, sb = 0;
  ASSERT_TRUE(cpu::QuantizeDbiasGeluGrad(dout.data(), decoded.data(), a.t, dba.data(), &sa).ok());
  ASSERT_TRUE(cpu::QuantizeDbiasGeluGrad(dout.data(), codes.data(), b.t, dbb.data(), &sb).ok());
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.data_t, b.data_t);
  EXPECT_EQ(a.amax, b.amax);
  EXPECT_EQ(dba, dbb);
  EXPECT_EQ(sa, sb);
  const Status st = cpu::QuantizeDbiasGeluGrad(dout.data(), static_cast<const uint8_t*>(nullptr),
                                               b.t, dbb.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

// A fused cast against the two steps' cast (want): the same codes in the orientations it
// writes, the others left poisoned, and the same amax (bits), saturation count and scale_inv.
void ExpectSameCast(Outputs o, const HostFp8& got, uint64_t got_sat, const HostFp8& want,
                    uint64_t want_sat) {
  SCOPED_TRACE(OutputsName(o));
  const std::vector<uint8_t> poison(got.data.size(), 0xAA);
  EXPECT_EQ(got.data, o == Outputs::kTransposedOnly ? poison : want.data) << "data";
  EXPECT_EQ(got.data_t, o == Outputs::kDataOnly ? poison : want.data_t) << "data_t";
  EXPECT_EQ(FloatBits(got.amax), FloatBits(want.amax)) << got.amax << " vs " << want.amax;
  EXPECT_EQ(got_sat, want_sat);
  EXPECT_EQ(FloatBits(got.scale_inv), FloatBits(want.scale_inv));
}

// QuantizeGelu is Quantize of GeluForward's output: one case's codes (both orientations, then
// each alone), amax and saturation count against the two steps. GELU inputs far below -10 (the
// output underflows to -0), large positives (saturating at scale 16) and, with with_nan, a NaN
// (the amax comes out NaN).
template <typename T>
void ExpectGeluCastEqualsGeluThenCast(int64_t rows, int64_t cols, bool with_nan) {
  SCOPED_TRACE(::testing::Message() << rows << "x" << cols << (with_nan ? " with NaN" : ""));
  const int64_t n = rows * cols;
  std::vector<float> x = test::RandomUniform(n, 31 + n, -6.f, 6.f);
  if (n > 2) x[n / 2] = -40.f;
  if (n > 3) x[n / 3] = 300.f;
  if (n > 5) x[n / 5] = -12.5f;
  if (with_nan) x[n / 4] = std::numeric_limits<float>::quiet_NaN();
  x[0] = 1e4f;
  const std::vector<T> pre = test::CastVector<T>(x);
  std::vector<T> gelu(n);
  ASSERT_TRUE(cpu::GeluForward(gelu.data(), pre.data(), n).ok());
  HostFp8 want(rows, cols, Fp8Format::kE4M3, 16.f);
  want.amax = 0.125f;  // accumulated into
  uint64_t want_sat = 3;
  ASSERT_TRUE(cpu::Quantize(gelu.data(), want.t, &want_sat).ok());
  EXPECT_EQ(std::isnan(want.amax), with_nan);
  EXPECT_GT(want_sat, 3u) << "the inputs must saturate";
  EXPECT_EQ(want.scale_inv, 1.f / 16.f);
  for (const Outputs o : kAllOutputs) {
    HostFp8 got(rows, cols, Fp8Format::kE4M3, 16.f);
    got.amax = 0.125f;
    Select(o, got);
    uint64_t got_sat = 3;
    const Status st = cpu::QuantizeGelu(pre.data(), got.t, &got_sat);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectSameCast(o, got, got_sat, want, want_sat);
  }
}

TEST(QuantizeCpu, GeluCastEqualsGeluThenCast) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {33, 130}}) {
    ExpectGeluCastEqualsGeluThenCast<float>(rows, cols, /*with_nan=*/false);
    ExpectGeluCastEqualsGeluThenCast<bf16>(rows, cols, /*with_nan=*/false);
    if (rows * cols > 1) {
      ExpectGeluCastEqualsGeluThenCast<float>(rows, cols, /*with_nan=*/true);
      ExpectGeluCastEqualsGeluThenCast<bf16>(rows, cols, /*with_nan=*/true);
    }
  }
}

TEST(QuantizeCpu, GeluCastPreconditionsNameTheOp) {
  const std::vector<float> pre(4, 1.f);
  HostFp8 q(2, 2, Fp8Format::kE4M3, 1.f);
  Fp8Tensor bad = q.t;
  bad.data = bad.data_t = nullptr;
  Status s = cpu::QuantizeGelu(pre.data(), bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("QuantizeGelu: data is null for a (2, 2) tensor (and so is data_t)"),
            std::string::npos)
      << s.message();
  s = cpu::QuantizeGelu<float>(nullptr, q.t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("QuantizeGelu: pre is null"), std::string::npos) << s.message();

  // Empty: only scale_inv is written (pre may be null).
  HostFp8 empty(0, 16, Fp8Format::kE4M3, 4.f);
  uint8_t unused[2] = {};
  empty.t.data = &unused[0];
  empty.t.data_t = &unused[1];
  uint64_t saturated = 0;
  ASSERT_TRUE(cpu::QuantizeGelu<bf16>(nullptr, empty.t, &saturated).ok());
  EXPECT_EQ(empty.scale_inv, 0.25f);
  EXPECT_EQ(empty.amax, 0.f);
  EXPECT_EQ(saturated, 0u);
}

// QuantizeLayerNorm is the documented fp32 formula (std::fma for LayerNorm; RMSNorm multiplied
// left to right), rounded to T, then Quantize: one case's codes (both orientations, then each
// alone), amax and saturation count against the two steps. The statistics are arbitrary (the
// formula does not care where they come from); row 0 (a large x[0] and rstd) saturates at scale
// 16.
template <typename T>
void ExpectNormCastEqualsFormulaThenCast(int64_t rows, int64_t cols, bool rms) {
  SCOPED_TRACE(::testing::Message() << rows << "x" << cols << (rms ? " RMSNorm" : " LayerNorm"));
  const int64_t n = rows * cols;
  std::vector<float> xf = test::RandomNormal(n, 81 + n, 0.3f, 1.5f);
  xf[0] = 30.f;
  const std::vector<T> x = test::CastVector<T>(xf);
  const std::vector<T> w = test::CastVector<T>(test::RandomNormal(cols, 82, 1.f, 0.3f));
  const std::vector<T> b = test::CastVector<T>(test::RandomNormal(cols, 83, 0.f, 0.3f));
  const std::vector<float> mean = test::RandomNormal(rows, 84, 0.3f, 0.1f);
  std::vector<float> rstd = test::RandomUniform(rows, 85, 0.5f, 1.5f);
  rstd[0] = 300.f;
  std::vector<T> y(n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float xv = ToFloat(x[r * cols + c]), wv = ToFloat(w[c]);
      y[r * cols + c] =
          T(rms ? xv * rstd[r] * wv : std::fma((xv - mean[r]) * rstd[r], wv, ToFloat(b[c])));
    }
  }
  HostFp8 want(rows, cols, Fp8Format::kE4M3, 16.f);
  want.amax = 0.125f;  // accumulated into
  uint64_t want_sat = 3;
  ASSERT_TRUE(cpu::Quantize(y.data(), want.t, &want_sat).ok());
  EXPECT_GT(want_sat, 3u) << "the inputs must saturate";
  for (const Outputs o : kAllOutputs) {
    HostFp8 got(rows, cols, Fp8Format::kE4M3, 16.f);
    got.amax = 0.125f;
    Select(o, got);
    uint64_t got_sat = 3;
    const Status st = cpu::QuantizeLayerNorm(x.data(), rms ? nullptr : mean.data(), rstd.data(),
                                             w.data(), rms ? nullptr : b.data(), got.t, &got_sat);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectSameCast(o, got, got_sat, want, want_sat);
  }
}

TEST(QuantizeCpu, LayerNormCastEqualsFormulaThenCast) {
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {33, 130}, {64, 128}, {5, 2050}}) {
    for (const bool rms : {false, true}) {
      ExpectNormCastEqualsFormulaThenCast<float>(rows, cols, rms);
      ExpectNormCastEqualsFormulaThenCast<bf16>(rows, cols, rms);
    }
  }
}

// LayerNorm's affine step is one fma, as the CUDA forward computes it: with d = x - mean =
// 1 + 2^-12 (rstd 1), w = 1 + 2^-12 and b = -1, d * w + b = 2^-11 + 2^-24 exactly, which the fp32
// output (and so the amax) keeps; the product rounded first would give 2^-11.
TEST(QuantizeCpu, LayerNormCastAffineIsOneFma) {
  const float d = 1.f + std::ldexp(1.f, -12), mean = 0.f, rstd = 1.f, w = d, b = -1.f;
  HostFp8 q(1, 1, Fp8Format::kE4M3, 1.f);
  ASSERT_TRUE(cpu::QuantizeLayerNorm(&d, &mean, &rstd, &w, &b, q.t).ok());
  EXPECT_EQ(q.amax, std::ldexp(1.f, -11) + std::ldexp(1.f, -24));
}

TEST(QuantizeCpu, LayerNormCastPreconditionsNameTheOp) {
  const std::vector<float> x(4, 1.f), w(2, 1.f), b(2, 0.f), stat(2, 1.f);
  HostFp8 q(2, 2, Fp8Format::kE4M3, 1.f);
  auto expect_error = [](const Status& s, const std::string& what) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  Fp8Tensor neither = q.t;
  neither.data = neither.data_t = nullptr;
  expect_error(cpu::QuantizeLayerNorm<float>(x.data(), stat.data(), stat.data(), w.data(), b.data(),
                                             neither),
               "QuantizeLayerNorm: data is null for a (2, 2) tensor (and so is data_t)");
  expect_error(
      cpu::QuantizeLayerNorm<float>(x.data(), stat.data(), stat.data(), w.data(), nullptr, q.t),
      "QuantizeLayerNorm: mean is set but bias is null; both set (LayerNorm) or both null "
      "(RMSNorm)");
  expect_error(
      cpu::QuantizeLayerNorm<float>(x.data(), nullptr, stat.data(), w.data(), b.data(), q.t),
      "QuantizeLayerNorm: mean is null but bias is set");
  const std::string null_input =
      "QuantizeLayerNorm: in, rstd and weight must be non-null for a (2, 2) tensor";
  expect_error(cpu::QuantizeLayerNorm<float>(nullptr, nullptr, stat.data(), w.data(), nullptr, q.t),
               null_input);
  expect_error(cpu::QuantizeLayerNorm<float>(x.data(), nullptr, nullptr, w.data(), nullptr, q.t),
               null_input);
  expect_error(
      cpu::QuantizeLayerNorm<float>(x.data(), stat.data(), stat.data(), nullptr, b.data(), q.t),
      null_input);

  // Empty: only scale_inv is written (the inputs may be null).
  HostFp8 empty(0, 16, Fp8Format::kE4M3, 4.f);
  uint64_t saturated = 0;
  ASSERT_TRUE(
      cpu::QuantizeLayerNorm<bf16>(nullptr, nullptr, nullptr, nullptr, nullptr, empty.t, &saturated)
          .ok());
  EXPECT_EQ(empty.scale_inv, 0.25f);
  EXPECT_EQ(empty.amax, 0.f);
  EXPECT_EQ(saturated, 0u);
}

TEST(QuantizeCpu, CurrentScalingUsesThisTensorsAmax) {
  const std::vector<float> in = {0.5f, -7.f, 3.f, 1.f};
  HostFp8 q(2, 2, Fp8Format::kE4M3, 123.f);
  q.amax = 1e9f;  // stale: current scaling overwrites rather than accumulates
  ASSERT_TRUE(cpu::QuantizeCurrentScaling(in.data(), q.t, /*margin=*/0).ok());
  EXPECT_EQ(q.amax, 7.f);
  EXPECT_EQ(q.scale, 64.f);  // 448 / 7
  EXPECT_EQ(q.scale_inv, 1.f / 64.f);
  EXPECT_EQ(q.data[1], 0xfe);  // -7 * 64 = -448
  EXPECT_EQ(q.data[0], Fp8Encode(32.f, Fp8Format::kE4M3));

  ASSERT_TRUE(cpu::QuantizeCurrentScaling(in.data(), q.t, /*margin=*/2).ok());
  EXPECT_EQ(q.scale, 16.f);  // 448 / 7 / 4
}

TEST(QuantizeCpu, CurrentScalingOfZerosKeepsTheOldScale) {
  const std::vector<float> in(6, 0.f);
  HostFp8 q(2, 3, Fp8Format::kE5M2, 5.f);
  ASSERT_TRUE(cpu::QuantizeCurrentScaling(in.data(), q.t).ok());
  EXPECT_EQ(q.amax, 0.f);
  EXPECT_EQ(q.scale, 5.f);
  EXPECT_EQ(q.scale_inv, 0.2f);
  EXPECT_EQ(q.data, std::vector<uint8_t>(6, 0));
}

TEST(QuantizeCpu, ComputeAmaxAccumulates) {
  const std::vector<bf16> in = test::CastVector<bf16>({1.f, -9.5f, 4.f});
  float amax = 2.f;
  ASSERT_TRUE(cpu::ComputeAmax(in.data(), 3, &amax).ok());
  EXPECT_EQ(amax, 9.5f);
  amax = 20.f;
  ASSERT_TRUE(cpu::ComputeAmax(in.data(), 3, &amax).ok());
  EXPECT_EQ(amax, 20.f);
  ASSERT_TRUE(cpu::ComputeAmax<bf16>(nullptr, 0, &amax).ok());
  EXPECT_EQ(amax, 20.f);
}

TEST(QuantizeCpu, EmptyTensorWritesOnlyScaleInv) {
  HostFp8 q(0, 16, Fp8Format::kE4M3, 4.f);
  uint64_t saturated = 0;
  ASSERT_TRUE(cpu::Quantize<float>(nullptr, q.t, &saturated).ok());
  EXPECT_EQ(q.scale_inv, 0.25f);
  EXPECT_EQ(q.amax, 0.f);
  EXPECT_EQ(saturated, 0u);
}

TEST(QuantizeCpu, PreconditionsNameTheArgument) {
  const std::vector<float> in(4, 1.f);
  HostFp8 q(2, 2, Fp8Format::kE4M3, 1.f);

  Fp8Tensor bad = q.t;
  bad.rows = -1;
  Status s = cpu::Quantize(in.data(), bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("-1"), std::string::npos) << s.message();

  bad = q.t;
  bad.scale = nullptr;
  s = cpu::Quantize(in.data(), bad);
  EXPECT_NE(s.message().find("scale"), std::string::npos) << s.message();

  bad = q.t;
  bad.data_t = bad.data;
  s = cpu::Quantize(in.data(), bad);
  EXPECT_NE(s.message().find("data_t"), std::string::npos) << s.message();

  s = cpu::Quantize<float>(nullptr, q.t);
  EXPECT_NE(s.message().find("in is null"), std::string::npos) << s.message();

  s = cpu::QuantizeCurrentScaling(in.data(), q.t, 33);
  EXPECT_NE(s.message().find("margin=33"), std::string::npos) << s.message();

  bad = q.t;
  bad.amax = nullptr;
  s = cpu::QuantizeCurrentScaling(in.data(), bad);
  EXPECT_NE(s.message().find("amax"), std::string::npos) << s.message();

  float amax = 0;
  s = cpu::ComputeAmax(in.data(), -3, &amax);
  EXPECT_NE(s.message().find("n=-3"), std::string::npos) << s.message();
}

TEST(QuantizeCpu, TransposeFp8HandChecked) {
  const std::vector<uint8_t> in = {1, 2, 3, 4, 5, 6};  // (2, 3)
  std::vector<uint8_t> out(6, 0);
  ASSERT_TRUE(cpu::TransposeFp8(out.data(), in.data(), 2, 3).ok());
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 4, 2, 5, 3, 6}));  // (3, 2)
  EXPECT_TRUE(cpu::TransposeFp8(nullptr, nullptr, 0, 5).ok());
  std::vector<uint8_t> same(4);
  const Status s = cpu::TransposeFp8(same.data(), same.data(), 2, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("distinct"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fp8rt

// Reference GEMM against hand-computed products, the FP8 contract (shapes, layout, formats), the
// linear-layer GEMM builders, and finite-difference checks of a linear layer's dgrad and wgrad.
#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

// Row-major (rows, cols) values stored as the GEMM expects: transposed when trans.
std::vector<float> Stored(const std::vector<float>& m, int64_t rows, int64_t cols, bool trans) {
  if (!trans) return m;
  std::vector<float> t(m.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  }
  return t;
}

GemmOperand F32(const std::vector<float>& v, bool trans = false) {
  return {v.data(), DType::kFloat32, trans, 0, 0, nullptr};
}

double GeluRef(double x) {
  return 0.5 * x *
         (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

// A (2, 3) = [1 2 3; 4 5 6], B (3, 2) = [7 8; 9 10; 11 12]: A B = [58 64; 139 154].
const std::vector<float> kA = {1, 2, 3, 4, 5, 6};
const std::vector<float> kB = {7, 8, 9, 10, 11, 12};
const std::vector<float> kAB = {58, 64, 139, 154};

class GemmTransCombos : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(GemmTransCombos, MatchesHandComputedProduct) {
  const auto [ta, tb] = GetParam();
  const std::vector<float> a = Stored(kA, 2, 3, ta), b = Stored(kB, 3, 2, tb);
  std::vector<float> d(4, -7.f);
  GemmArgs g;
  g.M = 2, g.N = 2, g.K = 3;
  g.a = F32(a, ta), g.b = F32(b, tb);
  g.d = d.data();
  ASSERT_TRUE(cpu::Gemm(g).ok());
  EXPECT_EQ(d, kAB);
}

TEST_P(GemmTransCombos, MatMulTemplateAgreesInDouble) {
  const auto [ta, tb] = GetParam();
  std::vector<double> a, b;
  for (float x : Stored(kA, 2, 3, ta)) a.push_back(x);
  for (float x : Stored(kB, 3, 2, tb)) b.push_back(x);
  std::vector<double> d = {1, 1, 1, 1};
  cpu::MatMul<double>(d.data(), a.data(), b.data(), 2, 2, 3, ta, tb, 0.5, 2.0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d[i], 0.5 * kAB[i] + 2.0) << i;
}

INSTANTIATE_TEST_SUITE_P(All, GemmTransCombos,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "At" : "An") +
                                  (std::get<1>(info.param) ? "Bt" : "Bn");
                         });

TEST(GemmReference, StridedBatchesWithPitchesLeavePaddingAlone) {
  // Two batches; A (2, 3) with pitch 4, batch stride 10; B (3, 2) packed, stride 6; D pitch 3,
  // stride 7. Batch 1 uses A + 1 and B * 2, so its product is A B + [sum B cols] ... computed.
  const float pad = 99.f;
  std::vector<float> a(20, pad), b(12), d(14, pad);
  for (int bi = 0; bi < 2; ++bi) {
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 3; ++c) a[bi * 10 + r * 4 + c] = kA[r * 3 + c] + bi;
    }
    for (int i = 0; i < 6; ++i) b[bi * 6 + i] = kB[i] * (bi + 1);
  }
  GemmArgs g;
  g.M = 2, g.N = 2, g.K = 3, g.batch = 2;
  g.a = {a.data(), DType::kFloat32, false, 4, 10, nullptr};
  g.b = {b.data(), DType::kFloat32, false, 0, 0, nullptr};
  g.d = d.data(), g.ldd = 3, g.d_batch_stride = 7;
  ASSERT_TRUE(cpu::Gemm(g).ok());
  // Batch 1: (A + 1)(2B) = 2AB + 2 * (column sums of B) = 2AB + [54 60].
  const std::vector<float> want1 = {2 * 58 + 54, 2 * 64 + 60, 2 * 139 + 54, 2 * 154 + 60};
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(d[r * 3 + c], kAB[r * 2 + c]);
      EXPECT_EQ(d[7 + r * 3 + c], want1[r * 2 + c]);
    }
    EXPECT_EQ(d[r * 3 + 2], pad) << "pitch padding of batch 0 row " << r;
    EXPECT_EQ(d[7 + r * 3 + 2], pad) << "pitch padding of batch 1 row " << r;
  }
  EXPECT_EQ(d[6], pad);
}

TEST(GemmReference, AlphaAndBetaAccumulate) {
  std::vector<float> d = {1, 2, 3, 4};
  GemmArgs g;
  g.M = 2, g.N = 2, g.K = 3;
  g.a = F32(kA), g.b = F32(kB);
  g.d = d.data(), g.alpha = 2.f, g.beta = 0.5f;
  ASSERT_TRUE(cpu::Gemm(g).ok());
  EXPECT_EQ(d, (std::vector<float>{116.5f, 129.f, 279.5f, 310.f}));
}

// With GemmArgs::c, beta scales C (left unchanged) and D's old contents are never read.
TEST(GemmReference, BetaReadsASeparateC) {
  const std::vector<float> c = {1, 2, 3, 4};
  std::vector<float> d = {NAN, NAN, NAN, NAN};
  GemmArgs g;
  g.M = 2, g.N = 2, g.K = 3;
  g.a = F32(kA), g.b = F32(kB);
  g.c = c.data(), g.d = d.data(), g.alpha = 2.f, g.beta = 0.5f;
  ASSERT_TRUE(cpu::Gemm(g).ok());
  EXPECT_EQ(d, (std::vector<float>{116.5f, 129.f, 279.5f, 310.f}));
  EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4}));
}

TEST(GemmReference, BiasGeluAndAuxFollowCublasLtOrder) {
  // A = I (2x2), B = [1 -1; 0 2] (a multiple-of-8 N is needed for aux, so N = 8 with zero
  // columns), bias per column. D = gelu(A B + bias), aux = A B + bias.
  const int64_t N = 8;
  std::vector<float> a = {1, 0, 0, 1}, b(2 * N, 0.f), bias(N, 0.f);
  b[0] = 1, b[1] = -1, b[N + 0] = 0, b[N + 1] = 2;
  bias[0] = 0, bias[1] = -1, bias[2] = 3;
  std::vector<float> d(2 * N, -5.f), aux(2 * N, -5.f);
  GemmArgs g;
  g.M = 2, g.N = N, g.K = 2;
  g.a = F32(a), g.b = F32(b);
  g.d = d.data(), g.bias = bias.data(), g.aux = aux.data();
  g.epilogue = Epilogue::kBiasGeluAux;
  ASSERT_TRUE(cpu::Gemm(g).ok());
  const std::vector<float> pre = {1, -2, 3, 0, 0, 0, 0, 0, 0, 1, 3, 0, 0, 0, 0, 0};
  for (int i = 0; i < 2 * N; ++i) {
    EXPECT_EQ(aux[i], pre[i]) << i;
    EXPECT_FLOAT_EQ(d[i], static_cast<float>(GeluRef(pre[i]))) << i;
  }
  EXPECT_FLOAT_EQ(d[0], 0.8411919906f);
  EXPECT_FLOAT_EQ(d[1], -0.0454023059f);

  // Bias alone, then GELU alone.
  g.epilogue = Epilogue::kBias;
  ASSERT_TRUE(cpu::Gemm(g).ok());
  for (int i = 0; i < 2 * N; ++i) EXPECT_EQ(d[i], pre[i]) << i;
  g.epilogue = Epilogue::kGelu;
  ASSERT_TRUE(cpu::Gemm(g).ok());
  EXPECT_FLOAT_EQ(d[1], static_cast<float>(GeluRef(-1)));
  EXPECT_EQ(d[2], 0.f);
}

TEST(GemmReference, DGeluMultipliesByTheGeluDerivativeOfAux) {
  // D = (A B) * gelu'(aux) with A = I: D[i] = B[i] * gelu'(aux[i]); aux is read, not written.
  const int64_t N = 8;
  std::vector<float> a = {1, 0, 0, 1}, b(2 * N), aux(2 * N), d(2 * N, -5.f);
  for (int i = 0; i < 2 * N; ++i) {
    b[i] = 0.5f * static_cast<float>(i) - 3.f;
    aux[i] = 0.375f * static_cast<float>(i) - 2.5f;
  }
  const std::vector<float> aux_before = aux;
  GemmArgs g;
  g.M = 2, g.N = N, g.K = 2;
  g.a = F32(a), g.b = F32(b);
  g.d = d.data(), g.aux = aux.data();
  g.epilogue = Epilogue::kDGelu;
  ASSERT_TRUE(cpu::Gemm(g).ok());
  EXPECT_EQ(aux, aux_before);
  for (int i = 0; i < 2 * N; ++i) {
    const double x = aux[i], eps = 1e-5;  // central difference of the forward's GELU
    const double grad = (GeluRef(x + eps) - GeluRef(x - eps)) / (2 * eps);
    EXPECT_NEAR(d[i], b[i] * grad, 1e-5 * (1 + std::fabs(b[i] * grad))) << i;
  }
  // The aux pitch rule and a missing aux are refused by name.
  g.aux = nullptr;
  EXPECT_NE(cpu::Gemm(g).message().find("dgelu needs aux"), std::string::npos);
}

TEST(GemmReference, Bf16OutputRoundsOnceToNearestEven) {
  // 1 x 1 x 2: 1 + 2^-9 rounds to 1 in bf16; 1 + 3 * 2^-9 rounds up to 1 + 2^-7.
  const std::vector<bf16> a = {bf16(1.f), bf16(1.f)};
  const std::vector<bf16> b1 = {bf16(1.f), bf16(std::ldexp(1.f, -9))};
  const std::vector<bf16> b2 = {bf16(1.f), bf16(3 * std::ldexp(1.f, -9))};
  std::vector<bf16> d(1);
  GemmArgs g;
  g.M = 1, g.N = 1, g.K = 2;
  g.a = {a.data(), DType::kBFloat16, false, 0, 0, nullptr};
  g.b = {b1.data(), DType::kBFloat16, false, 0, 0, nullptr};
  g.d = d.data(), g.d_dtype = DType::kBFloat16;
  ASSERT_TRUE(cpu::Gemm(g).ok());
  EXPECT_EQ(ToFloat(d[0]), 1.f);
  g.b.ptr = b2.data();
  ASSERT_TRUE(cpu::Gemm(g).ok());
  EXPECT_EQ(ToFloat(d[0]), 1.f + std::ldexp(1.f, -7));
}

// ---- FP8 ----

struct HostFp8 {
  std::vector<uint8_t> data, data_t;
  float scale_inv = 1.f;
  Fp8Tensor t;
};
// Quantizes (rows, cols) values with `scale` and fills both layouts.
HostFp8 Quantize(const std::vector<float>& v, int64_t rows, int64_t cols, Fp8Format f,
                 float scale) {
  HostFp8 h;
  h.data.resize(v.size());
  h.data_t.resize(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t q = Fp8Encode(v[r * cols + c] * scale, f);
      h.data[r * cols + c] = q;
      h.data_t[c * rows + r] = q;
    }
  }
  h.scale_inv = 1.f / scale;
  return h;
}
Fp8Tensor View(HostFp8& h, int64_t rows, int64_t cols, Fp8Format f) {
  Fp8Tensor t;
  t.data = h.data.data(), t.data_t = h.data_t.data();
  t.rows = rows, t.cols = cols, t.format = f;
  t.scale_inv = &h.scale_inv;
  return t;
}
std::vector<double> Dequantized(const HostFp8& h, Fp8Format f) {
  std::vector<double> out(h.data.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = double(Fp8Decode(h.data[i], f)) * h.scale_inv;
  return out;
}

TEST(GemmFp8, ScaledProductEqualsDequantizedProduct) {
  const int64_t M = 32, N = 16, K = 48;
  HostFp8 x = Quantize(test::RandomUniform(M * K, 1), M, K, Fp8Format::kE4M3, 64.f);
  HostFp8 w = Quantize(test::RandomUniform(N * K, 2), N, K, Fp8Format::kE4M3, 128.f);
  std::vector<float> y(M * N);
  Fp8Tensor xt = View(x, M, K, Fp8Format::kE4M3), wt = View(w, N, K, Fp8Format::kE4M3);
  auto args = Fp8Fprop(xt, wt, y.data(), DType::kFloat32);
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_TRUE(args->fast_accum);
  ASSERT_TRUE(cpu::Gemm(*args).ok());
  const std::vector<double> xd = Dequantized(x, Fp8Format::kE4M3);
  const std::vector<double> wd = Dequantized(w, Fp8Format::kE4M3);
  std::vector<double> want(M * N);
  cpu::MatMul<double>(want.data(), xd.data(), wd.data(), M, N, K, false, true);
  for (int64_t i = 0; i < M * N; ++i) EXPECT_NEAR(y[i], want[i], 1e-6 * (1 + std::fabs(want[i])));
}

TEST(GemmFp8, DgradAndWgradReadTheTransposedCopies) {
  const int64_t M = 32, N = 48, K = 16;
  HostFp8 dy = Quantize(test::RandomUniform(M * N, 3), M, N, Fp8Format::kE5M2, 1024.f);
  HostFp8 w = Quantize(test::RandomUniform(N * K, 4), N, K, Fp8Format::kE4M3, 256.f);
  HostFp8 x = Quantize(test::RandomUniform(M * K, 5), M, K, Fp8Format::kE4M3, 256.f);
  Fp8Tensor dyt = View(dy, M, N, Fp8Format::kE5M2), wt = View(w, N, K, Fp8Format::kE4M3);
  Fp8Tensor xt = View(x, M, K, Fp8Format::kE4M3);
  const std::vector<double> dyd = Dequantized(dy, Fp8Format::kE5M2);
  const std::vector<double> wd = Dequantized(w, Fp8Format::kE4M3);
  const std::vector<double> xd = Dequantized(x, Fp8Format::kE4M3);

  std::vector<bf16> dx(M * K);
  auto dg = Fp8Dgrad(dyt, wt, dx.data(), DType::kBFloat16);
  ASSERT_TRUE(dg.ok()) << dg.status().ToString();
  EXPECT_FALSE(dg->fast_accum);
  ASSERT_TRUE(cpu::Gemm(*dg).ok());
  std::vector<double> want_dx(M * K);
  cpu::MatMul<double>(want_dx.data(), dyd.data(), wd.data(), M, K, N, false, false);
  for (int64_t i = 0; i < M * K; ++i) {
    EXPECT_EQ(ToFloat(dx[i]), ToFloat(bf16(static_cast<float>(want_dx[i])))) << i;
  }

  std::vector<float> dw(N * K, 0.5f);
  auto wg = Fp8Wgrad(dyt, xt, dw.data(), /*accumulate=*/true);
  ASSERT_TRUE(wg.ok()) << wg.status().ToString();
  ASSERT_TRUE(cpu::Gemm(*wg).ok());
  std::vector<double> want_dw(N * K);
  cpu::MatMul<double>(want_dw.data(), dyd.data(), xd.data(), N, K, M, true, false);
  for (int64_t i = 0; i < N * K; ++i) EXPECT_NEAR(dw[i], 0.5 + want_dw[i], 1e-5) << i;
  auto wg0 = Fp8Wgrad(dyt, xt, dw.data(), /*accumulate=*/false);
  ASSERT_TRUE(wg0.ok());
  ASSERT_TRUE(cpu::Gemm(*wg0).ok());
  for (int64_t i = 0; i < N * K; ++i) EXPECT_NEAR(dw[i], want_dw[i], 1e-5) << i;
}

TEST(GemmFp8, BuildersRejectMissingTransposesAndShapeMismatches) {
  HostFp8 a = Quantize(std::vector<float>(32 * 16, 1.f), 32, 16, Fp8Format::kE4M3, 1.f);
  HostFp8 b = Quantize(std::vector<float>(48 * 16, 1.f), 48, 16, Fp8Format::kE4M3, 1.f);
  Fp8Tensor at = View(a, 32, 16, Fp8Format::kE4M3), bt = View(b, 48, 16, Fp8Format::kE4M3);
  std::vector<float> out(48 * 48);
  Fp8Tensor w_no_t = bt;
  w_no_t.data_t = nullptr;
  auto dg = Fp8Dgrad(View(a, 32, 48, Fp8Format::kE5M2), w_no_t, out.data(), DType::kFloat32);
  ASSERT_FALSE(dg.ok());
  EXPECT_NE(dg.status().message().find("data_t"), std::string::npos) << dg.status().ToString();
  auto fp = Fp8Fprop(at, View(b, 16, 48, Fp8Format::kE4M3), out.data(), DType::kFloat32);
  ASSERT_FALSE(fp.ok());
  EXPECT_EQ(fp.status().code(), StatusCode::kInvalidArgument);
  auto wg = Fp8Wgrad(at, bt, out.data(), true);  // rows 32 vs 48
  ASSERT_FALSE(wg.ok());
  EXPECT_NE(wg.status().message().find("rows"), std::string::npos) << wg.status().ToString();
}

class GemmFp8Errors : public ::testing::Test {
 protected:
  void SetUp() override {
    g.M = 32, g.N = 16, g.K = 48;
    g.a = {bytes.data(), DType::kE4M3, false, 0, 0, &one};
    g.b = {bytes.data(), DType::kE4M3, true, 0, 0, &one};
    g.d = out.data();
    ASSERT_TRUE(ValidateGemm(g).ok());
  }
  void ExpectError(const std::string& needle) {
    const Status s = cpu::Gemm(g);
    ASSERT_FALSE(s.ok()) << "expected an error containing '" << needle << "'";
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  }
  std::vector<uint8_t> bytes = std::vector<uint8_t>(64 * 64, 0x38);
  std::vector<float> out = std::vector<float>(64 * 64);
  float one = 1.f;
  GemmArgs g;
};

TEST_F(GemmFp8Errors, DimensionsNotMultipleOf16NameTheDimension) {
  g.K = 17;
  ExpectError("K=17");
  ExpectError("callers pad");
  g.K = 48, g.M = 20;
  ExpectError("M=20");
  g.M = 32, g.N = 8;
  ExpectError("N=8");
}

TEST_F(GemmFp8Errors, NonTnLayoutsAskForTheTransposedCopy) {
  g.a.trans = true;
  ExpectError("data_t");
  g.a.trans = false, g.b.trans = false;
  ExpectError("trans_b=true");
}

TEST_F(GemmFp8Errors, FormatAndScaleRules) {
  g.a.dtype = g.b.dtype = DType::kE5M2;
  ExpectError("both e5m2");
  g.a.dtype = DType::kE5M2, g.b.dtype = DType::kE4M3;
  EXPECT_TRUE(cpu::Gemm(g).ok());
  g.b.dtype = DType::kBFloat16;
  ExpectError("both operands FP8");
  g.b.dtype = DType::kE4M3, g.b.scale_inv = nullptr;
  ExpectError("b.scale_inv");
  g.b.scale_inv = &one, g.d_dtype = DType::kE4M3;
  ExpectError("allowed: fp32, bf16");
  g.d_dtype = DType::kBFloat16, g.a.ld = 56;
  ExpectError("a.ld=56");
}

TEST(GemmValidation, ReportsTheOffendingArgument) {
  std::vector<float> a(64), b(64), d(64);
  GemmArgs g;
  g.M = 2, g.N = 8, g.K = 3;
  g.a = F32(a), g.b = F32(b), g.d = d.data();
  ASSERT_TRUE(ValidateGemm(g).ok());
  auto expect = [&](GemmArgs bad, const std::string& needle) {
    const Status s = cpu::Gemm(bad);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  };
  GemmArgs x = g;
  x.a.ptr = nullptr;
  expect(x, "a.ptr is null");
  x = g, x.b.ld = 4;
  expect(x, "b.ld=4");
  x = g, x.a.trans = true, x.a.ld = 1;
  expect(x, "a.ld=1");
  x = g, x.ldd = 7;
  expect(x, "ldd=7");
  x = g, x.K = 0;
  expect(x, "K=0");
  x = g, x.batch = 0;
  expect(x, "batch=0");
  x = g, x.b.dtype = DType::kBFloat16;
  expect(x, "must match");
  x = g, x.d_dtype = DType::kBFloat16;
  expect(x, "allowed: fp32");
  x = g, x.epilogue = Epilogue::kBias;
  expect(x, "needs a bias");
  x = g, x.epilogue = Epilogue::kBiasGeluAux, x.bias = b.data();
  expect(x, "needs aux");
  x.aux = d.data(), x.N = 6;
  expect(x, "multiple of 8");
  x = g, x.M = 0;
  EXPECT_TRUE(cpu::Gemm(x).ok()) << "an empty product is a no-op";
}

TEST(GemmValidation, BiasDtypeFollowsCublasLt) {
  GemmArgs g;
  g.a.dtype = g.b.dtype = DType::kE4M3;
  g.d_dtype = DType::kFloat32;
  EXPECT_EQ(GemmBiasDType(g), DType::kBFloat16);
  g.d_dtype = DType::kBFloat16;
  EXPECT_EQ(GemmBiasDType(g), DType::kBFloat16);
  g.a.dtype = g.b.dtype = DType::kBFloat16;
  g.d_dtype = DType::kFloat32;
  EXPECT_EQ(GemmBiasDType(g), DType::kFloat32);
}

TEST(GemmReference, Fp8Fp32OutputReadsBf16Bias) {
  const int64_t M = 16, N = 16, K = 16;
  std::vector<uint8_t> zeros(M * K, 0);
  std::vector<bf16> bias(N);
  for (int j = 0; j < N; ++j) bias[j] = bf16(0.5f * j);
  std::vector<float> y(M * N);
  float one = 1.f;
  GemmArgs g;
  g.M = M, g.N = N, g.K = K;
  g.a = {zeros.data(), DType::kE4M3, false, 0, 0, &one};
  g.b = {zeros.data(), DType::kE4M3, true, 0, 0, &one};
  g.d = y.data(), g.bias = bias.data(), g.epilogue = Epilogue::kBias;
  ASSERT_TRUE(cpu::Gemm(g).ok());
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) EXPECT_EQ(y[i * N + j], 0.5f * j);
  }
}

// ---- finite differences: a linear layer y = x W^T + b, loss = sum(y * g) ----

TEST(GemmGradients, LinearLayerDgradAndWgradMatchFiniteDifferences) {
  const int64_t M = 5, K = 4, N = 3;
  auto to_d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  std::vector<double> x = to_d(test::RandomUniform(M * K, 11));
  std::vector<double> w = to_d(test::RandomUniform(N * K, 12));
  std::vector<double> bias = to_d(test::RandomUniform(N, 13));
  const std::vector<double> gout = to_d(test::RandomUniform(M * N, 14));
  auto loss = [&]() {
    std::vector<double> y(M * N);
    cpu::MatMul<double>(y.data(), x.data(), w.data(), M, N, K, false, true);
    double l = 0;
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) l += (y[i * N + j] + bias[j]) * gout[i * N + j];
    }
    return l;
  };
  // dgrad dX (M, K) = dY W; wgrad dW (N, K) = dY^T X, accumulated into an existing gradient.
  std::vector<double> dx(M * K), dw(N * K, 1.0);
  cpu::MatMul<double>(dx.data(), gout.data(), w.data(), M, K, N, false, false);
  cpu::MatMul<double>(dw.data(), gout.data(), x.data(), N, K, M, true, false, 1.0, 1.0);
  const double eps = 1e-6;
  auto fd = [&](double& p) {
    const double saved = p;
    p = saved + eps;
    const double up = loss();
    p = saved - eps;
    const double down = loss();
    p = saved;
    return (up - down) / (2 * eps);
  };
  for (int64_t i = 0; i < M * K; ++i) EXPECT_NEAR(dx[i], fd(x[i]), 1e-8) << "dx " << i;
  for (int64_t i = 0; i < N * K; ++i) EXPECT_NEAR(dw[i] - 1.0, fd(w[i]), 1e-8) << "dw " << i;
}

}  // namespace
}  // namespace fp8rt

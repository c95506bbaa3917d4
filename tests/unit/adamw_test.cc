// The reference AdamW against a hand-computed two-step example (with and without weight decay and
// clipping), its working copies (bf16, FP8), and the global gradient norm.
#include "kernels/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/grad_norm.h"
#include "kernels/scaling.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

// Two steps of one parameter p0 = 1 with grads 0.5 then -0.25, lr 0.1, betas (0.9, 0.95):
//   step 1: m = 0.05, v = 0.0125, m_hat = 0.5, v_hat = 0.25 -> update 0.5 / (0.5 + 1e-8)
//   step 2: m = 0.02, v = 0.015, m_hat = 0.02 / 0.19, v_hat = 0.015 / 0.0975
// Values below evaluated in fp64 from those formulas with the fp32 constants (0.9f, 0.95f, 0.1f,
// 1e-8f: 1 - 0.95f is 0.0500000119...), the moments stored as fp32 between the steps.
struct Expected {
  double p1, p2, m1, m2, v1, v2;
};

void RunTwoSteps(float weight_decay, const float* grad_norm_sq, float max_norm, const Expected& e) {
  AdamWConfig cfg;
  cfg.lr = 0.1f;
  float p = 1.f, m = 0.f, v = 0.f;
  bf16 working;
  const float g1 = 0.5f, g2 = -0.25f;
  ASSERT_TRUE(
      cpu::AdamW(&p, &m, &v, &g1, &working, 1, 1, cfg, weight_decay, grad_norm_sq, max_norm).ok());
  EXPECT_NEAR(p, e.p1, 1e-7);
  EXPECT_NEAR(m, e.m1, 2e-7 * e.m1);
  EXPECT_NEAR(v, e.v1, 2e-7 * e.v1);
  EXPECT_EQ(working.bits, bf16(p).bits);
  ASSERT_TRUE(
      cpu::AdamW(&p, &m, &v, &g2, &working, 1, 2, cfg, weight_decay, grad_norm_sq, max_norm).ok());
  EXPECT_NEAR(p, e.p2, 1e-7);
  EXPECT_NEAR(m, e.m2, 2e-7 * e.m2);
  EXPECT_NEAR(v, e.v2, 2e-7 * e.v2);
  EXPECT_EQ(working.bits, bf16(p).bits);
}

TEST(AdamWReference, TwoStepsWithWeightDecay) {
  RunTwoSteps(0.1f, nullptr, 0.f,
              {0.8900000002118607, 0.8542630422601993, 0.050000011920928955, 0.020000003576278402,
               0.012500002980232239, 0.015000003427267039});
}

TEST(AdamWReference, TwoStepsWithoutWeightDecay) {
  RunTwoSteps(0.f, nullptr, 0.f,
              {0.9000000005098838, 0.8731630328456458, 0.050000011920928955, 0.020000003576278402,
               0.012500002980232239, 0.015000003427267039});
}

TEST(AdamWReference, ClippingScalesTheGradient) {
  // ||g|| = 4, max 1: clip = 1 / (4 + 1e-6). Adam's first step is scale-invariant (up to eps), the
  // moments are not, and neither is step 2.
  const float norm_sq = 16.f;
  RunTwoSteps(0.1f, &norm_sq, 1.f,
              {0.890000006211862, 0.8542630424849045, 0.012499999855232275, 0.0049999999419986976,
               0.0007812497956395683, 0.0009374997294670131});
  // A norm below the threshold leaves the gradient alone.
  const float small_sq = 0.25f;
  RunTwoSteps(0.1f, &small_sq, 1.f,
              {0.8900000002118607, 0.8542630422601993, 0.050000011920928955, 0.020000003576278402,
               0.012500002980232239, 0.015000003427267039});
}

TEST(AdamWReference, RejectsBadArguments) {
  float p = 1, m = 0, v = 0, g = 1;
  AdamWConfig cfg;
  EXPECT_EQ(cpu::AdamW<float>(&p, &m, &v, &g, nullptr, 1, 0, cfg, 0.f, nullptr, 0.f).code(),
            StatusCode::kInvalidArgument);  // step is 1-based
  EXPECT_EQ(cpu::AdamW<float>(&p, &m, &v, &g, nullptr, 1, 1, cfg, 0.f, nullptr, 1.f).code(),
            StatusCode::kInvalidArgument);  // clipping without a norm
  cfg.beta2 = 1.f;
  EXPECT_EQ(cpu::AdamW<float>(&p, &m, &v, &g, nullptr, 1, 1, cfg, 0.f, nullptr, 0.f).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(p, 1.f);  // nothing written on error
}

TEST(AdamWReference, Fp8WorkingCopyEncodesTheNewMasterWeights) {
  const int64_t rows = 3, cols = 5, n = rows * cols;
  std::vector<float> master = test::RandomNormal(n, 51, 0.f, 3.f), m(n, 0.f), v(n, 0.f);
  const std::vector<float> grad = test::RandomNormal(n, 52);
  std::vector<float> master_ref = master, m_ref = m, v_ref = v;
  std::vector<float> working_ref(n);
  AdamWConfig cfg;
  cfg.lr = 0.01f;
  ASSERT_TRUE(cpu::AdamW(master_ref.data(), m_ref.data(), v_ref.data(), grad.data(),
                         working_ref.data(), n, 3, cfg, 0.1f, nullptr, 0.f)
                  .ok());
  std::vector<uint8_t> data(n), data_t(n);
  float scale = 100.f, scale_inv = 0.f, amax = 0.5f;
  Fp8Tensor t;
  t.data = data.data();
  t.data_t = data_t.data();
  t.rows = rows;
  t.cols = cols;
  t.format = Fp8Format::kE4M3;
  t.scale = &scale;
  t.scale_inv = &scale_inv;
  t.amax = &amax;
  ASSERT_TRUE(
      cpu::AdamWFp8(master.data(), m.data(), v.data(), grad.data(), t, 3, cfg, 0.1f, nullptr, 0.f)
          .ok());
  EXPECT_EQ(master, master_ref);
  EXPECT_EQ(m, m_ref);
  EXPECT_EQ(v, v_ref);
  float want_amax = 0.5f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const uint8_t q = Fp8Encode(master_ref[i] * 100.f, Fp8Format::kE4M3);
      EXPECT_EQ(data[i], q) << i;
      EXPECT_EQ(data_t[c * rows + r], q) << i;
      want_amax = std::fmax(want_amax, std::fabs(master_ref[i]));
    }
  }
  EXPECT_EQ(amax, want_amax);
  EXPECT_EQ(scale_inv, 0.01f);
  // Some weights must saturate at scale 100 (|p| > 4.48) for the test to cover it.
  EXPECT_GT(want_amax, 4.48f);
}

// train.moments_dtype: bf16. The moments are stored rounded to nearest even; the update of the
// master uses this step's unrounded moments, so one step from the same state moves the master
// exactly as with FP32 moments, and only the stored moments differ (by their BF16 rounding).
TEST(AdamWReference, Bf16MomentsRoundWhenStoredOnly) {
  const int64_t n = 257;
  std::vector<float> master = test::RandomNormal(n, 61), m32(n), v32(n);
  const std::vector<float> grad = test::RandomNormal(n, 62, 0.f, 0.1f);
  std::vector<bf16> m16(n), v16(n);
  const std::vector<float> m0 = test::RandomNormal(n, 63, 0.f, 0.01f);
  for (int64_t i = 0; i < n; ++i) {
    m16[i] = bf16(m0[i]), v16[i] = bf16(std::fabs(m0[i]) * 0.01f);
    m32[i] = static_cast<float>(m16[i]), v32[i] = static_cast<float>(v16[i]);
  }
  std::vector<float> master32 = master;
  AdamWConfig cfg;
  ASSERT_TRUE(cpu::AdamW<float>(master32.data(), m32.data(), v32.data(), grad.data(), nullptr, n,
                                5, cfg, 0.1f, nullptr, 0.f)
                  .ok());
  ASSERT_TRUE(cpu::AdamW<float>(master.data(), m16.data(), v16.data(), grad.data(), nullptr, n, 5,
                                cfg, 0.1f, nullptr, 0.f)
                  .ok());
  EXPECT_EQ(master, master32);
  int rounded = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(m16[i].bits, bf16(m32[i]).bits) << i;
    ASSERT_EQ(v16[i].bits, bf16(v32[i]).bits) << i;
    rounded += static_cast<float>(m16[i]) != m32[i];
  }
  EXPECT_GT(rounded, n / 2);  // (the rounding happened: most FP32 moments are not BF16 values)
}

TEST(GradNormReference, SumOfSquares) {
  const std::vector<float> g = {3, -4};
  float out = -1;
  ASSERT_TRUE(cpu::GlobalNormSquared(&out, g.data(), 2).ok());
  EXPECT_EQ(out, 25.f);
  ASSERT_TRUE(cpu::GlobalNormSquared(&out, g.data(), 0).ok());
  EXPECT_EQ(out, 0.f);  // written, not accumulated
  const std::vector<float> r = test::RandomUniform(10001, 53);
  double want = 0;
  for (float x : r) want += double{x} * x;
  ASSERT_TRUE(cpu::GlobalNormSquared(&out, r.data(), 10001).ok());
  EXPECT_EQ(out, static_cast<float>(want));
}

TEST(GradNormReference, AccumulateAddsToWhatIsThere) {
  const std::vector<float> g = {3, -4};
  float out = 7;
  ASSERT_TRUE(cpu::GlobalNormSquared(&out, g.data(), 2, /*accumulate=*/true).ok());
  EXPECT_EQ(out, 32.f);
  ASSERT_TRUE(cpu::GlobalNormSquared(&out, g.data(), 1, /*accumulate=*/true).ok());
  EXPECT_EQ(out, 41.f);
}

}  // namespace
}  // namespace fp8rt

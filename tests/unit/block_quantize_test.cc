// The CPU references of FP8 block scaling (kernels/block_quantize.h): 1x128 and 128x128 casts on
// awkward shapes (partial blocks both ways), their scale layouts (cuBLASLt's, with the padding),
// zero and NaN blocks, power-of-two scales, the 128x128 transposed copy, the block-scaled GEMM
// against a double-precision product of the dequantized operands, and the GemmArgs that ask
// cuBLASLt for it (GemmScaleMode) against that GEMM.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/block_quantize.h"
#include "kernels/gemm.h"
#include "kernels/scaling.h"

namespace fp8rt {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(static_cast<size_t>(n));
  // Rows of very different magnitudes: what per-block scales are for.
  for (int64_t i = 0; i < n; ++i) v[i] = g(rng) * std::ldexp(1.0f, static_cast<int>(i % 7) * 3 - 9);
  return v;
}

const std::pair<int64_t, int64_t> kShapes[] = {{1, 1},   {3, 127}, {5, 128}, {7, 129},
                                               {64, 300}, {130, 257}, {256, 256}};

float BlockAmaxOf(const std::vector<float>& x, int64_t cols, int64_t r0, int64_t r1, int64_t c0,
                  int64_t c1) {
  float a = 0;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) a = std::max(a, std::fabs(x[r * cols + c]));
  return a;
}

// Every element within FP8's rounding of its block-scaled value: half a step of E4M3 (2^-4
// relative) for normals, half the smallest subnormal step (2^-10) times the scale below.
void ExpectRoundTrip(const std::vector<float>& x, const BlockFp8Operand& t, const char* what) {
  std::vector<float> back(x.size());
  ASSERT_TRUE(cpu::DequantizeBlock(t, back.data()).ok());
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t c = 0; c < t.cols; ++c) {
      const float s = t.scale_inv[t.blk128 ? BlockLayout::Blk128Index(r, c, t.cols)
                                           : BlockLayout::Vec128Index(r, c, t.rows)];
      const float v = x[r * t.cols + c];
      ASSERT_LE(std::fabs(back[r * t.cols + c] - v), std::fabs(v) / 16 + s / 1024)
          << what << " " << t.rows << "x" << t.cols << " at " << r << "," << c;
    }
  }
}

TEST(BlockQuantize, Vec128BlocksTheirScalesAndTheRoundTrip) {
  for (const auto& [rows, cols] : kShapes) {
    const auto x = Random(rows * cols, 1);
    std::vector<uint8_t> q(x.size());
    std::vector<float> s(BlockLayout::Vec128ScaleCount(rows, cols), -1.0f);
    ASSERT_TRUE(cpu::QuantizeVec128(x.data(), rows, cols, Fp8Format::kE4M3, false, q.data(),
                                    s.data()).ok());
    for (int64_t r = 0; r < BlockLayout::Pad4(rows); ++r) {
      for (int64_t b = 0; b < BlockLayout::Blocks(cols); ++b) {
        const float got = s[b * BlockLayout::Pad4(rows) + r];
        if (r >= rows) {
          EXPECT_EQ(got, 1.0f) << "padding";
          continue;
        }
        const float amax = BlockAmaxOf(x, cols, r, r + 1, b * 128, std::min(cols, b * 128 + 128));
        EXPECT_EQ(got, ScaleInv(ComputeScale(amax, 1.0f, 448.0f, 0))) << rows << "x" << cols;
      }
    }
    ExpectRoundTrip(x, {q.data(), s.data(), rows, cols, Fp8Format::kE4M3, false}, "vec128");
  }
}

// The columns' cast: column c's rows 128 b.. form a block; its scale comes from that block's amax
// and sits where a Vec128 cast of the (cols, rows) transpose puts block (c, b); the codes are the
// transpose's, and they decode back to x^T.
TEST(BlockQuantize, Vec128ColumnsBlockTheColumnsIntoTheTranspose) {
  for (const auto& [rows, cols] : kShapes) {
    const auto x = Random(rows * cols, 2);
    std::vector<uint8_t> qt(x.size());
    std::vector<float> st(BlockLayout::Vec128ScaleCount(cols, rows), -1.0f);
    ASSERT_TRUE(cpu::QuantizeVec128Columns(x.data(), rows, cols, Fp8Format::kE4M3, false,
                                           qt.data(), st.data()).ok());
    std::vector<float> xt(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
    }
    for (int64_t c = 0; c < BlockLayout::Pad4(cols); ++c) {
      for (int64_t b = 0; b < BlockLayout::Blocks(rows); ++b) {
        const float got = st[b * BlockLayout::Pad4(cols) + c];
        if (c >= cols) {
          EXPECT_EQ(got, 1.0f) << "padding";
          continue;
        }
        float amax = 0;
        for (int64_t r = b * 128; r < std::min(rows, b * 128 + 128); ++r) {
          amax = std::max(amax, std::fabs(x[r * cols + c]));
        }
        EXPECT_EQ(got, ScaleInv(ComputeScale(amax, 1.0f, 448.0f, 0))) << rows << "x" << cols;
      }
    }
    ExpectRoundTrip(xt, {qt.data(), st.data(), cols, rows, Fp8Format::kE4M3, false}, "columns");
  }
}

TEST(BlockQuantize, Blk128BlocksTheTransposedCopyAndTheRoundTrip) {
  for (const auto& [rows, cols] : kShapes) {
    const auto x = Random(rows * cols, 2);
    std::vector<uint8_t> q(x.size()), qt(x.size());
    std::vector<float> s(BlockLayout::Blk128ScaleCount(rows, cols), -1.0f);
    std::vector<float> st(BlockLayout::Blk128ScaleCount(cols, rows), -1.0f);
    ASSERT_TRUE(cpu::QuantizeBlk128(x.data(), rows, cols, Fp8Format::kE4M3, false, q.data(),
                                    s.data(), qt.data(), st.data()).ok());
    for (int64_t i = 0; i < BlockLayout::Blocks(rows); ++i) {
      for (int64_t j = 0; j < BlockLayout::Pad4(BlockLayout::Blocks(cols)); ++j) {
        const float got = s[i * BlockLayout::Pad4(BlockLayout::Blocks(cols)) + j];
        if (j >= BlockLayout::Blocks(cols)) {
          EXPECT_EQ(got, 1.0f) << "padding";
          continue;
        }
        const float amax = BlockAmaxOf(x, cols, i * 128, std::min(rows, i * 128 + 128), j * 128,
                                       std::min(cols, j * 128 + 128));
        EXPECT_EQ(got, ScaleInv(ComputeScale(amax, 1.0f, 448.0f, 0)));
        EXPECT_EQ(st[j * BlockLayout::Pad4(BlockLayout::Blocks(rows)) + i], got) << "transposed grid";
      }
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(qt[c * rows + r], q[r * cols + c]);
    ExpectRoundTrip(x, {q.data(), s.data(), rows, cols, Fp8Format::kE4M3, true}, "blk128");
    std::vector<float> xt(x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
    ExpectRoundTrip(xt, {qt.data(), st.data(), cols, rows, Fp8Format::kE4M3, true}, "blk128^T");
  }
}

TEST(BlockQuantize, ZeroAndNanBlocksPowerOfTwoScalesAndE5m2) {
  std::vector<float> x(2 * 256, 0.0f);  // row 0: a zero block, then a block holding a NaN
  x[128 + 5] = std::nanf(""), x[128 + 6] = 3.0f;
  for (int c = 0; c < 256; ++c) x[256 + c] = 0.37f * (c % 11 - 5);
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(BlockLayout::Vec128ScaleCount(2, 256));
  ASSERT_TRUE(cpu::QuantizeVec128(x.data(), 2, 256, Fp8Format::kE4M3, false, q.data(), s.data()).ok());
  EXPECT_EQ(s[BlockLayout::Vec128Index(0, 0, 2)], 1.0f) << "zero block keeps scale 1";
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(s[BlockLayout::Vec128Index(0, 128, 2)], 1.0f) << "a NaN amax keeps scale 1";
  EXPECT_TRUE(std::isnan(Fp8Decode(q[128 + 5], Fp8Format::kE4M3))) << "the NaN is not dropped";
  EXPECT_EQ(Fp8Decode(q[128 + 6], Fp8Format::kE4M3), 3.0f);
  // Power-of-two scales: every scale_inv is 2^k, and the block's max stays within range.
  ASSERT_TRUE(cpu::QuantizeVec128(x.data(), 2, 256, Fp8Format::kE5M2, true, q.data(), s.data()).ok());
  for (float v : s) {
    int e = 0;
    EXPECT_EQ(std::frexp(v, &e), 0.5f) << v;
  }
  const float m = s[BlockLayout::Vec128Index(1, 0, 2)];
  EXPECT_LE(0.37f * 5 / m, 57344.0f);
  EXPECT_GT(0.37f * 5 / m, 57344.0f / 2);
}

TEST(BlockQuantize, GemmMatchesTheDequantizedProductForEveryAllowedPairing) {
  const int64_t M = 68, N = 136, K = 300;  // partial blocks along M, N and K
  const auto xa = Random(M * K, 3), xb = Random(N * K, 4);
  for (const auto& [a_blk, b_blk] : {std::pair{false, false}, {false, true}, {true, false}}) {
    std::vector<uint8_t> qa(xa.size()), qb(xb.size());
    std::vector<float> sa(a_blk ? BlockLayout::Blk128ScaleCount(M, K) : BlockLayout::Vec128ScaleCount(M, K));
    std::vector<float> sb(b_blk ? BlockLayout::Blk128ScaleCount(N, K) : BlockLayout::Vec128ScaleCount(N, K));
    ASSERT_TRUE((a_blk ? cpu::QuantizeBlk128(xa.data(), M, K, Fp8Format::kE4M3, false, qa.data(), sa.data())
                       : cpu::QuantizeVec128(xa.data(), M, K, Fp8Format::kE4M3, false, qa.data(), sa.data())).ok());
    ASSERT_TRUE((b_blk ? cpu::QuantizeBlk128(xb.data(), N, K, Fp8Format::kE5M2, false, qb.data(), sb.data())
                       : cpu::QuantizeVec128(xb.data(), N, K, Fp8Format::kE5M2, false, qb.data(), sb.data())).ok());
    const BlockFp8Operand a{qa.data(), sa.data(), M, K, Fp8Format::kE4M3, a_blk};
    const BlockFp8Operand b{qb.data(), sb.data(), N, K, Fp8Format::kE5M2, b_blk};
    std::vector<float> d(M * N), da(xa.size()), db(xb.size());
    ASSERT_TRUE(cpu::GemmBlockScaled(a, b, d.data()).ok());
    ASSERT_TRUE(cpu::DequantizeBlock(a, da.data()).ok());
    ASSERT_TRUE(cpu::DequantizeBlock(b, db.data()).ok());
    double err = 0, ref = 0, raw = 0;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double want = 0, exact = 0;
        for (int64_t k = 0; k < K; ++k) {
          want += double{da[m * K + k]} * db[n * K + k];
          exact += double{xa[m * K + k]} * xb[n * K + k];
        }
        err += (d[m * N + n] - want) * (d[m * N + n] - want), ref += want * want;
        raw += (want - exact) * (want - exact);
      }
    }
    // FP32 sums of exact FP8 products: within FP32 rounding of the dequantized product; and the
    // quantization itself within a few percent of the unquantized one (E5M2 has 2 mantissa bits).
    EXPECT_LT(std::sqrt(err / ref), 1e-6) << a_blk << b_blk;
    EXPECT_LT(std::sqrt(raw / ref), 0.1) << a_blk << b_blk;
  }
  const BlockFp8Operand both{nullptr, nullptr, 4, 4, Fp8Format::kE4M3, true};
  float d = 0;
  const Status s = cpu::GemmBlockScaled(both, both, &d);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("both operands 128x128"), std::string::npos) << s.message();
}

// A block-scaled operand of `rows` x `cols` quantized from Random(seed): codes, scales, operand.
struct Quantized {
  std::vector<uint8_t> q;
  std::vector<float> s;
  BlockFp8Operand op;
};
Quantized QuantizeOperand(int64_t rows, int64_t cols, bool blk, Fp8Format f, uint32_t seed) {
  Quantized r;
  const auto x = Random(rows * cols, seed);
  r.q.resize(x.size());
  r.s.resize(blk ? BlockLayout::Blk128ScaleCount(rows, cols)
                 : BlockLayout::Vec128ScaleCount(rows, cols));
  const Status st = blk ? cpu::QuantizeBlk128(x.data(), rows, cols, f, false, r.q.data(), r.s.data())
                        : cpu::QuantizeVec128(x.data(), rows, cols, f, false, r.q.data(), r.s.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  r.op = {r.q.data(), r.s.data(), rows, cols, f, blk};
  return r;
}

// The GemmArgs GemmRunner takes for block scaling (GemmScaleMode) mean what GemmBlockScaled
// computes: cpu::Gemm on them (each code times its block's scale, double sums) agrees with it to
// FP32 summation order, for every allowed pairing, on shapes whose K blocks need the scale grid's
// padding to 4 (K = 336: 3 blocks; 640: 5) and M, N that are not multiples of 128.
TEST(BlockQuantize, GemmArgsForTheRunnerComputeTheBlockScaledGemm) {
  const int64_t shapes[][3] = {{16, 16, 16}, {80, 144, 336}, {48, 272, 640}};
  for (const auto& sh : shapes) {
    const int64_t M = sh[0], N = sh[1], K = sh[2];
    for (const auto& [a_blk, b_blk] : {std::pair{false, false}, {false, true}, {true, false}}) {
      SCOPED_TRACE(::testing::Message() << M << "x" << N << "x" << K << " " << a_blk << b_blk);
      const Quantized a = QuantizeOperand(M, K, a_blk, Fp8Format::kE4M3, 5);
      const Quantized b = QuantizeOperand(N, K, b_blk, Fp8Format::kE5M2, 6);
      std::vector<float> want(M * N), got(M * N);
      ASSERT_TRUE(cpu::GemmBlockScaled(a.op, b.op, want.data()).ok());
      auto g = BlockScaledGemm(a.op, b.op, got.data(), DType::kFloat32);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      EXPECT_EQ(g->a.scale_mode, a_blk ? GemmScaleMode::kBlk128 : GemmScaleMode::kVec128);
      ASSERT_TRUE(cpu::Gemm(*g).ok());
      double err = 0, ref = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        err += double(got[i] - want[i]) * (got[i] - want[i]), ref += double(want[i]) * want[i];
      }
      EXPECT_LT(std::sqrt(err / ref), 1e-6);
    }
  }
}

TEST(BlockQuantize, BlockScaledGemmArgsBreakingCublasltsRulesAreRefused) {
  const Quantized a = QuantizeOperand(32, 256, true, Fp8Format::kE4M3, 7);
  const Quantized b = QuantizeOperand(48, 256, true, Fp8Format::kE4M3, 8);
  const Quantized v = QuantizeOperand(48, 256, false, Fp8Format::kE4M3, 9);
  std::vector<float> d(32 * 48);
  auto expect = [](const Result<GemmArgs>& r, const char* what) {
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  expect(BlockScaledGemm(a.op, b.op, d.data(), DType::kFloat32), "no 128x128 x 128x128");
  expect(BlockScaledGemm(a.op, v.op, d.data(), DType::kE4M3), "allowed: fp32, bf16");
  const Quantized odd = QuantizeOperand(40, 256, false, Fp8Format::kE4M3, 10);  // N = 40
  expect(BlockScaledGemm(a.op, odd.op, d.data(), DType::kFloat32), "N=40");
  GemmArgs g = *BlockScaledGemm(a.op, v.op, d.data(), DType::kFloat32);
  g.fast_accum = true;
  EXPECT_NE(ValidateGemm(g).message().find("fast_accum"), std::string::npos);
  g.fast_accum = false, g.b.scale_mode = GemmScaleMode::kTensor;
  EXPECT_NE(ValidateGemm(g).message().find("both operands block-scaled"), std::string::npos);
  g.b.scale_mode = GemmScaleMode::kVec128, g.epilogue = Epilogue::kGelu;
  EXPECT_NE(ValidateGemm(g).message().find("allowed: none, bias"), std::string::npos);
  g.epilogue = Epilogue::kNone, g.batch = 2;
  EXPECT_NE(ValidateGemm(g).message().find("batch=2"), std::string::npos);
  g.batch = 1;
  EXPECT_TRUE(ValidateGemm(g).ok());
}

TEST(BlockQuantize, BadArgumentsAreRefusedNamingThem) {
  std::vector<float> x(16);
  std::vector<uint8_t> q(16);
  std::vector<float> s(16);
  auto r = cpu::QuantizeVec128(x.data(), -1, 4, Fp8Format::kE4M3, false, q.data(), s.data());
  EXPECT_NE(r.message().find("rows=-1"), std::string::npos) << r.message();
  r = cpu::QuantizeVec128<float>(nullptr, 4, 4, Fp8Format::kE4M3, false, q.data(), s.data());
  EXPECT_NE(r.message().find("non-null"), std::string::npos) << r.message();
  r = cpu::QuantizeBlk128(x.data(), 4, 4, Fp8Format::kE4M3, false, q.data(), s.data(), q.data(),
                          nullptr);
  EXPECT_NE(r.message().find("data_t and scale_inv_t"), std::string::npos) << r.message();
  const BlockFp8Operand a{q.data(), s.data(), 4, 4, Fp8Format::kE4M3, false};
  const BlockFp8Operand b{q.data(), s.data(), 4, 3, Fp8Format::kE4M3, false};
  float d[16];
  r = cpu::GemmBlockScaled(a, b, d);
  EXPECT_NE(r.message().find("K differs"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace fp8rt

// The scale formula's edge cases, config validation, the state layout, and the reference
// delayed-scaling update over many steps (both amax algorithms, ring wrap-around).
#include "kernels/scaling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <vector>

namespace fp8rt {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(ComputeScale, FromAmaxAndMargin) {
  EXPECT_EQ(ComputeScale(2.f, 1.f, 448.f, 0), 224.f);
  EXPECT_EQ(ComputeScale(2.f, 1.f, 448.f, 1), 112.f);
  EXPECT_EQ(ComputeScale(2.f, 1.f, 448.f, 3), 28.f);
  EXPECT_EQ(ComputeScale(57344.f, 9.f, 57344.f, 0), 1.f);
  EXPECT_EQ(ComputeScale(3.f, 1.f, 448.f, 0), 448.f / 3.f);
  EXPECT_EQ(ComputeScale(1.f, 1.f, 448.f, 32), 448.f / 4294967296.f);
}

TEST(ComputeScale, ZeroInfNanOrNegativeAmaxKeepTheOldScale) {
  EXPECT_EQ(ComputeScale(0.f, 7.f, 448.f, 0), 7.f);
  EXPECT_EQ(ComputeScale(-0.f, 7.f, 448.f, 0), 7.f);
  EXPECT_EQ(ComputeScale(INFINITY, 7.f, 448.f, 0), 7.f);
  EXPECT_EQ(ComputeScale(kNaN, 7.f, 448.f, 0), 7.f);
  EXPECT_EQ(ComputeScale(-3.f, 7.f, 448.f, 0), 7.f);
  EXPECT_EQ(ComputeScale(FLT_MAX, 7.f, 448.f, 0), 448.f / FLT_MAX);  // finite: used
}

TEST(ComputeScale, OverflowBecomesFltMax) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(ComputeScale(tiny, 1.f, 448.f, 0), FLT_MAX);
  EXPECT_EQ(ComputeScale(1e-38f, 1.f, 57344.f, 4), FLT_MAX);  // inf / 16 is still inf
  // Just below overflow stays finite and exact.
  EXPECT_EQ(ComputeScale(448.f / FLT_MAX, 1.f, 448.f, 0), 448.f / (448.f / FLT_MAX));
  EXPECT_TRUE(std::isfinite(ScaleInv(FLT_MAX)));
  EXPECT_GT(ScaleInv(FLT_MAX), 0.f);
}

TEST(ComputeScale, ScaleInvIsTheRoundedReciprocal) {
  EXPECT_EQ(ScaleInv(4.f), 0.25f);
  EXPECT_EQ(ScaleInv(3.f), 1.f / 3.f);
}

TEST(DelayedScalingConfig, DefaultsAreValid) {
  DelayedScalingConfig c;
  EXPECT_EQ(c.history_len, 1024);
  EXPECT_EQ(c.algo, AmaxAlgo::kMax);
  EXPECT_EQ(c.margin, 0);
  EXPECT_EQ(c.recipe, Fp8Recipe::kHybrid);
  EXPECT_TRUE(c.Validate().ok());
}

TEST(DelayedScalingConfig, ValidationNamesFieldValueAndRange) {
  struct Case {
    int history_len, margin;
    const char* field;
    const char* range;
  };
  for (const Case& k :
       {Case{0, 0, "history_len=0", "1..1024"}, Case{1025, 0, "history_len=1025", "1..1024"},
        Case{16, -1, "margin=-1", "0..32"}, Case{16, 33, "margin=33", "0..32"}}) {
    DelayedScalingConfig c;
    c.history_len = k.history_len;
    c.margin = k.margin;
    const Status s = c.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(k.field), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(k.range), std::string::npos) << s.message();
  }
  DelayedScalingConfig edge;
  edge.history_len = 1;
  edge.margin = 32;
  EXPECT_TRUE(edge.Validate().ok());
}

TEST(Fp8Recipe, FormatsPerRole) {
  EXPECT_EQ(FormatFor(Fp8Recipe::kHybrid, false), Fp8Format::kE4M3);
  EXPECT_EQ(FormatFor(Fp8Recipe::kHybrid, true), Fp8Format::kE5M2);
  EXPECT_EQ(FormatFor(Fp8Recipe::kE4M3, true), Fp8Format::kE4M3);
}

TEST(ScalingStateLayout, ArraysAreAlignedAndDisjoint) {
  const ScalingStateLayout l = ScalingStateLayout::For(7, 3);
  const size_t starts[] = {l.amax, l.amax_history, l.scale, l.scale_inv, l.formats, l.pos};
  const size_t sizes[] = {7 * 4, 21 * 4, 7 * 4, 7 * 4, 7, 4};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(starts[i] % 16, 0u) << i;
    const size_t end = starts[i] + sizes[i];
    EXPECT_LE(end, i + 1 < 6 ? starts[i + 1] : l.total_bytes) << i;
  }
  std::vector<char> buf(l.total_bytes + 16);
  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(buf.data()) + 15) & ~15ull);
  const ScalingState s = l.Bind(base);
  EXPECT_EQ(s.num_tensors, 7);
  EXPECT_EQ(s.history_len, 3);
  EXPECT_EQ(reinterpret_cast<char*>(s.amax_history), base + l.amax_history);
  EXPECT_EQ(reinterpret_cast<char*>(s.pos), base + l.pos);
}

// A host ScalingState over owned vectors.
struct HostState {
  std::vector<float> amax, history, scale, scale_inv;
  std::vector<uint8_t> formats;
  int pos = -7;
  ScalingState s;

  HostState(int n, int h, std::vector<Fp8Format> f)
      : amax(n, -1), history(n * h, -1), scale(n, -1), scale_inv(n, -1), formats(n) {
    for (int i = 0; i < n; ++i) formats[i] = static_cast<uint8_t>(f[i % f.size()]);
    s.num_tensors = n;
    s.history_len = h;
    s.amax = amax.data();
    s.amax_history = history.data();
    s.scale = scale.data();
    s.scale_inv = scale_inv.data();
    s.formats = formats.data();
    s.pos = &pos;
    EXPECT_TRUE(cpu::InitScalingState(s).ok());
  }
};

DelayedScalingConfig Config(int h, AmaxAlgo algo, int margin = 0) {
  DelayedScalingConfig c;
  c.history_len = h;
  c.algo = algo;
  c.margin = margin;
  return c;
}

// With a scale_inv stride (the model uses 16), the update writes scale_inv[i * stride] only.
TEST(DelayedScaling, StridedScaleInvLeavesTheGapsAlone) {
  const ScalingStateLayout l = ScalingStateLayout::For(3, 2, 16);
  EXPECT_GE(l.formats - l.scale_inv, 3u * 16 * sizeof(float));
  std::vector<float> blob((l.total_bytes + 3) / 4, -5.f);
  ScalingState s = l.Bind(blob.data());
  EXPECT_EQ(s.scale_inv_stride, 16);
  for (int i = 0; i < 3; ++i) reinterpret_cast<uint8_t*>(blob.data())[l.formats + i] = 0;
  ASSERT_TRUE(cpu::InitScalingState(s).ok());
  s.amax[0] = 2.f, s.amax[1] = 0.f, s.amax[2] = 448.f;
  DelayedScalingConfig c;
  c.history_len = 2;
  ASSERT_TRUE(cpu::UpdateDelayedScaling(s, c).ok());
  EXPECT_EQ(s.scale_inv[0], 1.f / 224.f);
  EXPECT_EQ(s.scale_inv[16], 1.f);  // amax 0: the old scale stays
  EXPECT_EQ(s.scale_inv[32], 1.f);
  for (int k = 1; k < 16; ++k) EXPECT_EQ(s.scale_inv[k], -5.f) << k;
  s.scale_inv_stride = 0;
  EXPECT_FALSE(cpu::UpdateDelayedScaling(s, c).ok());
}

TEST(DelayedScaling, InitGivesAFreshState) {
  HostState st(3, 4, {Fp8Format::kE4M3});
  EXPECT_EQ(st.pos, 0);
  EXPECT_EQ(st.history, std::vector<float>(12, 0.f));
  EXPECT_EQ(st.amax, std::vector<float>(3, 0.f));
  EXPECT_EQ(st.scale, std::vector<float>(3, 1.f));
  EXPECT_EQ(st.scale_inv, std::vector<float>(3, 1.f));
}

// Hand-worked: H = 3, kMax, amaxes 2, 1, 4, 1, 1, 1 for an E4M3 tensor. Windows: {2}, {2,1},
// {2,1,4}, {1,1,4} (2 overwritten), {1,1,4}, {1,1,1} (4 overwritten): scales 224, 224, 112, 112,
// 112, 448. The E5M2 tensor gets amax 2x, so 57344/4 = 14336 first.
TEST(DelayedScaling, MaxAlgoWrapsTheRingHandChecked) {
  HostState st(2, 3, {Fp8Format::kE4M3, Fp8Format::kE5M2});
  const float amaxes[] = {2, 1, 4, 1, 1, 1};
  const float want[] = {224, 224, 112, 112, 112, 448};
  const int want_pos[] = {1, 2, 0, 1, 2, 0};
  for (int step = 0; step < 6; ++step) {
    st.amax = {amaxes[step], 2 * amaxes[step]};
    ASSERT_TRUE(cpu::UpdateDelayedScaling(st.s, Config(3, AmaxAlgo::kMax)).ok());
    EXPECT_EQ(st.scale[0], want[step]) << "step " << step;
    EXPECT_EQ(st.scale[1], 64.f * want[step]) << "step " << step;  // 57344 / (2 * 448 / want)
    EXPECT_EQ(st.scale_inv[0], 1.f / want[step]);
    EXPECT_EQ(st.amax, std::vector<float>(2, 0.f)) << "amax is zeroed by the update";
    EXPECT_EQ(st.pos, want_pos[step]);
    // This step's amax sits in the row before the new position.
    const int row = (want_pos[step] + 2) % 3;
    EXPECT_EQ(st.history[row * 2 + 0], amaxes[step]);
    EXPECT_EQ(st.history[row * 2 + 1], 2 * amaxes[step]);
  }
}

TEST(DelayedScaling, MostRecentUsesOnlyThisStep) {
  HostState st(1, 3, {Fp8Format::kE4M3});
  const float amaxes[] = {2, 1, 4, 0, 7};
  const float want[] = {224, 448, 112, 112, 64};  // amax 0 keeps 112
  for (int step = 0; step < 5; ++step) {
    st.amax[0] = amaxes[step];
    ASSERT_TRUE(cpu::UpdateDelayedScaling(st.s, Config(3, AmaxAlgo::kMostRecent)).ok());
    EXPECT_EQ(st.scale[0], want[step]) << "step " << step;
  }
}

TEST(DelayedScaling, MarginDividesByAPowerOfTwo) {
  HostState st(1, 2, {Fp8Format::kE4M3});
  st.amax[0] = 2;
  ASSERT_TRUE(cpu::UpdateDelayedScaling(st.s, Config(2, AmaxAlgo::kMax, 2)).ok());
  EXPECT_EQ(st.scale[0], 56.f);  // 448 / 2 / 4
  EXPECT_EQ(st.scale_inv[0], 1.f / 56.f);
}

TEST(DelayedScaling, ZeroInfAndNanAmaxes) {
  HostState st(1, 4, {Fp8Format::kE4M3});
  auto step = [&](float a, AmaxAlgo algo) {
    st.amax[0] = a;
    EXPECT_TRUE(cpu::UpdateDelayedScaling(st.s, Config(4, algo)).ok());
    return st.scale[0];
  };
  EXPECT_EQ(step(0.f, AmaxAlgo::kMax), 1.f);          // fresh state, all zero: keep 1
  EXPECT_EQ(step(kNaN, AmaxAlgo::kMostRecent), 1.f);  // NaN: keep
  EXPECT_EQ(step(4.f, AmaxAlgo::kMax), 112.f);        // NaN in the window is ignored by kMax
  EXPECT_TRUE(std::isnan(st.history[1]));
  EXPECT_EQ(step(INFINITY, AmaxAlgo::kMax), 112.f);  // inf dominates the window: keep
  EXPECT_EQ(step(1.f, AmaxAlgo::kMax), 112.f);       // window {1, NaN, 4, inf}: still inf
  EXPECT_EQ(step(1.f, AmaxAlgo::kMax), 112.f);       // {1, 1, 4, inf}
  EXPECT_EQ(step(1.f, AmaxAlgo::kMax), 112.f);       // {1, 1, 1, inf}
  EXPECT_EQ(step(1.f, AmaxAlgo::kMax), 448.f);       // {1, 1, 1, 1}: inf has left the window
}

// Independent model: a deque holding the last H amaxes.
void CheckAgainstModel(int h, AmaxAlgo algo, int steps) {
  const int n = 5;
  HostState st(n, h, {Fp8Format::kE4M3, Fp8Format::kE5M2});
  std::vector<std::deque<float>> window(n);
  std::vector<float> scale(n, 1.f);
  uint64_t x = 12345;
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < n; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      // Mostly small amaxes, a rare large one that must dominate kMax for exactly H steps.
      const float a = (x >> 60) == 0 ? 1000.f : 1.f + static_cast<float>((x >> 40) % 1000) / 100;
      st.amax[i] = a;
      window[i].push_back(a);
      if (static_cast<int>(window[i].size()) > h) window[i].pop_front();
      const float used =
          algo == AmaxAlgo::kMax ? *std::max_element(window[i].begin(), window[i].end()) : a;
      const float fmax = i % 2 == 0 ? 448.f : 57344.f;
      scale[i] = fmax / used;
    }
    ASSERT_TRUE(cpu::UpdateDelayedScaling(st.s, Config(h, algo)).ok());
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(st.scale[i], scale[i]) << "H=" << h << " step " << step << " tensor " << i;
    }
    ASSERT_EQ(st.pos, (step + 1) % h);
  }
}

TEST(DelayedScaling, MatchesAWindowModelHistory1) { CheckAgainstModel(1, AmaxAlgo::kMax, 20); }
TEST(DelayedScaling, MatchesAWindowModelHistory3) { CheckAgainstModel(3, AmaxAlgo::kMax, 40); }
TEST(DelayedScaling, MatchesAWindowModelHistory1024) {
  CheckAgainstModel(1024, AmaxAlgo::kMax, 2100);
}
TEST(DelayedScaling, MatchesAWindowModelMostRecent) {
  CheckAgainstModel(16, AmaxAlgo::kMostRecent, 40);
}

TEST(DelayedScaling, LargeAmaxLeavesA1024WindowAfterExactly1024Steps) {
  HostState st(1, 1024, {Fp8Format::kE4M3});
  st.amax[0] = 448.f;  // step 0
  ASSERT_TRUE(cpu::UpdateDelayedScaling(st.s, Config(1024, AmaxAlgo::kMax)).ok());
  EXPECT_EQ(st.scale[0], 1.f);
  for (int step = 1; step < 1024; ++step) {
    st.amax[0] = 2.f;
    ASSERT_TRUE(cpu::UpdateDelayedScaling(st.s, Config(1024, AmaxAlgo::kMax)).ok());
    ASSERT_EQ(st.scale[0], 1.f) << step;
  }
  EXPECT_EQ(st.pos, 0);
  st.amax[0] = 2.f;  // step 1024 overwrites step 0's 448
  ASSERT_TRUE(cpu::UpdateDelayedScaling(st.s, Config(1024, AmaxAlgo::kMax)).ok());
  EXPECT_EQ(st.scale[0], 224.f);
}

// A NaN amax must win a MAX reduction across ranks on every backend: it becomes +Inf, which
// ComputeScale treats like NaN (the old scale is kept); everything else is untouched, bit for bit.
TEST(DelayedScaling, AmaxNanToInfMapsOnlyNaNs) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> a = {std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::signaling_NaN(),
                          0.0f, -0.0f, 1.5f, -2.0f, inf, -inf,
                          std::numeric_limits<float>::denorm_min(), 448.0f};
  const std::vector<float> before = a;
  ASSERT_TRUE(cpu::AmaxNanToInf(a.data(), static_cast<int64_t>(a.size())).ok());
  EXPECT_EQ(a[0], inf);
  EXPECT_EQ(a[1], inf);
  EXPECT_EQ(a[2], inf);
  for (size_t i = 3; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a[i], &before[i], 4), 0) << i;
  }
  EXPECT_EQ(ComputeScale(inf, 3.0f, 448.0f, 0), 3.0f);  // the old scale is kept
  EXPECT_FALSE(cpu::AmaxNanToInf(nullptr, 2).ok());
  EXPECT_TRUE(cpu::AmaxNanToInf(nullptr, 0).ok());
}

TEST(DelayedScaling, RejectsMismatchedOrBrokenState) {
  HostState st(2, 4, {Fp8Format::kE4M3});
  Status s = cpu::UpdateDelayedScaling(st.s, Config(8, AmaxAlgo::kMax));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("history_len=4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("history_len=8"), std::string::npos) << s.message();

  st.pos = 4;
  s = cpu::UpdateDelayedScaling(st.s, Config(4, AmaxAlgo::kMax));
  EXPECT_NE(s.message().find("pos=4"), std::string::npos) << s.message();
  st.pos = 0;

  ScalingState bad = st.s;
  bad.scale = nullptr;
  s = cpu::UpdateDelayedScaling(bad, Config(4, AmaxAlgo::kMax));
  EXPECT_NE(s.message().find("scale"), std::string::npos) << s.message();

  bad = st.s;
  bad.history_len = 0;
  s = cpu::InitScalingState(bad);
  EXPECT_NE(s.message().find("history_len=0"), std::string::npos) << s.message();

  DelayedScalingConfig c = Config(4, AmaxAlgo::kMax);
  c.margin = 40;
  s = cpu::UpdateDelayedScaling(st.s, c);
  EXPECT_NE(s.message().find("margin=40"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fp8rt

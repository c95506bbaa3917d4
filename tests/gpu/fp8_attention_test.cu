// cuDNN FP8 attention (kernels/cudnn_fp8_attention.h) against the CPU reference that emulates its
// quantization points (kernels/fp8_attention.h): output, log-sum-exp, dQ/dK/dV and every amax, on
// head sizes 64 and 128, GQA ratios 1, 4 and 8, T not a multiple of 64 or 128; the backward's
// bits repeat; NaN in an input reaches the amaxes as in the linear layers' casts; clear refusals.
// Skips, saying why, where there is no GPU, no cuDNN 9.1+ or no Hopper.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cudnn_fp8_attention.h"
#include "kernels/fp8_attention.h"
#include "tests/common/gpu_util.h"
#include "tests/common/test_util.h"

namespace fp8rt {
namespace {

using test::DeviceBuffer;

// The scales of one call, on the host (reference) and on the device in 16-byte slots.
enum Slot {
  kDescaleQkv, kScaleS, kDescaleS, kScaleO, kDescaleO, kDescaleDo, kScaleDp, kDescaleDp,
  kScaleDqkv, kAmaxS, kAmaxO, kAmaxDp, kAmaxDq, kAmaxDk, kAmaxDv, kSlots
};
struct Scales {
  std::vector<float> host = std::vector<float>(kSlots * 4, 0.0f);
  float& operator[](int s) { return host[s * 4]; }
  // The slots 16 bytes apart (stride 4 floats), or packed one float apart.
  static Fp8AttentionScales View(float* base, int stride = 4) {
    auto at = [&](int s) { return base + s * stride; };
    Fp8AttentionScales sc;
    sc.descale_q = sc.descale_k = sc.descale_v = at(kDescaleQkv);
    sc.scale_s = at(kScaleS), sc.descale_s = at(kDescaleS);
    sc.scale_o = at(kScaleO), sc.descale_o = at(kDescaleO), sc.descale_do = at(kDescaleDo);
    sc.scale_dp = at(kScaleDp), sc.descale_dp = at(kDescaleDp);
    sc.scale_dq = sc.scale_dk = sc.scale_dv = at(kScaleDqkv);
    sc.amax_s = at(kAmaxS), sc.amax_o = at(kAmaxO), sc.amax_dp = at(kAmaxDp);
    sc.amax_dq = at(kAmaxDq), sc.amax_dk = at(kAmaxDk), sc.amax_dv = at(kAmaxDv);
    return sc;
  }
  static Fp8AttentionScales Packed(float* base) { return View(base, 1); }
};

struct Case {
  Fp8AttentionShape s;
  const char* name;
};
const Case kCases[] = {
    {{2, 128, 4, 4, 128}, "B2_T128_NH4_HS128"},
    {{1, 256, 8, 2, 128}, "B1_T256_NH8_KV2_HS128"},
    {{1, 384, 8, 1, 128}, "B1_T384_NH8_KV1_HS128"},
    {{2, 192, 2, 2, 128}, "B2_T192_NH2_HS128"},
    {{1, 100, 2, 2, 128}, "B1_T100_NH2_HS128"},
    {{2, 256, 8, 2, 64}, "B2_T256_NH8_KV2_HS64"},
    {{1, 130, 4, 1, 64}, "B1_T130_NH4_KV1_HS64"},
    {{1, 1024, 2, 2, 128}, "B1_T1024_NH2_HS128"},
    {{1, 2048, 2, 1, 128}, "B1_T2048_NH2_KV1_HS128"},
};

constexpr float kE4M3Max = 448.0f, kE5M2Max = 57344.0f;

// Random FP8 inputs: qkv ~ N(0, 1) in E4M3 at scale 64, dout ~ N(0, 0.02) in E5M2 at 2^12.
struct Inputs {
  std::vector<uint8_t> qkv, dout;
  Scales sc;
};
Inputs MakeInputs(const Fp8AttentionShape& s) {
  Inputs in;
  const std::vector<float> q = test::RandomNormal(s.B * s.T * s.QkvWidth(), 71);
  const std::vector<float> d = test::RandomNormal(s.B * s.T * s.C(), 72, 0.f, 0.02f);
  in.qkv.resize(q.size()), in.dout.resize(d.size());
  for (size_t i = 0; i < q.size(); ++i) in.qkv[i] = Fp8Encode(q[i] * 64.0f, Fp8Format::kE4M3);
  for (size_t i = 0; i < d.size(); ++i) in.dout[i] = Fp8Encode(d[i] * 4096.0f, Fp8Format::kE5M2);
  Scales& sc = in.sc;
  sc[kDescaleQkv] = 1.0f / 64, sc[kDescaleDo] = 1.0f / 4096;
  sc[kScaleS] = kE4M3Max, sc[kDescaleS] = 1.0f / kE4M3Max;
  sc[kScaleO] = sc[kScaleDp] = sc[kScaleDqkv] = 1.0f;
  return in;
}

struct Outputs {
  std::vector<uint8_t> out, dqkv;
  std::vector<float> stats;
  Scales sc;
};
void Reference(const Fp8AttentionShape& s, const Inputs& in, Scales sc, bool backward,
               Outputs* r) {
  r->out.assign(s.B * s.T * s.C(), 0), r->stats.assign(s.B * s.NH * s.T, 0);
  r->dqkv.assign(s.B * s.T * s.QkvWidth(), 0);
  const Fp8AttentionScales v = Scales::View(sc.host.data());
  ASSERT_TRUE(cpu::Fp8AttentionForward(r->out.data(), r->stats.data(), in.qkv.data(), s, v).ok());
  if (backward) {
    ASSERT_TRUE(cpu::Fp8AttentionBackward(r->dqkv.data(), in.dout.data(), in.qkv.data(),
                                          r->out.data(), r->stats.data(), s, v)
                    .ok());
  }
  r->sc = sc;
}

// Delayed scaling calibrated on a first reference pass: each output scale from its amax.
Scales Calibrated(const Fp8AttentionShape& s, const Inputs& in, bool backward) {
  Outputs first;
  Reference(s, in, in.sc, backward, &first);
  Scales sc = in.sc;
  sc[kScaleO] = kE4M3Max / first.sc[kAmaxO], sc[kDescaleO] = 1.0f / sc[kScaleO];
  if (backward) {
    sc[kScaleDp] = kE5M2Max / first.sc[kAmaxDp], sc[kDescaleDp] = 1.0f / sc[kScaleDp];
    const float g = std::fmax(first.sc[kAmaxDq], std::fmax(first.sc[kAmaxDk], first.sc[kAmaxDv]));
    sc[kScaleDqkv] = kE5M2Max / g;
  }
  return sc;
}

std::vector<float> Decode(const std::vector<uint8_t>& codes, Fp8Format f, float descale) {
  std::vector<float> out(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) out[i] = Fp8Decode(codes[i], f) * descale;
  return out;
}

// The part of packed (B, T, W) rows from column c0, `cols` wide.
std::vector<float> Columns(const std::vector<float>& x, int64_t W, int64_t c0, int64_t cols) {
  std::vector<float> out;
  for (size_t r = 0; r < x.size() / W; ++r) {
    out.insert(out.end(), x.begin() + r * W + c0, x.begin() + r * W + c0 + cols);
  }
  return out;
}

std::string Skip(std::unique_ptr<cuda::CudnnFp8Attention>* att) {
  if (test::ComputeCapability() < 90) return "cuDNN's FP8 attention needs sm_90 or newer";
  auto created = cuda::CudnnFp8Attention::Create();
  if (!created.ok()) return "cuDNN FP8 attention unavailable: " + created.status().ToString();
  *att = std::move(created).value();
  return "";
}

class Fp8AttentionGpu : public test::GpuTest, public ::testing::WithParamInterface<Case> {};

TEST_P(Fp8AttentionGpu, MatchesTheEmulatingReference) {
  const Fp8AttentionShape s = GetParam().s;
  std::unique_ptr<cuda::CudnnFp8Attention> att;
  if (const std::string why = Skip(&att); !why.empty()) GTEST_SKIP() << why;
  const Status both = att->Prepare(s);
  const bool backward = both.ok();
  if (!backward) {
    // Hopper's FP8 backward takes head size 128 only: refused, naming it; the forward alone runs.
    ASSERT_NE(s.HS, 128) << both.ToString();
    EXPECT_NE(both.message().find("head size 128"), std::string::npos) << both.ToString();
    const Status fwd = att->Prepare(s, /*forward_only=*/true);
    ASSERT_TRUE(fwd.ok()) << fwd.ToString();
  }
  RecordProperty("cudnn", att->Version() + ": " + att->PlanSummary(s));
  std::cout << GetParam().name << ": " << att->PlanSummary(s) << "\n";
  const Inputs in = MakeInputs(s);
  Outputs ref;
  Reference(s, in, Calibrated(s, in, backward), backward, &ref);

  DeviceBuffer<uint8_t> qkv(in.qkv), dout(in.dout), out(ref.out.size()), dqkv(ref.dqkv.size());
  DeviceBuffer<float> stats(ref.stats.size());
  Scales sc = ref.sc;
  for (int a = kAmaxS; a <= kAmaxDv; ++a) sc[a] = 12345.0f;  // (overwritten, not max'ed into)
  DeviceBuffer<float> scales(sc.host);
  const Fp8AttentionScales dsc = Scales::View(scales.get());
  const size_t ws_bytes =
      std::max<size_t>({att->ForwardWorkspaceBytes(s), att->BackwardWorkspaceBytes(s), 16});
  DeviceBuffer<uint8_t> ws(ws_bytes);
  out.Poison(), stats.Poison(), dqkv.Poison();
  FP8RT_CHECK_OK(att->Forward(out.get(), stats.get(), qkv.get(), s, dsc, ws.get(), ws_bytes,
                              nullptr));
  if (backward) {
    FP8RT_CHECK_OK(att->Backward(dqkv.get(), dout.get(), qkv.get(), out.get(), stats.get(), s, dsc,
                                 ws.get(), ws_bytes, nullptr));
  }
  Scales got;
  got.host = scales.Download();
  const Fp8Format e4 = Fp8Format::kE4M3, e5 = Fp8Format::kE5M2;
  // cuDNN's fused kernel computes the graph flash-style: it quantizes exp(s - the running max of
  // its tile) before the division by the row sum, where the graph (and this reference) quantize
  // the normalized P. Its E4M3 roundings fall on other values, so out, the gradients (through
  // their descaled P and dS) and the amaxes differ from the emulation by about one independent
  // FP8 rounding (measured on H200, cuDNN 9.14: out 4.5-4.7%, dq 6.2-9.7% (T 100), dk 6.9-7.4%
  // relative L2; amaxes within 5%). The log-sum-exp has no FP8 step and agrees closely.
  test::Tolerance tol_o, tol_g, tol_stats;
  tol_o.rel_l2 = 0.06, tol_g.rel_l2 = 0.12, tol_stats.atol = 2e-3, tol_stats.rtol = 1e-3;
  EXPECT_TRUE(test::RelL2Close(Decode(out.Download(), e4, 1.0f / ref.sc[kScaleO]),
                               Decode(ref.out, e4, 1.0f / ref.sc[kScaleO]), tol_o, "out"));
  EXPECT_TRUE(test::AllClose(stats.Download(), ref.stats, tol_stats, "stats (log-sum-exp)"));
  auto near = [](float got, float want, const char* what) {
    EXPECT_NEAR(got, want, 0.06 * std::fabs(want)) << what;
  };
  near(got[kAmaxS], ref.sc[kAmaxS], "amax_s");
  near(got[kAmaxO], ref.sc[kAmaxO], "amax_o");
  if (!backward) return;
  const int64_t W = s.QkvWidth(), C = s.C(), KV = s.NKV * s.HS;
  const std::vector<float> g = Decode(dqkv.Download(), e5, 1.0f / ref.sc[kScaleDqkv]);
  const std::vector<float> w = Decode(ref.dqkv, e5, 1.0f / ref.sc[kScaleDqkv]);
  EXPECT_TRUE(test::RelL2Close(Columns(g, W, 0, C), Columns(w, W, 0, C), tol_g, "dq"));
  EXPECT_TRUE(test::RelL2Close(Columns(g, W, C, KV), Columns(w, W, C, KV), tol_g, "dk"));
  EXPECT_TRUE(test::RelL2Close(Columns(g, W, C + KV, KV), Columns(w, W, C + KV, KV), tol_g, "dv"));
  near(got[kAmaxDp], ref.sc[kAmaxDp], "amax_dp");
  near(got[kAmaxDq], ref.sc[kAmaxDq], "amax_dq");
  near(got[kAmaxDk], ref.sc[kAmaxDk], "amax_dk");
  near(got[kAmaxDv], ref.sc[kAmaxDv], "amax_dv");
  // The backward again: the same bits where Prepare's probe found its runs repeat.
  const std::vector<uint8_t> first = dqkv.Download();
  dqkv.Poison();
  FP8RT_CHECK_OK(att->Backward(dqkv.get(), dout.get(), qkv.get(), out.get(), stats.get(), s, dsc,
                               ws.get(), ws_bytes, nullptr));
  if (att->Repeats(s)) {
    EXPECT_TRUE(first == dqkv.Download()) << "the backward's dqkv differs between two runs";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8AttentionGpu, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

class Fp8AttentionGpuOnce : public test::GpuTest {};

// A NaN among the inputs: cuDNN's AMAX reductions skip NaN (fmax), so the amaxes stay finite,
// and the NaN shows in the outputs of the rows it reaches. (The model catches it earlier: the
// casts that make attention's FP8 inputs, Q/K/V and dO, keep NaN in their amaxes, which flags the
// step as a NaN weight or activation does.)
TEST_F(Fp8AttentionGpuOnce, NanInAnInputShowsInTheOutputsNotTheAmaxes) {
  std::unique_ptr<cuda::CudnnFp8Attention> att;
  if (const std::string why = Skip(&att); !why.empty()) GTEST_SKIP() << why;
  const Fp8AttentionShape s{1, 128, 2, 2, 128};
  ASSERT_TRUE(att->Prepare(s).ok());
  Inputs in = MakeInputs(s);
  in.qkv[5 * s.QkvWidth() + 3] = 0x7f;  // E4M3 NaN in head 0's query of row 5
  Scales sc = in.sc;
  sc[kScaleO] = 64, sc[kDescaleO] = 1.0f / 64;
  DeviceBuffer<uint8_t> qkv(in.qkv), out(s.B * s.T * s.C());
  DeviceBuffer<float> stats(s.B * s.NH * s.T), scales(sc.host);
  DeviceBuffer<uint8_t> ws(std::max<size_t>(att->ForwardWorkspaceBytes(s), 16));
  FP8RT_CHECK_OK(att->Forward(out.get(), stats.get(), qkv.get(), s, Scales::View(scales.get()),
                              ws.get(), ws.size(), nullptr));
  Scales got;
  got.host = scales.Download();
  const std::vector<float> st = stats.Download();
  const std::vector<uint8_t> o = out.Download();
  int nan_codes = 0;
  for (int64_t d = 0; d < s.HS; ++d) nan_codes += (o[5 * s.C() + d] & 0x7f) == 0x7f;
  std::cout << "NaN input: amax_s " << got[kAmaxS] << ", amax_o " << got[kAmaxO] << ", stats[5] "
            << st[5] << ", NaN codes in row 5 of head 0: " << nan_codes << "\n";
  EXPECT_TRUE(std::isnan(st[5]) || nan_codes > 0) << "the NaN vanished from the outputs";
  EXPECT_TRUE(std::isfinite(st[6]) && std::isfinite(st[s.T + 5])) << "it spread to other rows";
}

// Scales and amaxes straight from a packed float array (4-byte alignment declared to cuDNN), and
// amax outputs not zeroed first (set high beforehand): the same outputs and amaxes as the
// default (16-byte slots, zeroed), so the engines overwrite the amaxes and read unaligned scales.
TEST_F(Fp8AttentionGpuOnce, PackedScalesAndUnzeroedAmaxesGiveTheSameResults) {
  std::unique_ptr<cuda::CudnnFp8Attention> att;
  if (const std::string why = Skip(&att); !why.empty()) GTEST_SKIP() << why;
  auto packed_or = cuda::CudnnFp8Attention::Create(
      cuda::CudnnFp8AttentionOptions{.scalar_alignment = 4, .zero_amax = false});
  ASSERT_TRUE(packed_or.ok()) << packed_or.status().ToString();
  cuda::CudnnFp8Attention& packed = **packed_or;
  const Fp8AttentionShape s{2, 256, 4, 2, 128};
  ASSERT_TRUE(att->Prepare(s).ok());
  const Status prepared = packed.Prepare(s);
  ASSERT_TRUE(prepared.ok()) << prepared.ToString();
  std::cout << "packed scalars: " << packed.PlanSummary(s) << "\n";
  const Inputs in = MakeInputs(s);
  Scales sc = Calibrated(s, in, true);
  // The packed array: slot i at float 1 + i (4-byte aligned, never 16).
  std::vector<float> flat(kSlots + 1, 0.0f);
  for (int i = 0; i < kSlots; ++i) flat[1 + i] = sc[i];
  for (int a = kAmaxS; a <= kAmaxDv; ++a) flat[1 + a] = 1e30f;
  DeviceBuffer<float> slots(sc.host), packed_scales(flat);
  const Fp8AttentionScales psc = Scales::Packed(packed_scales.get() + 1);
  DeviceBuffer<uint8_t> qkv(in.qkv), dout(in.dout);
  DeviceBuffer<uint8_t> out_a(s.B * s.T * s.C()), out_b(s.B * s.T * s.C());
  DeviceBuffer<uint8_t> dqkv_a(in.qkv.size()), dqkv_b(in.qkv.size());
  DeviceBuffer<float> stats_a(s.B * s.NH * s.T), stats_b(s.B * s.NH * s.T);
  const size_t ws_bytes = std::max<size_t>(
      {att->BackwardWorkspaceBytes(s), packed.BackwardWorkspaceBytes(s),
       att->ForwardWorkspaceBytes(s), packed.ForwardWorkspaceBytes(s), 16});
  DeviceBuffer<uint8_t> ws(ws_bytes);
  const Fp8AttentionScales dsc = Scales::View(slots.get());
  FP8RT_CHECK_OK(att->Forward(out_a.get(), stats_a.get(), qkv.get(), s, dsc, ws.get(), ws_bytes,
                              nullptr));
  FP8RT_CHECK_OK(att->Backward(dqkv_a.get(), dout.get(), qkv.get(), out_a.get(), stats_a.get(), s,
                               dsc, ws.get(), ws_bytes, nullptr));
  FP8RT_CHECK_OK(packed.Forward(out_b.get(), stats_b.get(), qkv.get(), s, psc, ws.get(), ws_bytes,
                                nullptr));
  FP8RT_CHECK_OK(packed.Backward(dqkv_b.get(), dout.get(), qkv.get(), out_b.get(), stats_b.get(),
                                 s, psc, ws.get(), ws_bytes, nullptr));
  EXPECT_TRUE(out_a.Download() == out_b.Download());
  EXPECT_TRUE(dqkv_a.Download() == dqkv_b.Download());
  Scales a;
  a.host = slots.Download();
  const std::vector<float> b = packed_scales.Download();
  for (int i = kAmaxS; i <= kAmaxDv; ++i) EXPECT_EQ(a[i], b[1 + i]) << "amax slot " << i;
}

// At gpt-1.3b's shape: whether three runs of forward and backward give the same bits is what
// Prepare's probe reports (Repeats), with the scales and amaxes in 16-byte slots (what the model
// passes) and straight from a packed float array (4-byte alignment declared, amaxes not zeroed
// first). Measured on H200 with cuDNN 9.14: the forward's output varies in its last bits, either
// way, so training with FP8 attention there is not bit-reproducible.
TEST_F(Fp8AttentionGpuOnce, RepeatsBitForBitAtTheModelsShape) {
  std::unique_ptr<cuda::CudnnFp8Attention> att;
  if (const std::string why = Skip(&att); !why.empty()) GTEST_SKIP() << why;
  const Fp8AttentionShape s{4, 2048, 16, 16, 128};
  const Inputs in = MakeInputs(s);
  Scales sc = in.sc;
  sc[kScaleO] = 32, sc[kDescaleO] = 1.0f / 32, sc[kScaleDp] = 1e6f, sc[kDescaleDp] = 1e-6f;
  sc[kScaleDqkv] = 1e5f;
  for (const bool packed_scalars : {false, true}) {
    SCOPED_TRACE(packed_scalars ? "packed scalars" : "16-byte slots");
    cuda::CudnnFp8AttentionOptions o;
    if (packed_scalars) o.scalar_alignment = 4, o.zero_amax = false;
    auto a_or = cuda::CudnnFp8Attention::Create(o);
    ASSERT_TRUE(a_or.ok());
    cuda::CudnnFp8Attention& a = **a_or;
    ASSERT_TRUE(a.Prepare(s).ok());
    std::vector<float> flat(kSlots + 1, 0.0f);
    for (int i = 0; i < kSlots; ++i) flat[1 + i] = sc[i];
    DeviceBuffer<float> packed(flat), slots(sc.host);
    Fp8AttentionScales p = Scales::View(slots.get());
    if (packed_scalars) p = Scales::Packed(packed.get() + 1);
    DeviceBuffer<uint8_t> qkv(in.qkv), dout(in.dout), out(s.B * s.T * s.C()),
        dqkv(in.qkv.size());
    DeviceBuffer<float> stats(s.B * s.NH * s.T);
    const size_t ws_bytes =
        std::max<size_t>({a.ForwardWorkspaceBytes(s), a.BackwardWorkspaceBytes(s), 16});
    DeviceBuffer<uint8_t> ws(ws_bytes);
    std::vector<uint8_t> out0, dqkv0;
    std::vector<float> stats0;
    bool repeated = true;
    for (int run = 0; run < 3; ++run) {
      out.Poison(), stats.Poison(), dqkv.Poison();
      FP8RT_CHECK_OK(
          a.Forward(out.get(), stats.get(), qkv.get(), s, p, ws.get(), ws_bytes, nullptr));
      FP8RT_CHECK_OK(a.Backward(dqkv.get(), dout.get(), qkv.get(), out.get(), stats.get(), s, p,
                                ws.get(), ws_bytes, nullptr));
      if (run == 0) {
        out0 = out.Download(), stats0 = stats.Download(), dqkv0 = dqkv.Download();
        continue;
      }
      const std::vector<uint8_t> o = out.Download(), d = dqkv.Download();
      int64_t o_diff = 0, d_diff = 0, o_far = 0;
      for (size_t i = 0; i < o.size(); ++i) {
        o_diff += o[i] != out0[i];
        o_far += std::abs(static_cast<int>(o[i] & 0x7f) - static_cast<int>(out0[i] & 0x7f)) > 1 ||
                 (o[i] & 0x80) != (out0[i] & 0x80);
      }
      for (size_t i = 0; i < d.size(); ++i) d_diff += d[i] != dqkv0[i];
      std::cout << "run " << run << ": output codes differing " << o_diff << " of " << o.size()
                << " (more than one step apart: " << o_far << "), dqkv codes " << d_diff << "\n";
      repeated = repeated && o_diff == 0 && d_diff == 0 && stats0 == stats.Download();
    }
    // What Prepare measured is what the runs do (the model says it at start).
    std::cout << "repeats: " << repeated << ", " << a.PlanSummary(s) << "\n";
    EXPECT_EQ(repeated, a.Repeats(s)) << a.PlanSummary(s);
  }
}

TEST_F(Fp8AttentionGpuOnce, CallsBeforePrepareAndOddHeadSizesAreRefused) {
  std::unique_ptr<cuda::CudnnFp8Attention> att;
  if (const std::string why = Skip(&att); !why.empty()) GTEST_SKIP() << why;
  const Fp8AttentionShape s{1, 128, 2, 2, 128};
  Fp8AttentionScales none;
  const Status st = att->Forward(nullptr, nullptr, nullptr, s, none, nullptr, 0, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("Prepare"), std::string::npos);
  EXPECT_EQ(att->Prepare({1, 128, 2, 2, 72}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fp8rt

// model.arch: llama on the CPU: the layout and parameter count, gradients against finite
// differences, grouped-query attention against multi-head attention with repeated key/value
// weights, and the configuration's refusals. (Against transformers' LlamaForCausalLM:
// scripts/llama_check.py on the GPU node.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/rng.h"
#include "common/train_config.h"
#include "runtime/gpt.h"
#include "runtime/gpt_layout.h"
#include "runtime/trainer.h"
#include "tests/common/corpus.h"
#include "tests/common/temp_dir.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

using namespace gpt_detail;

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

ModelConfig TinyLlama(int kv_heads) {
  ModelConfig m;
  m.arch = Arch::kLlama;
  m.n_layer = 2, m.n_embd = 32, m.n_head = 4, m.n_kv_head = kv_heads, m.ffn_hidden = 48;
  m.block_size = 16, m.vocab_size = 200, m.rope_theta = 500.0f;
  return m;
}

ModelOptions Options(const ModelConfig& m, Precision p = Precision::kFp32) {
  ModelOptions o;
  o.model = m;
  o.precision = p;
  o.B = 2, o.T = 8;
  return o;
}

void Batch(std::vector<int32_t>* x, std::vector<int32_t>* y, int64_t n, int V) {
  x->resize(n), y->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    (*x)[i] = static_cast<int32_t>((i * 37 + 5) % V);
    (*y)[i] = static_cast<int32_t>((i * 91 + 11) % V);
  }
}

TEST(LlamaLayout, TensorsAndParameterCount) {
  const ModelConfig m = TinyLlama(2);
  const Layout L(m);
  const int64_t C = 32, HS = 8, Vp = 256, F = 48;
  EXPECT_EQ(L.size[kWte], Vp * C);
  EXPECT_EQ(L.size[kWpe], 0);
  EXPECT_EQ(L.size[kQkvW], 2 * (4 + 2 * 2) * HS * C);
  EXPECT_EQ(L.size[kAttProjW], 2 * C * C);
  EXPECT_EQ(L.size[kFcW], 2 * 2 * F * C);
  EXPECT_EQ(L.size[kFcProjW], 2 * C * F);
  EXPECT_EQ(L.size[kLmHeadW], Vp * C);
  for (int p : {kLn1B, kQkvB, kAttProjB, kLn2B, kFcB, kFcProjB, kLnfB}) EXPECT_EQ(L.size[p], 0);
  int64_t sum = 0;
  for (int p = 0; p < kNumParams; ++p) sum += L.size[p];
  EXPECT_EQ(sum, m.num_params());
  // The MFU formula's 6N leaves out llama's input embedding (a lookup), not its LM head.
  EXPECT_EQ(m.matmul_params(), sum - L.size[kWte]);
  // gpt2 has no separate LM head, and its layout is what it was before llama (offsets unchanged).
  ModelConfig g;
  const Layout G(g);
  EXPECT_EQ(G.size[kLmHeadW], 0);
  EXPECT_EQ(G.offset[kLmHeadW], G.total);
  int64_t gsum = 0;
  for (int p = 0; p < kNumParams; ++p) gsum += G.size[p];
  EXPECT_EQ(gsum, g.num_params());
  EXPECT_EQ(g.matmul_params(), g.num_params());  // the tied table is the LM head
}

// Central differences (FP32 model, step 1e-2) on the 3 largest-gradient elements of every
// tensor: a wrong sign, a missing term or a gradient written to the wrong tensor is an O(1)
// error; FP32 rounding and the step's curvature stay under 5% + 2e-4.
TEST(LlamaModel, GradientsMatchFiniteDifferences) {
  for (const int kv : {4, 2}) {
    SCOPED_TRACE("n_kv_head " + std::to_string(kv));
    const ModelOptions o = Options(TinyLlama(kv));
    auto model = CreateCpuGpt(o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    GptModel& g = **model;
    ASSERT_TRUE(g.InitRandom(7).ok());
    std::vector<float> w;
    ASSERT_TRUE(g.ExportWeights(&w).ok());
    // Larger weights than the 0.02 init make every path matter.
    SplitMix64 rng(3);
    const Layout L(o.model);
    for (int p : {kQkvW, kAttProjW, kFcW, kFcProjW, kLmHeadW, kWte}) {
      for (int64_t i = 0; i < L.size[p]; ++i) w[L.offset[p] + i] *= 5.0f;
    }
    for (int p : {kLn1W, kLn2W, kLnfW}) {
      for (int64_t i = 0; i < L.size[p]; ++i) {
        w[L.offset[p] + i] = 1.0f + 0.3f * rng.Normal();
      }
    }
    ASSERT_TRUE(g.ImportWeights(w).ok());
    std::vector<int32_t> x, y;
    Batch(&x, &y, 16, 200);
    float loss = 0;
    std::vector<float> grads;
    ASSERT_TRUE(g.Gradients(x.data(), y.data(), &loss, &grads).ok());
    auto loss_at = [&](const std::vector<float>& v) {
      EXPECT_TRUE(g.ImportWeights(v).ok());
      float l = 0;
      EXPECT_TRUE(g.Forward(x.data(), y.data(), &l, nullptr).ok());
      return static_cast<double>(l);
    };
    for (int p = 0; p < kNumParams; ++p) {
      if (L.size[p] == 0) continue;
      std::vector<int64_t> idx(static_cast<size_t>(L.size[p]));
      std::iota(idx.begin(), idx.end(), L.offset[p]);
      std::partial_sort(idx.begin(), idx.begin() + 3, idx.end(), [&](int64_t a, int64_t b) {
        return std::fabs(grads[a]) > std::fabs(grads[b]);
      });
      EXPECT_GT(std::fabs(grads[idx[0]]), 1e-4f) << kParamNames[p] << " has no gradient";
      for (int k = 0; k < 3; ++k) {
        const int64_t i = idx[k];
        const float h = 1e-2f;
        std::vector<float> v = w;
        v[i] = w[i] + h;
        const double up = loss_at(v);
        v[i] = w[i] - h;
        const double down = loss_at(v);
        const double fd = (up - down) / (2 * h);
        EXPECT_NEAR(grads[i], fd, 2e-4 + 0.05 * std::fabs(fd))
            << kParamNames[p] << " element " << i - L.offset[p];
      }
    }
  }
}

// Grouped-query attention is multi-head attention whose key/value heads repeat (query head h
// reads key/value head h / (NH / KV)): the same logits, and each shared head's gradient is the
// sum of its copies' gradients.
TEST(LlamaModel, GroupedQueryAttentionEqualsMultiHeadWithRepeatedKeyValueHeads) {
  const ModelConfig mg = TinyLlama(2), mm = TinyLlama(4);
  auto gqa = CreateCpuGpt(Options(mg));
  auto mha = CreateCpuGpt(Options(mm));
  ASSERT_TRUE(gqa.ok() && mha.ok());
  ASSERT_TRUE((*gqa)->InitRandom(11).ok());
  std::vector<float> wg;
  ASSERT_TRUE((*gqa)->ExportWeights(&wg).ok());
  const Layout Lg(mg), Lm(mm);
  std::vector<float> wm(static_cast<size_t>(Lm.total), 0.0f);
  const int64_t C = 32, HS = 8, NH = 4, KVg = 2, G = NH / KVg;
  for (int p = 0; p < kNumParams; ++p) {
    if (p == kQkvW) continue;
    std::copy_n(wg.begin() + Lg.offset[p], Lg.size[p], wm.begin() + Lm.offset[p]);
  }
  // qkv rows: [Q (NH HS) | K | V], each (rows, C).
  const int64_t rows_g = (NH + 2 * KVg) * HS, rows_m = 3 * NH * HS;
  for (int64_t l = 0; l < 2; ++l) {
    const float* src = wg.data() + Lg.offset[kQkvW] + l * rows_g * C;
    float* dst = wm.data() + Lm.offset[kQkvW] + l * rows_m * C;
    std::copy_n(src, NH * HS * C, dst);
    for (int part = 0; part < 2; ++part) {
      for (int64_t h = 0; h < NH; ++h) {
        std::copy_n(src + (NH * HS + part * KVg * HS + (h / G) * HS) * C, HS * C,
                    dst + (NH * HS + part * NH * HS + h * HS) * C);
      }
    }
  }
  ASSERT_TRUE((*mha)->ImportWeights(wm).ok());
  std::vector<int32_t> x, y;
  Batch(&x, &y, 16, 200);
  float lg = 0, lm = 0;
  std::vector<float> logits_g, logits_m, gg, gm;
  ASSERT_TRUE((*gqa)->Forward(x.data(), y.data(), &lg, &logits_g).ok());
  ASSERT_TRUE((*mha)->Forward(x.data(), y.data(), &lm, &logits_m).ok());
  ASSERT_EQ(logits_g.size(), logits_m.size());
  for (size_t i = 0; i < logits_g.size(); ++i) ASSERT_NEAR(logits_g[i], logits_m[i], 1e-5) << i;
  ASSERT_TRUE((*gqa)->Gradients(x.data(), y.data(), &lg, &gg).ok());
  ASSERT_TRUE((*mha)->Gradients(x.data(), y.data(), &lm, &gm).ok());
  for (int64_t l = 0; l < 2; ++l) {
    const float* a = gg.data() + Lg.offset[kQkvW] + l * rows_g * C;
    const float* b = gm.data() + Lm.offset[kQkvW] + l * rows_m * C;
    for (int64_t i = 0; i < NH * HS * C; ++i) ASSERT_NEAR(a[i], b[i], 1e-6) << "dQ " << i;
    for (int part = 0; part < 2; ++part) {
      for (int64_t k = 0; k < KVg; ++k) {
        for (int64_t i = 0; i < HS * C; ++i) {
          double sum = 0;
          for (int64_t g = 0; g < G; ++g) sum += b[(NH * HS + part * NH * HS + (k * G + g) * HS) * C + i];
          ASSERT_NEAR(a[(NH * HS + part * KVg * HS + k * HS) * C + i], sum, 1e-6)
              << (part == 0 ? "dK" : "dV") << " head " << k << " element " << i;
        }
      }
    }
  }
  for (int p : {kAttProjW, kFcW, kLmHeadW, kWte, kLn1W}) {
    for (int64_t i = 0; i < Lg.size[p]; ++i) {
      ASSERT_NEAR(gg[Lg.offset[p] + i], gm[Lm.offset[p] + i], 1e-6) << kParamNames[p] << " " << i;
    }
  }
}

// The untied LM head: its gradient is its own, the token embedding's comes from the embedding
// alone (rows of tokens that never occur stay zero), and gpt2 keeps its tie.
TEST(LlamaModel, TheLmHeadIsUntied) {
  const ModelConfig m = TinyLlama(2);
  auto model = CreateCpuGpt(Options(m));
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE((*model)->InitRandom(5).ok());
  std::vector<int32_t> x(16, 3), y(16, 4);
  float loss = 0;
  std::vector<float> g;
  ASSERT_TRUE((*model)->Gradients(x.data(), y.data(), &loss, &g).ok());
  const Layout L(m);
  double wte_other = 0, head_other = 0;
  for (int64_t v = 0; v < 200; ++v) {
    for (int64_t c = 0; c < 32; ++c) {
      if (v != 3) wte_other += std::fabs(g[L.offset[kWte] + v * 32 + c]);
      if (v != 3) head_other += std::fabs(g[L.offset[kLmHeadW] + v * 32 + c]);
    }
  }
  EXPECT_EQ(wte_other, 0.0) << "only token 3 is embedded";
  EXPECT_GT(head_other, 0.0) << "every logit has a gradient";
}

TEST(LlamaModel, TrainsInEveryPrecision) {
  for (const Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp8}) {
    SCOPED_TRACE(PrecisionName(p));
    ModelOptions o = Options(TinyLlama(2), p);
    o.B = 4, o.T = 16;
    auto model = CreateCpuGpt(o);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ASSERT_TRUE((*model)->InitRandom(1).ok());
    // A sequence the model can learn: y = x + 1.
    std::vector<int32_t> x(64), y(64);
    for (int i = 0; i < 64; ++i) x[i] = (i * 13) % 50, y[i] = x[i] + 1;
    StepStats first, last;
    for (int s = 1; s <= 30; ++s) {
      StepStats st;
      ASSERT_TRUE((*model)->Step(s, 3e-3f, x.data(), y.data(), &st).ok());
      ASSERT_TRUE(std::isfinite(st.loss));
      if (s == 1) first = st;
      last = st;
    }
    EXPECT_LT(last.loss, 0.5f * first.loss) << first.loss << " -> " << last.loss;
    if (p == Precision::kFp8) {
      EXPECT_EQ((*model)->num_fp8_weights(), 2 * 4);
      EXPECT_EQ(last.weight_casts, 2 * 4);
    }
  }
}

TEST(LlamaConfig, ParsesAndRefusesNamingTheKey) {
  auto good = ParseRunConfig(
      "data: {train: x}\nmodel: {arch: llama, n_embd: 64, n_head: 8, n_kv_head: 2, "
      "ffn_hidden: 160, rope_theta: 500000}\n");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE(good->model.llama());
  EXPECT_EQ(good->model.kv_heads(), 2);
  EXPECT_EQ(good->model.ffn(), 160);
  EXPECT_EQ(good->model.rope_theta, 500000.0f);
  auto gpt = ParseRunConfig("data: {train: x}\n");
  ASSERT_TRUE(gpt.ok());
  EXPECT_FALSE(gpt->model.llama());
  EXPECT_EQ(gpt->model.kv_heads(), gpt->model.n_head);
  const std::pair<std::string, std::string> bad[] = {
      {"model: {arch: mamba}", "model.arch"},
      {"model: {arch: llama, n_head: 4, n_kv_head: 3}", "must divide model.n_head = 4"},
      {"model: {n_head: 4, n_kv_head: 2}", "grouped-query attention needs model.arch: llama"},
      {"model: {arch: llama, n_embd: 36, n_head: 4}", "must be even"},
      {"model: {arch: llama, n_head: 4, n_kv_head: 2}\nparallel: {tp: 4}",
       "does not divide model.n_kv_head = 2"},
      {"model: {arch: llama, ffn_hidden: 90}\nparallel: {tp: 4}",
       "does not divide model.ffn_hidden = 90"},
      {"model: {arch: llama, rope_theta: 0}", "model.rope_theta"},
  };
  for (const auto& [yaml, want] : bad) {
    auto r = ParseRunConfig("data: {train: x}\n" + yaml + "\n");
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_TRUE(Has(r.status().message(), want)) << yaml << ": " << r.status().message();
  }
}

// FP8 GEMMs need every linear layer's N and K to be multiples of 16: the model says which layer.
TEST(LlamaModel, Fp8RefusesAnFfnWidthItsGemmsCannotTake) {
  ModelConfig m = TinyLlama(2);
  m.ffn_hidden = 40;
  auto model = CreateCpuGpt(Options(m, Precision::kFp8));
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(Has(model.status().message(), "fc_proj")) << model.status().message();
  EXPECT_TRUE(CreateCpuGpt(Options(m, Precision::kBf16)).ok());
}

// A llama checkpoint resumes exactly as llama, and a gpt2 run (or another llama shape) refuses it
// naming the key that differs.
TEST(LlamaModel, CheckpointsResumeExactlyAndRefuseAnotherArch) {
  test::TempDir dir;
  const std::string corpus = test::EnglishCorpus(dir.str() + "/corpus.txt");
  ASSERT_FALSE(corpus.empty());
  TrainOptions o;
  o.config = test::TinyRunConfig(corpus, Precision::kFp8, 6);
  o.config.model.arch = Arch::kLlama, o.config.model.n_kv_head = 2, o.config.model.ffn_hidden = 96;
  o.checkpoint_dir = dir.str() + "/whole";
  auto whole = RunTraining(o, DeviceInfo{});
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  TrainOptions part = o;
  part.checkpoint_dir = dir.str() + "/parts";
  part.stop_step = 3;
  ASSERT_TRUE(RunTraining(part, DeviceInfo{}).ok());
  part.stop_step = -1, part.resume = true;
  auto resumed = RunTraining(part, DeviceInfo{});
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  ASSERT_EQ(resumed->losses.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(resumed->losses[i], whole->losses[3 + i]);  // bit for bit
  TrainOptions gpt = part;
  gpt.config.model = test::TinyRunConfig(corpus, Precision::kFp8, 6).model;
  auto refused = RunTraining(gpt, DeviceInfo{});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(Has(refused.status().message(), "model.arch")) << refused.status().message();
  TrainOptions wider = part;
  wider.config.model.n_kv_head = 4;
  refused = RunTraining(wider, DeviceInfo{});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(Has(refused.status().message(), "model.n_kv_head")) << refused.status().message();
}

}  // namespace
}  // namespace fp8rt

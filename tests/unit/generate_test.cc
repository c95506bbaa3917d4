// Text generation (runtime/generate.h): the KV-cache forward's logits against the CPU training
// model's Forward at every position, greedy and top-k 1 agreeing, the sampler's frequencies
// against the softmax, seeds repeating, the context limit and bad arguments refused, a trained
// checkpoint (gpt2 and llama) continuing English text through GenerateFromCheckpoint, and
// train.sample_every's samples in the log leaving the run's losses as they were.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "runtime/generate.h"
#include "runtime/gpt.h"
#include "runtime/trainer.h"
#include "tests/common/corpus.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

// A random fp32 model's whole master array and its forward logits on `x` (B = 1, T = x.size()).
struct Reference {
  std::vector<float> master, logits;
};
Reference RandomModel(const ModelConfig& m, const std::vector<int32_t>& x) {
  ModelOptions mo;
  mo.model = m;
  mo.precision = Precision::kFp32;
  mo.B = 1, mo.T = static_cast<int>(x.size());
  auto model = CreateCpuGpt(mo);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_TRUE((*model)->InitRandom(5).ok());
  Reference r;
  std::vector<float> mm, vv;
  EXPECT_TRUE((*model)->ExportState(&r.master, &mm, &vv).ok());
  float loss = 0;
  EXPECT_TRUE((*model)->Forward(x.data(), x.data(), &loss, &r.logits).ok());
  return r;
}

const ModelConfig kModel = {2, 64, 4, 24, 300};  // V 300 padded to 384: the padding never sampled

std::vector<int32_t> Tokens(int n, int mult) {
  std::vector<int32_t> x(n);
  for (int i = 0; i < n; ++i) x[i] = (i * mult + 3) % kModel.vocab_size;
  return x;
}

// Feeds x token by token to a sampler of a random model m and checks its logits against the
// training model's forward at every position; returns the sampler (its context now full).
Result<GptSampler> ExpectKvCacheMatchesTheForward(const ModelConfig& m,
                                                  const std::vector<int32_t>& x) {
  const Reference ref = RandomModel(m, x);
  auto s = GptSampler::Create(m, ref.master);
  if (!s.ok()) return s.status();
  const int64_t Vp = m.padded_vocab(), V = m.vocab_size;
  for (size_t t = 0; t < x.size(); ++t) {
    auto logits = s->Feed(x[t]);
    if (!logits.ok()) return logits.status();
    EXPECT_EQ(logits->size(), static_cast<size_t>(V));
    double err = 0, norm = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double want = ref.logits[t * Vp + v];
      err += ((*logits)[v] - want) * ((*logits)[v] - want), norm += want * want;
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << "position " << t;
  }
  return s;
}

TEST(Generate, KvCacheLogitsMatchTheTrainingModelsForwardAtEveryPosition) {
  auto s = ExpectKvCacheMatchesTheForward(kModel, Tokens(kModel.block_size, 37));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto full = s->Feed(1);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("context is full (24 positions)"), std::string::npos);
  s->Reset();
  EXPECT_NE(s->Feed(300).status().message().find("token 300 is outside the vocabulary (300)"),
            std::string::npos);
}

// llama: RoPE at the cached position, grouped-query heads reading their shared cache, SwiGLU,
// RMSNorm and the untied LM head, against the training model's forward.
TEST(Generate, LlamaKvCacheLogitsMatchTheTrainingModelsForward) {
  ModelConfig m = kModel;
  m.arch = Arch::kLlama, m.n_kv_head = 2, m.ffn_hidden = 80, m.rope_theta = 100.0f;
  std::vector<int32_t> x(m.block_size);
  for (int i = 0; i < m.block_size; ++i) x[i] = (i * 53 + 7) % m.vocab_size;
  auto s = ExpectKvCacheMatchesTheForward(m, x);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
}

TEST(Generate, GreedyTopOneAndSeedsRepeat) {
  const Reference ref = RandomModel(kModel, Tokens(4, 11));
  const std::vector<int32_t> prompt = Tokens(4, 11);
  SampleOptions greedy;
  greedy.temperature = 0, greedy.max_new_tokens = 12;
  SampleOptions top1 = greedy;
  top1.temperature = 1.0f, top1.top_k = 1;
  EXPECT_EQ(*Generate(kModel, ref.master, prompt, greedy), *Generate(kModel, ref.master, prompt, top1));
  SampleOptions a = greedy;
  a.temperature = 1.0f, a.seed = 1;
  SampleOptions b = a;
  b.seed = 2;
  const auto ga = *Generate(kModel, ref.master, prompt, a);
  EXPECT_EQ(ga, *Generate(kModel, ref.master, prompt, a));
  EXPECT_NE(ga, *Generate(kModel, ref.master, prompt, b));
  EXPECT_EQ(ga.size(), 12u);
  // Past the context (24 positions) generation goes on from the last 12 tokens: the first 21
  // tokens are those of a shorter run, and the 22nd is what a fresh sampler fed the 12 tokens
  // before it samples with the same stream.
  a.max_new_tokens = 100;
  const auto longer = *Generate(kModel, ref.master, prompt, a);
  ASSERT_EQ(longer.size(), 100u);
  a.max_new_tokens = 21;
  const auto first21 = *Generate(kModel, ref.master, prompt, a);
  EXPECT_TRUE(std::equal(first21.begin(), first21.end(), longer.begin()));
  {
    std::vector<int32_t> text(prompt);
    text.insert(text.end(), longer.begin(), longer.begin() + 21);
    auto s = *GptSampler::Create(kModel, ref.master);
    std::vector<float> logits;
    for (size_t i = text.size() - 12; i < text.size(); ++i) logits = *s.Feed(text[i]);
    SplitMix64 rng(a.seed);
    for (int i = 0; i < 21; ++i) SampleToken(logits, a, rng);  // the stream's first 21 draws
    EXPECT_EQ(SampleToken(logits, a, rng), longer[21]);
  }
  a.max_new_tokens = 100;
  EXPECT_FALSE(Generate(kModel, ref.master, {}, a).ok());
  EXPECT_FALSE(Generate(kModel, ref.master, Tokens(25, 1), a).ok());
  a.temperature = -1;
  EXPECT_NE(Generate(kModel, ref.master, prompt, a).status().message().find("temperature -1"),
            std::string::npos);
  EXPECT_FALSE(GptSampler::Create(kModel, std::vector<float>(10)).ok());
}

TEST(Generate, SampledFrequenciesFollowTheSoftmaxAndTopK) {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f), -30.0f};
  SampleOptions o;
  SplitMix64 rng(9);
  std::vector<int> count(4);
  const int n = 70000;
  for (int i = 0; i < n; ++i) ++count[SampleToken(logits, o, rng)];
  const double z = 1 + 2 + 4 + std::exp(-30.0);
  for (int v = 0; v < 3; ++v) {
    const double p = std::exp(logits[v]) / z;
    EXPECT_NEAR(count[v] / double(n), p, 4 * std::sqrt(p * (1 - p) / n)) << v;
  }
  o.top_k = 2;
  std::fill(count.begin(), count.end(), 0);
  for (int i = 0; i < n; ++i) ++count[SampleToken(logits, o, rng)];
  EXPECT_EQ(count[0] + count[3], 0);
  EXPECT_NEAR(count[2] / double(n), 4.0 / 6.0, 0.01);
  o.temperature = 0.5f, o.top_k = 0;  // sharper: p ~ exp(2 * logit)
  std::fill(count.begin(), count.end(), 0);
  for (int i = 0; i < n; ++i) ++count[SampleToken(logits, o, rng)];
  EXPECT_NEAR(count[2] / double(n), 16.0 / 21.0, 0.01);
}

TEST(Generate, NanLogitsAreNeverDrawnAndADivergedModelIsRefused) {
  const std::vector<float> logits = {NAN, 1.0f, NAN, 0.5f};
  SampleOptions o;
  SplitMix64 rng(1);
  for (int i = 0; i < 2000; ++i) {
    const int32_t t = SampleToken(logits, o, rng);
    ASSERT_TRUE(t == 1 || t == 3) << t;
  }
  o.temperature = 0;
  EXPECT_EQ(SampleToken(logits, o, rng), 1);
  Reference ref = RandomModel(kModel, Tokens(4, 11));
  std::fill(ref.master.begin(), ref.master.end(), NAN);
  const auto r = Generate(kModel, ref.master, Tokens(4, 11), SampleOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNonFinite);
  EXPECT_NE(r.status().message().find("not finite"), std::string::npos);
}

TEST(Generate, ATrainedCheckpointContinuesText) {
  const fs::path dir = fs::temp_directory_path() / ("fp8rt_generate_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string corpus = test::EnglishCorpus((dir / "corpus.txt").string());
  ASSERT_FALSE(corpus.empty());
  TrainOptions o;
  SampleOptions s;
  s.max_new_tokens = 40, s.seed = 3;
  // Both archs (GenerateFromCheckpoint takes it from the checkpoint); gpt2 last: o goes on below.
  for (const Arch arch : {Arch::kLlama, Arch::kGpt2}) {
    SCOPED_TRACE(ArchName(arch));
    o.config = test::TinyRunConfig(corpus, Precision::kFp8, 60);
    o.config.model.arch = arch;
    if (arch == Arch::kLlama) o.config.model.n_kv_head = 2;
    o.checkpoint_dir = (dir / ArchName(arch)).string();
    ASSERT_TRUE(RunTraining(o, DeviceInfo{}).ok());
    std::ostringstream a, b;
    ASSERT_TRUE(GenerateFromCheckpoint(o.checkpoint_dir, -1, "The ", s, Tokenizer::Bytes(), a).ok());
    ASSERT_TRUE(GenerateFromCheckpoint(o.checkpoint_dir, -1, "The ", s, Tokenizer::Bytes(), b).ok());
    EXPECT_EQ(a.str(), b.str());
    EXPECT_EQ(a.str().rfind("The ", 0), 0u) << a.str();
    EXPECT_EQ(a.str().size(), 4u + 40u + 1u) << a.str();
    // 60 steps of English: mostly letters and spaces, not uniform bytes.
    int letters = 0;
    for (char c : a.str()) letters += std::isalpha(static_cast<unsigned char>(c)) || c == ' ';
    EXPECT_GT(letters, 30) << a.str();
  }
  std::ostringstream a;
  EXPECT_FALSE(GenerateFromCheckpoint((dir / "none").string(), -1, "x", s, Tokenizer::Bytes(), a).ok());

  // train.sample_every: samples in the log at steps 30 and 60, and the run's losses unchanged.
  TrainOptions sampled = o;
  sampled.checkpoint_dir.clear();
  sampled.config.train.sample_every = 30;
  sampled.config.train.sample_tokens = 20;
  std::ostringstream log;
  sampled.progress = &log;
  auto with = RunTraining(sampled, DeviceInfo{});
  o.checkpoint_dir.clear();
  auto without = RunTraining(o, DeviceInfo{});
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_EQ(with->losses, without->losses);
  EXPECT_NE(log.str().find("step 30/60  sample: "), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("step 60/60  sample: "), std::string::npos) << log.str();
  EXPECT_EQ(log.str().find("step 59/60  sample: "), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fp8rt

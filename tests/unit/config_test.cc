// RunConfig parsing: defaults, every error names the key and what is allowed.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "common/train_config.h"

namespace fp8rt {
namespace {

TEST(RunConfig, MinimalConfigGetsDefaults) {
  auto r = ParseRunConfig("data:\n  train: corpus.txt\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model.n_layer, 2);
  EXPECT_EQ(r->precision, Precision::kFp8);
  EXPECT_EQ(r->fp8.scaling.history_len, 1024);  // the one default: DelayedScalingConfig's
  EXPECT_EQ(r->model.padded_vocab(), 256);
}

TEST(RunConfig, ParsesNestedKeys) {
  auto r = ParseRunConfig(R"(
name: t
precision: bf16
model: {n_layer: 3, n_embd: 96, n_head: 6, block_size: 32, vocab_size: 50257}
data: {train: a.bin, format: tokens}
train: {batch_size: 2, seq_len: 16, grad_accum: 4, lr: 0.002}
fp8: {history_len: 1024, amax_algo: most_recent, margin: 1, layers: {lm_head: true}}
)");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->precision, Precision::kBf16);
  EXPECT_EQ(r->model.padded_vocab(), 50304);
  EXPECT_EQ(r->train.grad_accum, 4);
  EXPECT_FLOAT_EQ(r->train.lr, 0.002f);
  EXPECT_EQ(r->fp8.scaling.algo, AmaxAlgo::kMostRecent);
  EXPECT_TRUE(r->fp8.lm_head);
}

void ExpectError(const std::string& yaml, const std::string& needle) {
  auto r = ParseRunConfig(yaml);
  ASSERT_FALSE(r.ok()) << "accepted: " << yaml;
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "message '" << r.status().message() << "' does not mention '" << needle << "'";
}

TEST(RunConfig, RefusesUnknownKeysByName) {
  ExpectError("data: {train: a}\ntrain: {batch_sise: 4}\n", "train.batch_sise");
  ExpectError("data: {train: a}\nfp8: {layers: {mlp: true}}\n", "fp8.layers.mlp");
  ExpectError("bogus: 1\n", "'bogus'");
}

TEST(RunConfig, RefusesBadValuesNamingField) {
  ExpectError("data: {train: a}\ntrain: {batch_size: four}\n", "train.batch_size");
  ExpectError("data: {train: a}\nfp8: {history_len: 2000}\n", "fp8.history_len = 2000");
  ExpectError("data: {train: a}\nfp8: {amax_algo: mean}\n", "fp8.amax_algo");
  ExpectError("data: {train: a}\nmodel: {n_embd: 100, n_head: 3}\n", "multiple of model.n_head");
  ExpectError("data: {train: a}\nprecision: fp16\n", "fp16");
  ExpectError("train: {batch_size: 1}\n", "data.train is required");
  ExpectError("data: {train: a}\ntrain: {seq_len: 65}\n", "train.seq_len = 65");
  ExpectError("model: [1, 2\n", "not valid YAML");
}

// The trainer reads its config through the same strict reader as the scheduler: no NaN, no
// quoted numbers, no duplicate keys, no anchors (no billion-laughs expansion in fp8train either).
TEST(RunConfig, RefusesWhatTheStrictReaderRefuses) {
  ExpectError("data: {train: a}\ntrain: {lr: .nan}\n", "train.lr = .nan is not a finite number");
  ExpectError("data: {train: a}\ntrain: {lr: -.inf}\n", "train.lr = -.inf is not a finite number");
  ExpectError("data: {train: a}\ntrain: {batch_size: \"8\"}\n",
              "train.batch_size = \"8\" is a string; expected an integer");
  ExpectError("data: {train: a}\nfp8: {first_step_current: \"false\"}\n", "fp8.first_step_current");
  ExpectError("data: {train: a}\ntrain: {lr: 0.1, lr: 0.2}\n", "duplicate key 'lr'");
  ExpectError("data: {train: &t a}\nname: *t\n", "anchors and aliases are refused");
}

// Every preset in configs/ loads and validates (the data files need not exist for that).
TEST(RunConfig, EveryPresetInConfigsLoads) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(FP8RT_CONFIGS_DIR)) {
    if (e.path().extension() != ".yaml") continue;
    auto cfg = LoadRunConfig(e.path().string());
    EXPECT_TRUE(cfg.ok()) << e.path() << ": " << cfg.status().ToString();
    ++n;
  }
  EXPECT_GE(n, 6) << "presets in " << FP8RT_CONFIGS_DIR;
}

}  // namespace
}  // namespace fp8rt

namespace fp8rt {
namespace {

// The one list of a config's input paths (RunConfig::Inputs), as fp8ctl, the scheduler and
// fp8train resolve and confine them.
TEST(RunConfigInputs, RelativePathsBecomeAbsoluteAgainstTheBaseOthersStay) {
  auto c = ParseRunConfig(
      "data: {train: corpus.txt, val: /abs/val.txt}\ntrain: {init_from: ../hf, lr: 0.1}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  c->ResolveInputs("/jobs/7/cfg");
  EXPECT_EQ(c->data.train.at(0), "/jobs/7/cfg/corpus.txt");
  EXPECT_EQ(c->data.val.at(0), "/abs/val.txt");
  EXPECT_EQ(c->train.init_from, "/jobs/7/hf");
  std::vector<std::string> keys;
  for (const ConstInputPath& p : std::as_const(*c).Inputs()) keys.push_back(p.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"data.train", "data.val", "data.tokenizer", "train.init_from"}));
  // A config named without a directory: relative to the current one.
  auto here = ParseRunConfig("data: {train: a.txt}\n");
  here->ResolveInputs("");
  EXPECT_EQ(here->data.train.at(0), (std::filesystem::current_path() / "a.txt").string());
  auto bare = ParseRunConfig("data: {train: a.txt}\n");
  bare->ResolveInputs("/x");
  EXPECT_TRUE(bare->data.val.empty()) << "an input not given stays empty";
}

// The config as a job stores it and the node hands it to fp8train: every key, and it reads back
// as the same config (floats too: written in their shortest form).
TEST(RunConfigJson, EveryKeyRoundTripsExactly) {
  for (const auto& e : std::filesystem::directory_iterator(FP8RT_CONFIGS_DIR)) {
    if (e.path().extension() != ".yaml") continue;
    auto cfg = LoadRunConfig(e.path().string());
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    const std::string json = RunConfigToJson(*cfg);
    auto back = ParseRunConfig(json);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json;
    EXPECT_TRUE(*back == *cfg) << e.path() << "\n" << json;
    EXPECT_EQ(RunConfigToJson(*back), json);
  }
  auto c = ParseRunConfig("data: {train: a}\ntrain: {lr: 3e-4, min_lr: 1.1e-5, eps: 1e-8}\n");
  const std::string json = RunConfigToJson(*c);
  EXPECT_NE(json.find("\"lr\":0.0003,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"eps\":1e-08"), std::string::npos) << json;
  for (const char* key : {"\"share_gradient_memory\"", "\"lm_head\"", "\"scale_check_every\"",
                          "\"amax_algo\":\"max\"", "\"precision\":\"fp8\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
  // Random floats of every magnitude read back as themselves.
  uint32_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 1664525u + 1013904223u;
    float f;
    // Positive, from the smallest normal float to 2^4 (weight_decay's range is [0, 10]).
    const uint32_t bits = ((1 + (x >> 23) % 130) << 23) | (x & 0x7fffffu);
    std::memcpy(&f, &bits, sizeof f);
    if (!(f <= 10)) continue;
    RunConfig r = *c;  // (a copy, not `r.data.train = {"a"}`: GCC 12's -Wrestrict misfires)
    r.train.weight_decay = f;
    auto back2 = ParseRunConfig(RunConfigToJson(r));
    ASSERT_TRUE(back2.ok()) << back2.status().ToString();
    ASSERT_EQ(back2->train.weight_decay, f) << RunConfigToJson(r);
  }
}

// The user's file and line: a value's refusal names its line, not only an unknown key's.
TEST(RunConfig, ErrorsNameTheLine) {
  auto typo = ParseRunConfig("data: {train: a}\ntrain:\n  batch_sise: 8\n", "t.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("unknown field 'train.batch_sise' at line 3"),
            std::string::npos)
      << typo.status().message();
  auto range = ParseRunConfig("data: {train: a}\ntrain:\n  batch_size: 0\n");
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("train.batch_size = 0 is out of range [1"),
            std::string::npos)
      << range.status().message();
}

}  // namespace
}  // namespace fp8rt

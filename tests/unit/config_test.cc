// RunConfig parsing: defaults, every error names the key and what is allowed.
#include "common/config_paths.h"
#include "runtime/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

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

// The one list of a config's path keys (common/config_paths.h), as fp8ctl and fp8d apply it.
TEST(ConfigPaths, RelativePathsBecomeAbsoluteAgainstTheBaseOthersStay) {
  nlohmann::json c = {{"data", {{"train", "corpus.txt"}, {"val", "/abs/val.txt"}, {"format", "x"}}},
                      {"train", {{"init_from", "../hf"}, {"lr", 0.1}}},
                      {"model", {{"n_layer", 2}}}};
  AbsoluteConfigPaths(&c, "/jobs/7/cfg");
  EXPECT_EQ(c["data"]["train"], "/jobs/7/cfg/corpus.txt");
  EXPECT_EQ(c["data"]["val"], "/abs/val.txt");
  EXPECT_EQ(c["data"]["format"], "x");
  EXPECT_EQ(c["train"]["init_from"], "/jobs/7/hf");
  EXPECT_EQ(c["train"]["lr"], 0.1);
  nlohmann::json odd = {{"data", "not a map"}, {"train", {{"init_from", 3}}}};
  AbsoluteConfigPaths(&odd, "/x");
  EXPECT_EQ(odd["data"], "not a map");
  EXPECT_EQ(odd["train"]["init_from"], 3);
}

}  // namespace
}  // namespace fp8rt

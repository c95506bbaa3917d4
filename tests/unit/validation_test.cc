// Validation loss (data.val, train.eval_every, train.eval_tokens): which held-out tokens are
// evaluated, that evaluating changes nothing in training (FP8 scales included), when it runs, and
// the refusals.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "runtime/evaluate.h"
#include "runtime/gpt.h"
#include "runtime/trainer.h"
#include "tests/common/corpus.h"
#include "tests/common/temp_dir.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

class ValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string all = test::EnglishCorpus(dir_.str() + "/all.txt");
    ASSERT_FALSE(all.empty()) << "no English text in /usr/share/common-licenses";
    std::ifstream in(all, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    ASSERT_GT(text.size(), 100000u);
    // The last 32 KB held out, as scripts/split_corpus.py holds out blocks.
    train_ = dir_.str() + "/train.txt", val_ = dir_.str() + "/val.txt";
    std::ofstream(train_, std::ios::binary) << text.substr(0, text.size() - 32768);
    std::ofstream(val_, std::ios::binary) << text.substr(text.size() - 32768);
  }

  RunConfig Tiny(int total_steps, bool with_val) {
    RunConfig c = test::TinyRunConfig(train_, Precision::kFp8, total_steps);
    if (with_val) c.data.val = {val_};
    c.train.eval_every = 10;
    c.train.eval_tokens = 4096;
    EXPECT_TRUE(c.Validate().ok());
    return c;
  }

  test::TempDir dir_{"fp8rt_validation"};
  std::string train_, val_;
  DeviceInfo cpu_;
};

// Evaluating between steps (FP8: the forward's casts record amaxes) leaves every training loss
// bit-identical to a run that never evaluates; the held-out loss falls as the model learns.
TEST_F(ValidationTest, EvaluatingChangesNothingInTrainingAndTheHeldOutLossFalls) {
  TrainOptions with, without;
  with.config = Tiny(65, true);
  without.config = Tiny(65, false);
  std::ostringstream metrics;
  with.metrics = &metrics;
  auto a = RunTraining(with, cpu_);
  auto b = RunTraining(without, cpu_);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(a->losses, b->losses);
  EXPECT_TRUE(b->val_losses.empty());
  // Every 10 steps, and after the last (65).
  ASSERT_EQ(a->val_losses.size(), 7u);
  const int64_t steps[] = {10, 20, 30, 40, 50, 60, 65};
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(a->val_losses[i].first, steps[i]);
  // About 4.0 nats at step 10 (a byte model still near its unigram), about 3.0 after 65 steps.
  EXPECT_LT(a->val_losses.back().second, a->val_losses.front().second - 0.5);
  // The metrics carry them as val_loss lines.
  const auto lines = test::MetricsLinesWith(metrics.str(), "val_loss");
  for (const auto& l : lines) EXPECT_NE(l.find("\"val_tokens\":4096"), std::string::npos) << l;
  EXPECT_EQ(lines.size(), 7u);
}

// The evaluation is the mean of the forward losses of consecutive (seq_len + 1)-token windows
// from the start of data.val, batch_size per micro-batch, and is the same every time.
TEST_F(ValidationTest, TheSameFirstWindowsOfTheFileEveryTime) {
  RunConfig c = Tiny(10, true);
  c.train.eval_tokens = 3 * 4 * 64 + 100;  // rounds down to 3 micro-batches
  auto v = Validator::Create(c);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_NE(*v, nullptr);
  EXPECT_EQ((*v)->micro_batches(), 3);
  EXPECT_EQ((*v)->tokens(), 3 * 4 * 64);
  ModelOptions mo;
  mo.model = c.model;
  mo.precision = Precision::kFp8;
  mo.B = 4, mo.T = 64;
  auto model = CreateCpuGpt(mo);
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE((*model)->InitRandom(7).ok());
  auto got = (*v)->Evaluate(**model);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto again = (*v)->Evaluate(**model);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*got, *again);

  std::ifstream in(val_, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  double sum = 0;
  for (int b = 0; b < 3; ++b) {
    std::vector<int32_t> x(256), y(256);
    for (int i = 0; i < 256; ++i) {
      const size_t w = static_cast<size_t>(b * 4 + i / 64), t = i % 64;
      x[i] = static_cast<uint8_t>(text[w * 64 + t]);
      y[i] = static_cast<uint8_t>(text[w * 64 + t + 1]);
    }
    float loss = 0;
    ASSERT_TRUE((*model)->Forward(x.data(), y.data(), &loss, nullptr).ok());
    sum += loss;
  }
  EXPECT_DOUBLE_EQ(*got, sum / 3);

  // More than the file holds: capped at its whole micro-batches (32768 tokens: 511 windows of
  // 64 inputs, each with the next token as its last target -> 127 micro-batches of 4).
  c.train.eval_tokens = 1 << 30;
  auto all = Validator::Create(c);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)->micro_batches(), 127);
  // No data.val: no validator.
  c.data.val.clear();
  auto none = Validator::Create(c);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

TEST_F(ValidationTest, EvalEveryZeroEvaluatesAfterTheLastStepOnly) {
  TrainOptions o;
  o.config = Tiny(12, true);
  o.config.train.eval_every = 0;
  o.stop_step = 7;  // --steps 7: the end of this invocation
  auto r = RunTraining(o, cpu_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->val_losses.size(), 1u);
  EXPECT_EQ(r->val_losses[0].first, 7);
}

TEST_F(ValidationTest, TooSmallMissingOrOutOfVocabularySetsAndBadSettingsAreRefusedNamingThem) {
  RunConfig c = Tiny(10, true);
  std::ofstream(dir_.str() + "/small.txt") << std::string(4 * 64, 'a');  // one token short
  c.data.val = {dir_.str() + "/small.txt"};
  auto small = Validator::Create(c);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("small.txt"), std::string::npos);
  EXPECT_NE(small.status().message().find("fewer than one micro-batch"), std::string::npos);

  c.data.val = {dir_.str() + "/missing.txt"};
  TrainOptions o;
  o.config = c;
  auto missing = RunTraining(o, cpu_);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.txt"), std::string::npos);

  c.data.val = {val_};
  c.model.vocab_size = 300;
  c.data.format = "tokens";
  std::vector<int32_t> toks(2000, 5);
  toks[1500] = 299 + 1;
  ASSERT_TRUE(TokenDataset::WriteShard(dir_.str() + "/val.bin", toks).ok());
  c.data.val = {dir_.str() + "/val.bin"};
  auto oov = Validator::Create(c);
  ASSERT_FALSE(oov.ok());
  EXPECT_NE(oov.status().message().find("val.bin' at token 1500 is 300, not below model.vocab_size 300"),
            std::string::npos)
      << oov.status().message();

  for (const char* bad : {"eval_every: -1", "eval_tokens: 0", "eval_every: x"}) {
    auto r = ParseRunConfig(StrCat("data: {train: t.txt, val: v.txt}\ntrain: {", bad, "}\n"));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(StrCat("train.", std::string(bad).substr(0, 10))),
              std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace fp8rt

// fp8train --memory-report: the model's allocations by what they hold add up to its total, the
// FP32 state is where the layout says, FP8 buffers exist only in FP8, and ZeRO-1's share is
// visible; the trainer writes the breakdown to the metrics after the first step.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "runtime/gpt.h"
#include "runtime/gpt_layout.h"
#include "runtime/trainer.h"
#include "tests/common/corpus.h"
#include "tests/common/temp_dir.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

std::map<std::string, size_t> Report(const GptModel& m) {
  std::map<std::string, size_t> out;
  for (const auto& [name, bytes] : m.MemoryReport()) out[name] = bytes;
  return out;
}

TEST(MemoryReport, CategoriesAddUpAndFollowThePrecision) {
  for (const Precision p : {Precision::kFp8, Precision::kBf16}) {
    ModelOptions mo;
    mo.model = {3, 64, 4, 64, 256};
    mo.precision = p;
    mo.B = 2, mo.T = 32;
    auto model = CreateCpuGpt(mo);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const auto r = Report(**model);
    size_t sum = 0;
    for (const auto& [name, bytes] : r) sum += bytes;
    EXPECT_EQ(sum, (*model)->allocated_bytes()) << PrecisionName(p);
    const gpt_detail::Layout layout(mo.model);
    const size_t state = static_cast<size_t>(layout.total) * sizeof(float);
    EXPECT_EQ(r.at("master weights (fp32)"), state);
    EXPECT_EQ(r.at("gradients (fp32)"), state);
    EXPECT_EQ(r.at("optimizer moments (fp32)"), 2 * state);
    // (B x T, padded vocab) in the model's activation type, 2 or 4 bytes.
    EXPECT_TRUE(r.at("logits") == size_t{64} * 256 * 2 || r.at("logits") == size_t{64} * 256 * 4)
        << r.at("logits");
    EXPECT_GT(r.at("saved activations"), 0u);
    const bool fp8 = p == Precision::kFp8;
    EXPECT_EQ(r.count("fp8 weights (+T)"), fp8 ? 1u : 0u) << PrecisionName(p);
    EXPECT_EQ(r.count("fp8 saved inputs"), fp8 ? 1u : 0u);
    if (fp8) {
      // 3 layers x (QKV 3C x C + proj C x C + FC 4C x C + FC2 C x 4C) bytes, and the transposes.
      EXPECT_EQ(r.at("fp8 weights (+T)"), size_t{2} * 3 * 12 * 64 * 64);
    }
  }
}

TEST(MemoryReport, TheTrainerWritesItToTheMetricsAfterTheFirstStep) {
  test::TempDir dir("fp8rt_memreport");
  const std::string corpus = test::EnglishCorpus(dir.str() + "/corpus.txt");
  ASSERT_FALSE(corpus.empty());
  TrainOptions o;
  o.config.model = {2, 64, 4, 64, 256};
  o.config.data.train_path = corpus;
  o.config.train.batch_size = 2, o.config.train.seq_len = 32, o.config.train.total_steps = 3;
  std::ostringstream metrics, progress;
  o.metrics = &metrics, o.progress = &progress;
  o.memory_report = true;
  auto r = RunTraining(o, DeviceInfo{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto lines = test::MetricsLinesWith(metrics.str(), "memory_bytes");
  ASSERT_EQ(lines.size(), 1u) << metrics.str();
  EXPECT_NE(lines[0].find("\"master weights (fp32)\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"step\":1"), std::string::npos) << lines[0];
  EXPECT_NE(progress.str().find("memory after step 1"), std::string::npos) << progress.str();
  EXPECT_NE(progress.str().find("total (model)"), std::string::npos) << progress.str();
}

}  // namespace
}  // namespace fp8rt

// What the CPU training tests share: the tiny byte-level run, and picking metrics lines.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/train_config.h"
#include "runtime/device.h"
#include "runtime/trainer.h"
#include "tests/common/corpus.h"
#include "tests/common/temp_dir.h"

namespace fp8rt::test {

// 2 x 64, 4 heads, T = 64, batch 4, lr 3e-3 with 10 warmup steps, on the text at `train_path`.
inline RunConfig TinyRunConfig(const std::string& train_path, Precision p, int total_steps) {
  RunConfig c;
  c.model = {2, 64, 4, 64, 256};
  c.data.train = {train_path};
  c.train.batch_size = 4;
  c.train.seq_len = 64;
  c.train.total_steps = total_steps;
  c.train.lr = 3e-3f;
  c.train.min_lr = 3e-4f;
  c.train.warmup_steps = 10;
  c.precision = p;
  return c;
}

// The tiny run in FP8 under fp8.scaling `mode`, 120 steps: the mean loss of steps 101-120
// (ASSERTs inside: call it through ASSERT_NO_FATAL_FAILURE), which must be 2 nats below step 1's.
inline void TinyFp8TailLoss(const std::string& corpus, ScalingMode mode, double* tail) {
  TrainOptions o;
  o.config = TinyRunConfig(corpus, Precision::kFp8, 120);
  o.config.fp8.mode = mode;
  ASSERT_TRUE(o.config.Validate().ok());
  auto r = RunTraining(o, DeviceInfo{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  *tail = 0;
  for (int i = 100; i < 120; ++i) *tail += r->losses[i] / 20;
  EXPECT_LT(*tail, r->losses.front() - 2.0) << ScalingModeName(mode);
}

// A tiny byte-level model on English learns under fp8.scaling `mode` as it does under delayed
// scaling: the mean loss of steps 101-120 within 5%.
inline void ExpectLearnsLikeDelayedScaling(ScalingMode mode) {
  TempDir dir("fp8rt_learns");
  const std::string corpus = EnglishCorpus(dir.str() + "/corpus.txt");
  ASSERT_FALSE(corpus.empty());
  double delayed = 0, other = 0;
  ASSERT_NO_FATAL_FAILURE(TinyFp8TailLoss(corpus, ScalingMode::kDelayed, &delayed));
  ASSERT_NO_FATAL_FAILURE(TinyFp8TailLoss(corpus, mode, &other));
  EXPECT_NEAR(other, delayed, 0.05 * delayed) << ScalingModeName(mode);
}

// The lines of a metrics stream that hold `"key"`.
inline std::vector<std::string> MetricsLinesWith(const std::string& metrics, const std::string& key) {
  std::vector<std::string> out;
  std::istringstream in(metrics);
  for (std::string l; std::getline(in, l);) {
    if (l.find("\"" + key + "\"") != std::string::npos) out.push_back(l);
  }
  return out;
}

}  // namespace fp8rt::test

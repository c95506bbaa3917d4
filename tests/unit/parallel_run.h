// The fixture of the parallel-training tests (data_parallel_test.cc, tensor_parallel_test.cc):
// real fp8train processes on the CPU, alone, under mpirun, or started by the FP8RT_* environment,
// their metrics and checkpoints, and comparisons between runs.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "runtime/checkpoint.h"
#include "runtime/train_checkpoint.h"
#include "tests/common/corpus.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"

namespace fp8rt {

using test::ProcessResult;

struct TrainRun {
  std::vector<ProcessResult> ranks;     // rank order (mpirun: one entry, the launcher)
  std::vector<nlohmann::json> metrics;  // rank 0's step lines
  std::string output;                   // everything printed
};

class ParallelRun : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = test::EnglishCorpus(dir_.str() + "/corpus.txt");
    ASSERT_FALSE(corpus_.empty());
  }

  // A run config: the model (YAML flow map), precision, micro-batch and the parallel settings
  // (`parallel` adds keys to parallel:, e.g. ", tp: 2"); zero: 0, 1 (true) or 3.
  std::string Config(const std::string& name, int batch, const std::string& model,
                     const std::string& precision, int grad_accum = 1,
                     bool first_step_current = false, int zero = 0,
                     const std::string& reduce_dtype = "fp32", const std::string& parallel = "") {
    const std::string path = dir_.str() + "/" + name + ".yaml";
    std::ofstream(path) << "name: " << name << "\nmodel: " << model
                        << "\ndata: {train: corpus.txt}\n"
                        << "train: {batch_size: " << batch
                        << ", seq_len: 32, grad_accum: " << grad_accum
                        << ", total_steps: 20, lr: 0.003, warmup_steps: 2" << train_extra_ << "}\n"
                        << "precision: " << precision
                        << "\nfp8: {history_len: 4, first_step_current: "
                        << (first_step_current ? "true" : "false") << fp8_extra_ << "}\n"
                        << "parallel: {scale_check_every: 1, collective_timeout_s: 60, "
                           "bucket_mb: 0.02, zero: "
                        << (zero == 3 ? "3" : zero ? "true" : "false")
                        << ", grad_reduce_dtype: " << reduce_dtype
                        << parallel << "}\n";
    return path;
  }

  static std::vector<nlohmann::json> Metrics(const std::string& path) {
    std::vector<nlohmann::json> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.contains("loss")) out.push_back(j);
    }
    return out;
  }

  std::vector<std::string> TrainArgs(const std::string& config, const std::string& tag, int steps,
                                     const std::string& extra = "") {
    std::vector<std::string> a = {FP8TRAIN_PATH,
                                  "--config",
                                  config,
                                  "--device",
                                  "cpu",
                                  "--steps",
                                  std::to_string(steps),
                                  "--metrics",
                                  dir_.str() + "/" + tag + ".jsonl",
                                  "--checkpoint-dir",
                                  dir_.str() + "/" + tag + ".ckpt"};
    if (!extra.empty()) a.push_back(extra);
    return a;
  }

  TrainRun Single(const std::string& config, const std::string& tag, int steps,
                  const std::string& extra = "") {
    TrainRun r;
    r.ranks.push_back(test::RunProcess(TrainArgs(config, tag, steps, extra), {},
                                       dir_.str() + "/" + tag + ".log", std::chrono::seconds(300)));
    r.output = r.ranks[0].output;
    r.metrics = Metrics(dir_.str() + "/" + tag + ".jsonl");
    return r;
  }

  TrainRun Mpirun(int n, const std::string& config, const std::string& tag, int steps,
                  const std::string& extra = "") {
    TrainRun r;
    auto argv = test::MpirunArgs(n);
    const auto train = TrainArgs(config, tag, steps, extra);
    argv.insert(argv.end(), train.begin(), train.end());
    r.ranks.push_back(
        test::RunProcess(argv, {}, dir_.str() + "/" + tag + ".log", std::chrono::seconds(300)));
    r.output = r.ranks[0].output;
    r.metrics = Metrics(dir_.str() + "/" + tag + ".jsonl");
    return r;
  }

  // n ranks started with the FP8RT_* environment (what fp8d will do). `kill_rank` >= 0: that
  // rank gets `sig` once rank 0 has logged step 2. `extra`: one more fp8train flag.
  TrainRun Env(int n, const std::string& config, const std::string& tag, int steps,
               int kill_rank = -1, int sig = SIGKILL, const std::string& extra = "") {
    return EnvRanks(std::vector<std::string>(static_cast<size_t>(n), config), tag, steps, kill_rank,
                    sig, extra);
  }
  // As Env, rank k reading configs[k].
  TrainRun EnvRanks(const std::vector<std::string>& configs, const std::string& tag, int steps,
                    int kill_rank = -1, int sig = SIGKILL, const std::string& extra = "") {
    const int n = static_cast<int>(configs.size());
    const int port = test::FreePort();
    return Ranks(
        configs, tag, steps,
        [&](int k) {
          return std::vector<std::string>{
              StrCat("FP8RT_RANK=", k),          StrCat("FP8RT_WORLD_SIZE=", n),
              StrCat("FP8RT_LOCAL_RANK=", k),    "FP8RT_MASTER_ADDR=127.0.0.1",
              StrCat("FP8RT_MASTER_PORT=", port), "FP8RT_JOB_ID=dp-test"};
        },
        kill_rank, sig, extra);
  }
  // n ranks as `srun --ntasks n` on this host starts them: SLURM_PROCID, SLURM_STEP_NUM_TASKS,
  // SLURM_LOCALID, the step's node list; rank 0's port from SLURM_JOB_ID and SLURM_STEP_ID.
  TrainRun SrunRanks(int n, const std::string& config, const std::string& tag, int steps) {
    const int job = 100000 + static_cast<int>(::getpid() % 50000);
    return Ranks(std::vector<std::string>(static_cast<size_t>(n), config), tag, steps, [&](int k) {
      return std::vector<std::string>{
          StrCat("SLURM_PROCID=", k),     StrCat("SLURM_STEP_NUM_TASKS=", n),
          StrCat("SLURM_NTASKS=", n),     StrCat("SLURM_LOCALID=", k),
          "SLURM_STEP_NODELIST=localhost", StrCat("SLURM_JOB_ID=", job),
          "SLURM_STEP_ID=0"};
    });
  }
  // Rank k started with env(k) (on top of this process's environment), reading configs[k].
  template <typename EnvOf>
  TrainRun Ranks(const std::vector<std::string>& configs, const std::string& tag, int steps,
                 EnvOf env, int kill_rank = -1, int sig = SIGKILL, const std::string& extra = "") {
    const int n = static_cast<int>(configs.size());
    std::vector<test::Process> procs;
    for (int k = 0; k < n; ++k) {
      procs.emplace_back(TrainArgs(configs[static_cast<size_t>(k)], tag, steps, extra), env(k),
                         dir_.str() + "/" + tag + ".rank" + std::to_string(k) + ".log");
    }
    if (kill_rank >= 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (Metrics(dir_.str() + "/" + tag + ".jsonl").size() < 2 &&
             std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      procs[static_cast<size_t>(kill_rank)].Signal(sig);
    }
    TrainRun r;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    for (auto& p : procs) {
      r.ranks.push_back(p.Wait(deadline));
      r.output += r.ranks.back().output;
    }
    r.metrics = Metrics(dir_.str() + "/" + tag + ".jsonl");
    return r;
  }

  // More fp8: keys for the configs Config writes (e.g. ", scaling: current").
  std::string fp8_extra_;
  std::string train_extra_;  // more train.* fields, e.g. ", share_gradient_memory: false"

  std::vector<float> Master(const std::string& tag) {
    auto ck = ReadCheckpoint(dir_.str() + "/" + tag + ".ckpt", -1, {});
    EXPECT_TRUE(ck.ok()) << ck.status().ToString();
    if (!ck.ok()) return {};
    auto v = CheckpointArray(*ck, "master");  // whole-model or sharded, put together
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : std::vector<float>{};
  }

  // The losses of steps from+1..to of b within rel_tol (relative) of a's.
  static void ExpectLossesNear(const TrainRun& a, const TrainRun& b, size_t from, size_t to,
                               double rel_tol) {
    ASSERT_GE(a.metrics.size(), to) << a.output;
    ASSERT_GE(b.metrics.size(), to) << b.output;
    for (size_t i = from; i < to; ++i) {
      const double la = a.metrics[i]["loss"], lb = b.metrics[i]["loss"];
      EXPECT_NEAR(la, lb, rel_tol * std::abs(la)) << "step " << i + 1;
    }
  }

  // The same run: bit-identical losses step by step and master weights (resume exactness).
  void ExpectIdentical(const TrainRun& a, const std::string& atag, const TrainRun& b,
                       const std::string& btag) {
    ASSERT_EQ(a.metrics.size(), b.metrics.size()) << a.output << b.output;
    for (size_t i = 0; i < a.metrics.size(); ++i) {
      EXPECT_EQ(a.metrics[i]["loss"].get<double>(), b.metrics[i]["loss"].get<double>())
          << "step " << i + 1;
    }
    EXPECT_EQ(Master(atag), Master(btag));
  }

  // Losses step by step within rel_tol; master weights within abs_tol.
  void ExpectSame(const TrainRun& a, const std::string& atag, const TrainRun& b,
                  const std::string& btag, double rel_tol, double abs_tol) {
    ASSERT_EQ(a.metrics.size(), b.metrics.size()) << a.output << b.output;
    for (size_t i = 0; i < a.metrics.size(); ++i) {
      const double la = a.metrics[i]["loss"], lb = b.metrics[i]["loss"];
      EXPECT_NEAR(la, lb, rel_tol * std::abs(la)) << "step " << i + 1;
    }
    const auto wa = Master(atag), wb = Master(btag);
    ASSERT_EQ(wa.size(), wb.size());
    double worst = 0;
    for (size_t i = 0; i < wa.size(); ++i) worst = std::max(worst, double{std::abs(wa[i] - wb[i])});
    EXPECT_LE(worst, abs_tol) << "largest weight difference";
    std::cout << atag << " vs " << btag << ": largest weight difference " << worst << "\n";
  }

  // 6 steps whole against 3 steps, then --resume to 6: the same losses and weights bit for bit.
  void ExpectResumeIsExact(const std::string& model) {
    const std::string cfg = Config("r", 4, model, "fp8");
    const TrainRun whole = Single(cfg, "whole", 6);
    ASSERT_EQ(whole.ranks[0].code, 0) << whole.output;
    ASSERT_EQ(Single(cfg, "parts", 3).ranks[0].code, 0);
    const TrainRun second = Single(cfg, "parts", 6, "--resume");
    ASSERT_EQ(second.ranks[0].code, 0) << second.output;
    ExpectIdentical(whole, "whole", second, "parts");
  }

  test::TempDir dir_;
  std::string corpus_;
  const std::string small_ = "{n_layer: 2, n_embd: 32, n_head: 2, block_size: 32}";
};

// ParallelRun with every config's fp8.scaling set to `mode` (current_scaling_test.cc,
// block_scaling_test.cc), and their model.
class ScalingModeRun : public ParallelRun {
 protected:
  explicit ScalingModeRun(const char* mode) : mode_(mode) {}
  void SetUp() override {
    ParallelRun::SetUp();
    fp8_extra_ = std::string(", scaling: ") + mode_;
  }
  const char* mode_;
  const std::string model_ = "{n_layer: 2, n_embd: 32, n_head: 4, block_size: 32}";
};

}  // namespace fp8rt

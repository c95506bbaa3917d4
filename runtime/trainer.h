// The fp8train loop: data -> model steps -> metrics, telemetry, checkpoints; resume and signals.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "comm/world.h"
#include "common/exit_codes.h"
#include "common/status.h"
#include "common/train_config.h"
#include "runtime/device.h"
#include "runtime/op_profile.h"

namespace fp8rt {

struct TrainOptions {
  RunConfig config;
  int64_t stop_step = -1;                  // --steps: stop after this global step (-1: total_steps)
  std::string checkpoint_dir;              // empty: no checkpoints
  // --attempt: which start of a job this run is (the node daemon's); its checkpoint commits
  // are refused once a later attempt has raised the directory's fence. -1: not fenced.
  int attempt = -1;
  bool resume = false;
  // data.train and data.val list the exact shards input confinement checked
  // (ConfineInputs(..., expand), under fp8d): opened as they are, never expanded again.
  bool inputs_confined = false;
  bool reset_fp8_history = false;
  std::optional<Precision> precision;      // --precision overrides the config
  std::ostream* metrics = nullptr;         // one JSON line per logged step; null: none
  std::ostream* progress = nullptr;        // human progress lines; null: none
  const std::atomic<bool>* stop_flag = nullptr;  // set by SIGTERM/SIGUSR1
  bool profile_ops = false;                // --profile-ops: time every op of each step
  bool memory_report = false;              // --memory-report: the memory table after step 1
  std::string attention = "auto";  // --attention: auto, cudnn, cudnn-nondeterministic, flash, gemm
  // The ranks of this job (comm/world.h); null: a world of one. Rank 0 alone writes metrics,
  // progress and checkpoints.
  comm::World* world = nullptr;
  // When the process started (fp8train's main): the start-up line's init_s counts from it.
  // Default (epoch of the clock): from RunTraining's entry.
  std::chrono::steady_clock::time_point started{};
};

struct TrainResult {
  int64_t first_step = 0;          // first step run by this invocation
  int64_t last_step = 0;           // last completed step
  bool stopped_by_signal = false;
  Precision precision = Precision::kFp32;
  std::string fallback_reason;
  std::vector<float> losses;       // one per step run
  std::vector<float> grad_norms;   // one per step run, before clipping
  std::vector<std::pair<int64_t, double>> val_losses;  // (step, val_loss) per evaluation
  std::vector<int64_t> weight_casts;
  int fp8_weights = 0;
  std::string attention_kernel;    // which kernels the attention ran on
  std::vector<OpTime> op_profile;  // with profile_ops: mean ms per step of each op
};

// Learning rate at 1-based `step`: linear warmup, then cosine decay to min_lr at total_steps.
float LearningRate(const TrainConfig& t, int64_t step);

Result<TrainResult> RunTraining(const TrainOptions& options, const DeviceInfo& device);

// fp8train --inspect-scales DIR [--step S]: prints the FP8 scale state at S (default: latest).
Status InspectScales(const std::string& checkpoint_dir, int64_t step, std::ostream& out);

}  // namespace fp8rt

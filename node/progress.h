// Training health as the node daemon sees it, from the outside: the metrics file rank 0 of a job
// appends to (one JSON line per logged step, one per held-out evaluation), read as it grows, and
// a hang detector that judges the step counter against the job's own pace: no new step for
// max(floor, k x median step time) is a hang. Process-exit supervisors (torchrun, Slurm) cannot
// see a rank that is alive but stuck.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8rt::node {

// The latest of what the metrics say.
struct Progress {
  int64_t step = -1;  // the last logged step; -1: none yet
  double loss = 0;
  double tokens_per_s = 0;
  double mfu = -1;             // -1: not reported (CPU)
  // A step line with a NaN or infinite loss (JSON null). fp8train itself stops at such a loss
  // before logging it (exit 1, "loss is nan at step N" in the rank's log); this catches writers
  // that log it.
  bool loss_not_finite = false;
  int64_t lines = 0;             // step lines read so far
  double checkpoint_s = -1;      // the longest checkpoint save seen (seconds); -1: none yet
  // The last checkpoint that failed and was gone on from (train.on_checkpoint_error: continue):
  // what failed, naming the file; cleared by a later checkpoint that commits. "": none
  std::string checkpoint_error;
  int64_t checkpoint_disk_bytes = -1;  // what the committed checkpoints take; -1: not said yet
  double val_loss = -1;          // the latest held-out loss (a val_loss line); -1: none yet
  int64_t val_step = -1;         // the step val_loss was measured at; -1: none yet
  // The trainer's phase between steps, from its {"busy": phase} lines (starting, evaluating,
  // checkpointing: written as that phase makes progress); "" once a step line follows.
  std::string busy;
  int64_t busy_lines = 0;        // busy lines read so far
  // The trainer's {"startup": ...} line after its first step: how this start went (its seconds)
  // and when that step ended (`at`: seconds since the epoch on the trainer's clock, the node's).
  struct Startup {
    int64_t step = -1;  // the first step trained; -1: no such line yet
    double init_s = -1, load_s = -1, first_step_s = -1;
    double at = 0;
  } startup;
};

// Reads the lines a metrics file gained since the last Poll (complete lines only; a half-written
// last line waits for the next Poll). A missing file is no progress yet; a file that shrank
// (rewritten) is read again from its start. Held-out evaluations (val_loss lines) and checkpoint
// timings update their own fields and are not step lines, nor are busy lines; other lines without
// a loss are skipped.
class MetricsTail {
 public:
  explicit MetricsTail(std::string path) : path_(std::move(path)) {}
  // Updates *p with the new lines; true if a new step line was read (see p->busy_lines for the
  // others).
  bool Poll(Progress* p);

 private:
  std::string path_;
  uint64_t offset_ = 0;
  std::string partial_;
};

// SIGTERM to SIGKILL for a job's ranks: `floor` (--stop-grace), or 1.5 x the longest checkpoint
// the job committed (`save_s`, seconds; <= 0: none measured yet) plus 5 s for the step in flight,
// whichever is longer (the scheduler's preemption grace scales the same way).
std::chrono::milliseconds StopGrace(std::chrono::milliseconds floor, double save_s);

struct HangOptions {
  double k = 10;                         // times the median step time. Default: 10
  // Never less than this; and, while the trainer is busy between steps (starting, evaluating,
  // checkpointing), the longest it may go without reporting progress. Default: 60 s
  std::chrono::milliseconds floor{60'000};
};

// Fed the step counter as it is seen; says when it has stopped moving for too long: k x the
// median step time, never less than the floor (the floor alone until step times give a median).
// Between steps the trainer says what it is busy with (start-up, an evaluation, a checkpoint it
// waits for) each time that makes progress: while busy, the silence since the last such report
// is judged against the floor, so a long phase that goes on is not a hang and a stopped one is.
// Before the trainer's first line nothing is judged (the rendezvous has its own timeout). The
// step after a checkpoint is allowed its save time besides (`checkpoint_after` marks the steps
// after which the job writes one).
class HangDetector {
 public:
  explicit HangDetector(HangOptions o = {}) : o_(o) {}
  using Clock = std::chrono::steady_clock;
  void Observe(int64_t step, Clock::time_point now, bool checkpoint_after = false);
  // The trainer is busy with `phase` between steps and made progress at `now`.
  void Busy(const std::string& phase, Clock::time_point now);
  // The longest silence allowed now (floor until a median exists).
  std::chrono::milliseconds Limit() const;
  // A reason ("no progress since step N for S s; the limit is ...") once the step counter has not
  // moved for longer than Limit() (plus the last checkpoint's save time after a checkpoint
  // step); nullopt otherwise.
  std::optional<std::string> Hung(Clock::time_point now) const;
  // Saves took this long (measured by the caller from the checkpoint files); default: the floor.
  void set_save_time(std::chrono::milliseconds t) { save_time_ = t; }
  // When the trainer last showed progress (a new step or a busy line); nullopt: never.
  std::optional<Clock::time_point> LastProgress() const;
  // The median seconds per step so far; 0 before two steps were seen.
  double MedianStepSeconds() const;

 private:
  HangOptions o_;
  int64_t step_ = -1;
  Clock::time_point last_change_{};
  bool checkpoint_next_ = false;
  std::string busy_;  // the phase since the last step; "": none
  Clock::time_point busy_at_{};
  bool busy_interval_ = false;  // the interval to the next step held a busy phase
  std::optional<std::chrono::milliseconds> save_time_;
  std::vector<double> step_seconds_;  // per-step times after the first step
  int64_t stride_ = 1;  // steps between the last two observations (metrics log every N steps)
};

}  // namespace fp8rt::node

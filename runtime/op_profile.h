// Per-op time inside a training step (fp8train --profile-ops): the model marks the start of each
// op on its stream; after the step's one host synchronisation the times between consecutive
// marks are added to the op that started them. On the CPU the marks are wall-clock times (the
// CPU ops are synchronous); on the GPU they are CUDA events, so profiling adds no host
// synchronisation of its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fp8rt {

struct OpTime {
  std::string op;
  double ms_per_step = 0;  // mean over the profiled steps
  double calls_per_step = 0;
};

// Accumulates (op -> total ms, calls) over steps. Names are string literals (kept by pointer).
class OpTotals {
 public:
  void Add(const char* op, double ms) {
    auto& t = totals_[op];
    t.first += ms;
    t.second += 1;
  }
  void EndStep() { ++steps_; }
  // Most expensive first.
  std::vector<OpTime> Report() const {
    std::vector<OpTime> out;
    if (steps_ == 0) return out;
    for (const auto& [op, t] : totals_) {
      out.push_back({op, t.first / steps_, static_cast<double>(t.second) / steps_});
    }
    std::sort(out.begin(), out.end(),
              [](const OpTime& a, const OpTime& b) { return a.ms_per_step > b.ms_per_step; });
    return out;
  }

 private:
  std::map<std::string, std::pair<double, int64_t>> totals_;
  int64_t steps_ = 0;
};

// The CPU version: wall-clock marks.
class HostOpProfiler {
 public:
  void Enable(bool on) { on_ = on; }
  bool enabled() const { return on_; }
  void Mark(const char* op) {
    if (on_) marks_.emplace_back(op, std::chrono::steady_clock::now());
  }
  // Closes the step: the last mark's op ends now.
  void EndStep() {
    if (!on_ || marks_.empty()) return;
    marks_.emplace_back(nullptr, std::chrono::steady_clock::now());
    for (size_t i = 0; i + 1 < marks_.size(); ++i) {
      totals_.Add(marks_[i].first, std::chrono::duration<double, std::milli>(
                                       marks_[i + 1].second - marks_[i].second)
                                       .count());
    }
    totals_.EndStep();
    marks_.clear();
  }
  std::vector<OpTime> Report() const { return totals_.Report(); }

 private:
  bool on_ = false;
  std::vector<std::pair<const char*, std::chrono::steady_clock::time_point>> marks_;
  OpTotals totals_;
};

}  // namespace fp8rt

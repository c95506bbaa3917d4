// Metrics tailing and hang detection (node/progress.h).
#include "node/progress.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/text.h"

namespace fp8rt::node {

bool MetricsTail::Poll(Progress* p) {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size < offset_) offset_ = 0, partial_.clear();  // rewritten: read again
  if (size == offset_) return false;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string chunk(size - offset_, '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  offset_ += static_cast<uint64_t>(in.gcount());
  chunk.resize(static_cast<size_t>(in.gcount()));
  partial_ += chunk;
  bool stepped = false;
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    const auto j = nlohmann::json::parse(partial_.begin() + static_cast<std::ptrdiff_t>(start),
                                         partial_.begin() + static_cast<std::ptrdiff_t>(nl),
                                         nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("checkpoint_s") &&
        j["checkpoint_s"].is_number()) {
      p->checkpoint_s = std::max(p->checkpoint_s, j["checkpoint_s"].get<double>());
      p->checkpoint_error.clear();
      if (j.contains("checkpoint_disk_bytes") && j["checkpoint_disk_bytes"].is_number_unsigned() &&
          j["checkpoint_disk_bytes"].get<uint64_t>() < (uint64_t{1} << 62)) {
        p->checkpoint_disk_bytes = j["checkpoint_disk_bytes"].get<int64_t>();
      }
      continue;
    }
    if (!j.is_discarded() && j.is_object() && j.contains("startup") && j["startup"].is_object()) {
      const auto& st = j["startup"];
      auto seconds = [&st](const char* key) {
        return st.contains(key) && st[key].is_number() && st[key].get<double>() >= 0 &&
                       st[key].get<double>() < 1e9
                   ? st[key].get<double>()
                   : -1.0;
      };
      Progress::Startup s;
      s.init_s = seconds("init_s");
      s.load_s = seconds("load_s");
      s.first_step_s = seconds("first_step_s");
      s.at = j.contains("at") && j["at"].is_number() ? j["at"].get<double>() : 0;
      s.step = j.contains("step") && j["step"].is_number_integer() ? j["step"].get<int64_t>() : -1;
      if (s.step >= 0 && s.load_s >= 0 && s.first_step_s >= 0 && s.at > 0) p->startup = s;
      continue;
    }
    if (!j.is_discarded() && j.is_object() && j.contains("busy") && j["busy"].is_string()) {
      std::string phase = j["busy"].get<std::string>();
      if (phase.size() > 64) phase.resize(64);
      p->busy = Printable(phase);
      ++p->busy_lines;
      continue;
    }
    if (!j.is_discarded() && j.is_object() && j.contains("checkpoint_error") &&
        j["checkpoint_error"].is_string()) {
      const int64_t at = j.contains("step") && j["step"].is_number_integer()
                             ? j["step"].get<int64_t>()
                             : -1;
      p->checkpoint_error = StrCat("the checkpoint of step ", at,
                                   " failed: ", j["checkpoint_error"].get<std::string>());
      if (p->checkpoint_error.size() > 1000) p->checkpoint_error.resize(1000);
      continue;
    }
    // fp8train stops at a non-finite validation loss before logging it, so a number is expected.
    if (!j.is_discarded() && j.is_object() && j.contains("val_loss")) {
      if (j["val_loss"].is_number() && j.contains("step") && j["step"].is_number_integer()) {
        p->val_loss = j["val_loss"].get<double>();
        p->val_step = j["step"].get<int64_t>();
      }
      continue;
    }
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j.contains("loss")) continue;
    if (!j["step"].is_number_integer()) continue;
    p->step = j["step"].get<int64_t>();
    // NaN and infinities are written as null by the JSON library.
    if (j["loss"].is_number()) {
      p->loss = j["loss"].get<double>();
      if (!std::isfinite(p->loss)) p->loss_not_finite = true;
    } else {
      p->loss_not_finite = true;
    }
    if (j.contains("tokens_per_s") && j["tokens_per_s"].is_number()) {
      p->tokens_per_s = j["tokens_per_s"].get<double>();
    }
    p->mfu = j.contains("mfu") && j["mfu"].is_number() ? j["mfu"].get<double>() : -1;
    ++p->lines;
    p->busy.clear();
    stepped = true;
  }
  partial_.erase(0, start);
  return stepped;
}

std::chrono::milliseconds StopGrace(std::chrono::milliseconds floor, double save_s) {
  if (!(save_s > 0)) return floor;
  return std::max(floor,
                  std::chrono::milliseconds(static_cast<int64_t>((1.5 * save_s + 5) * 1000)));
}

void HangDetector::Observe(int64_t step, Clock::time_point now, bool checkpoint_after) {
  if (step <= step_) return;
  if (step_ >= 0) {
    // Seconds per step over this interval (the time to the first step, start-up included, is
    // not a pace and is never seen here).
    const double s = std::chrono::duration<double>(now - last_change_).count() /
                     static_cast<double>(step - step_);
    if (!checkpoint_next_ && !busy_interval_) step_seconds_.push_back(s);
    stride_ = step - step_;
  }
  step_ = step;
  last_change_ = now;
  checkpoint_next_ = checkpoint_after;
  busy_.clear();
  busy_interval_ = false;
}

void HangDetector::Busy(const std::string& phase, Clock::time_point now) {
  busy_ = phase.empty() ? "busy" : phase;
  busy_at_ = now;
  busy_interval_ = true;
}

std::optional<HangDetector::Clock::time_point> HangDetector::LastProgress() const {
  if (step_ < 0 && busy_.empty()) return std::nullopt;
  if (busy_.empty()) return last_change_;
  return step_ < 0 ? busy_at_ : std::max(busy_at_, last_change_);
}

double HangDetector::MedianStepSeconds() const {
  if (step_seconds_.empty()) return 0;
  std::vector<double> v = step_seconds_;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::chrono::milliseconds HangDetector::Limit() const {
  if (step_seconds_.empty()) return o_.floor;
  // The counter is seen every `stride_` steps (the metrics' log_every): k step times per step
  // between sightings.
  const auto paced = std::chrono::milliseconds(
      static_cast<int64_t>(o_.k * MedianStepSeconds() * static_cast<double>(stride_) * 1e3));
  return std::max(o_.floor, paced);
}

std::optional<std::string> HangDetector::Hung(Clock::time_point now) const {
  if (!busy_.empty()) {
    const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - busy_at_);
    if (quiet <= o_.floor) return std::nullopt;
    return StrCat("no progress since step ", std::max<int64_t>(step_, 0), " while ", busy_,
                  " for ", quiet.count() / 1000.0, " s (the limit is the floor, ",
                  o_.floor.count() / 1000.0, " s, since the trainer last reported progress)");
  }
  if (step_ < 0) return std::nullopt;  // nothing from the trainer yet
  auto limit = Limit();
  if (checkpoint_next_) limit += save_time_.value_or(o_.floor);
  const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_change_);
  if (quiet <= limit) return std::nullopt;
  return StrCat("no progress since step ", step_, " for ", quiet.count() / 1000.0,
                " s (the limit is ", limit.count() / 1000.0, " s: max(floor ",
                o_.floor.count() / 1000.0, " s, ", o_.k, " x the median step time)",
                checkpoint_next_ ? " + the save time after a checkpoint" : "", ")");
}

}  // namespace fp8rt::node

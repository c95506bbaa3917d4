// fp8ctl's views of a job (cli/fp8ctl_view.h).
#include "cli/fp8ctl_view.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <sstream>

#include "common/status.h"
#include "common/text.h"

namespace fp8rt::fp8ctl {
namespace {

std::string Fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

std::string Duration(double s) {
  const auto t = static_cast<int64_t>(s);
  if (t < 120) return StrCat(t, "s");
  if (t < 7200) return StrCat(t / 60, "m", t % 60, "s");
  return StrCat(t / 3600, "h", (t % 3600) / 60, "m");
}

}  // namespace

std::string Str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

std::string Shown(const json& j, const char* key) { return Printable(Str(j, key)); }

json View(const json& job) {
  json v = job;
  v["name"] = job.contains("spec") ? Str(job["spec"], "name") : "";
  v["user"] = Str(job, "owner");
  // Why the precision is what it is, when the fallback policy chose it (common/precision.h).
  v["fallback_reason"] =
      Str(job, "precision_source") == "fallback" ? Str(job, "precision_reason") : "";
  const json p = job.value("progress", json::object());
  auto num = [&](const char* key) {
    return p.contains(key) && p[key].is_number() && p[key].get<double>() >= 0 ? p[key] : json(nullptr);
  };
  v["progress"] = {{"step", num("step")},         {"total", num("total_steps")},
                   {"loss", num("loss")},         {"tokens_per_s", num("tokens_per_s")},
                   {"mfu", num("mfu")},           {"eta_s", num("eta_s")},
                   {"val_loss", num("val_loss")}, {"val_step", num("val_step")},
                   {"save_s", num("save_s")},     {"checkpoint_disk_bytes", num("checkpoint_disk_bytes")}};
  if (!Str(p, "checkpoint_error").empty()) v["progress"]["checkpoint_error"] = p["checkpoint_error"];
  return v;
}

std::string ProgressLine(const json& v) {
  const json& p = v["progress"];
  if (p["step"].is_null()) return "no progress reported yet";
  const int64_t step = p["step"].get<int64_t>();
  std::string line;
  if (!p["total"].is_null() && p["total"].get<int64_t>() > 0) {
    const int64_t total = p["total"].get<int64_t>();
    const double f = std::min(1.0, static_cast<double>(step) / static_cast<double>(total));
    const int bar = 20, filled = static_cast<int>(f * bar);
    line = StrCat("[", std::string(filled, '#'), std::string(bar - filled, '-'), "] ", step, "/",
                  total, " (", static_cast<int>(f * 100), "%)");
  } else {
    line = StrCat("step ", step);
  }
  if (!p["loss"].is_null()) line += StrCat("  loss ", Fixed(p["loss"].get<double>(), 4));
  if (!p["val_loss"].is_null()) {
    line += StrCat("  val_loss ", Fixed(p["val_loss"].get<double>(), 4));
    if (!p["val_step"].is_null()) line += StrCat(" (step ", p["val_step"].get<int64_t>(), ")");
  }
  if (!p["tokens_per_s"].is_null()) {
    const double t = p["tokens_per_s"].get<double>();
    line += t >= 1000 ? StrCat("  ", Fixed(t / 1000, 1), "K tok/s") : StrCat("  ", Fixed(t, 0), " tok/s");
  }
  if (!p["mfu"].is_null() && p["mfu"].get<double>() > 0) {
    line += StrCat("  MFU ", Fixed(100 * p["mfu"].get<double>(), 1), "%");
  }
  if (!p["eta_s"].is_null()) line += StrCat("  ETA ", Duration(p["eta_s"].get<double>()));
  return line;
}

std::string Age(int64_t since) {
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const int64_t s = std::max<int64_t>(0, now - since);
  if (s < 120) return StrCat(s, "s");
  if (s < 7200) return StrCat(s / 60, "m");
  if (s < 172800) return StrCat(s / 3600, "h");
  return StrCat(s / 86400, "d");
}

bool Terminal(const std::string& state) {
  return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED";
}

// How the current attempt came to train, phase by phase (the scheduler's `timing`); "" before its
// first step.
std::string StartLine(const json& v) {
  if (!v.contains("timing") || !v["timing"].is_object()) return "";
  const json& t = v["timing"];
  const json ph = t.value("phases", json::object());
  auto sec = [&ph](const char* key) -> std::string {
    return ph.contains(key) && ph[key].is_number() ? StrCat(Fixed(ph[key].get<double>(), 1), " s")
                                                   : std::string("?");
  };
  if (!ph.contains("total_s") || !ph["total_s"].is_number()) return "";
  const bool failed = t.contains("failed_at") && t["failed_at"].is_number();
  const bool requeued = t.contains("requeued_at") && t["requeued_at"].is_number();
  std::string line = StrCat("\n  last start: attempt ", t.value("attempt", 0), " trained ",
                            sec("total_s"), " after ",
                            failed     ? "the failure"
                            : requeued ? "the requeue"
                                       : "its placement",
                            " (");
  if (failed) line += StrCat("detection ", sec("detection_s"), ", ");
  if (requeued) line += StrCat("requeue and placement ", sec("placement_s"), ", ");
  return StrCat(line, "process start ", sec("start_s"), ", checkpoint load ", sec("load_s"),
                ", first step ", sec("first_step_s"), ")");
}

void PrintStatus(const json& v, std::ostream& out) {
  out << "job " << v["id"].get<int64_t>() << " (" << Shown(v, "name") << ", " << Shown(v, "user")
      << "): " << Shown(v, "state") << "\n  reason: " << Shown(v, "reason") << "\n  precision: "
      << (Str(v, "precision").empty() ? "not decided yet" : Shown(v, "precision"));
  if (!Str(v, "fallback_reason").empty()) {
    out << " (" << Shown(v, "fallback_reason") << ")";
  } else if (!Str(v, "precision_source").empty()) {
    out << " (from the " << Shown(v, "precision_source") << ")";
  }
  std::string placement;
  for (const auto& a : v.value("placement", json::array())) {
    placement += StrCat(placement.empty() ? "" : ", ", Shown(a, "node"), " ",
                        a.value("gpus", json::array()).dump());
  }
  out << "\n  placement: " << (placement.empty() ? "-" : placement);
  if (v.contains("progress") && v["progress"].is_object() &&
      !Str(v["progress"], "checkpoint_error").empty()) {
    out << "\n  warning: " << Shown(v["progress"], "checkpoint_error")
        << " (training went on; the last good checkpoint stands)";
  }
  out << "\n  progress: " << ProgressLine(v) << "\n  restarts: " << v.value("restarts", 0);
  out << StartLine(v);
  const int64_t ck = v.value("checkpoint_step", int64_t{-1});
  out << "\n  last checkpoint: ";
  if (ck < 0) {
    out << "none";
  } else {
    out << "step " << ck;
    if (v.value("checkpoint_at", int64_t{0}) > 0) out << ", " << Age(v["checkpoint_at"].get<int64_t>()) << " ago";
    // What a preemption waits for (the scheduler's grace and victim choice use it).
    const json& p = v["progress"];
    if (p.is_object() && p.contains("save_s") && p["save_s"].is_number()) {
      out << "; a save takes " << Fixed(p["save_s"].get<double>(), 1)
          << " s to commit (what a preemption waits for)";
    }
    if (p.is_object() && p.contains("checkpoint_disk_bytes") &&
        p["checkpoint_disk_bytes"].is_number()) {
      out << "; checkpoints on disk: " << Fixed(p["checkpoint_disk_bytes"].get<double>() / 1e9, 2)
          << " GB";
    }
  }
  out << "\n";
}

}  // namespace fp8rt::fp8ctl

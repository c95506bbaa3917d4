// How fp8ctl shows a job: the server's record plus `name`, `user`, `fallback_reason` and a
// `progress` object (the --json view), a one-line progress bar, and the `status` block.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace fp8rt::fp8ctl {

using json = nlohmann::json;

// j[key] if it is a string, else "".
std::string Str(const json& j, const char* key);
// The same for a terminal: control characters made visible (common/text.h), so that text a node
// or a job sent cannot move the cursor or retitle the window.
std::string Shown(const json& j, const char* key);
// The job as fp8ctl shows it (`--json` of status and list).
json View(const json& job);
// "[#######-------------]  1200/5000 (24%)  loss 3.412  52.1K tok/s  MFU 41.0%  ETA 12m3s", or
// "no progress reported yet"; `view` is View()'s.
std::string ProgressLine(const json& view);
// "\n  last start: attempt 2 trained 9.8 s after the failure (detection 5.2 s, ...)" from the
// job's timing; "" before the attempt's first step.
std::string StartLine(const json& view);
// "45s", "3m", "2h", "4d" since `since` (seconds since the epoch).
std::string Age(int64_t since);
bool Terminal(const std::string& state);
// `fp8ctl status`'s block: state, reason, precision and why, placement, progress, restarts, last
// checkpoint and its age.
void PrintStatus(const json& view, std::ostream& out);

}  // namespace fp8rt::fp8ctl

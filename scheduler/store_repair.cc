// Setting aside unreadable store records: salvage what the bytes still say, store the replacement
// with its event and keep the bytes (see store_repair.h).
#include "scheduler/store_repair.h"

#include <nlohmann/json.hpp>

#include "common/strict_yaml.h"

namespace fp8rt::sched {

JobWrite FailedInPlaceOf(const UnreadableRecord& rec, int64_t now) {
  using json = nlohmann::json;
  Job j;
  j.id = rec.job_id;
  j.state = JobState::kFailed;
  j.submitted_at = j.updated_at = now;
  JobState from = JobState::kFailed;
  // Whatever still reads: a field that does not is left at its default.
  const json raw = json::parse(rec.raw, nullptr, /*allow_exceptions=*/false);
  auto text = [](const json& o, const char* key, size_t max) -> std::string {
    if (!o.is_object() || !o.contains(key) || !o.at(key).is_string()) return "";
    std::string s = o.at(key).get<std::string>();
    return s.size() <= max && strict::IsUtf8(s) ? s : "";
  };
  if (raw.is_object()) {
    j.owner = text(raw, "owner", 128);
    if (raw.contains("submitted_at") && raw.at("submitted_at").is_number_integer()) {
      j.submitted_at = raw.at("submitted_at").get<int64_t>();
    }
    if (auto st = ParseJobState(text(raw, "state", 32)); st.ok()) from = *st;
    if (raw.contains("spec")) {
      j.spec.name = text(raw.at("spec"), "name", 128);
      j.spec.config_path = text(raw.at("spec"), "config_path", kMaxConfigPath);
    }
  }
  // The replacement must itself be a valid spec.
  JobSpec probe = j.spec;
  if (probe.config_path.empty()) probe.config_path = "(unreadable)";
  probe.config.data.train = {"(unreadable)"};  // a config that reads back; never run
  if (!ParseJobSpec(probe.ToJson(), SpecSource::kStored).ok()) probe.name.clear();
  if (probe.name.empty()) probe.name = StrCat("unreadable-job-", rec.job_id);
  j.spec = probe;
  j.reason = StrCat("the stored record is unreadable (", rec.error,
                    "); it was set aside as corrupt/", rec.key, " and the job marked FAILED");
  const Event ev{now, j.id, from, JobState::kFailed,
                 StrCat("record set aside as corrupt/", rec.key, ": unreadable (", rec.error, ")")};
  return {j, ev};
}

Result<std::vector<std::string>> SetAsideUnreadable(JobStore* store, int64_t now,
                                                    const std::map<int64_t, Job>* in_memory) {
  std::vector<UnreadableRecord> bad;
  FP8RT_RETURN_IF_ERROR(store->ListJobs({}, &bad).status());
  FP8RT_RETURN_IF_ERROR(store->ListNodeRecords(&bad).status());
  std::vector<std::string> lines;
  for (const UnreadableRecord& rec : bad) {
    std::optional<JobWrite> replacement;
    std::string outcome;
    if (rec.job_id > 0) {
      const Job* held = nullptr;
      if (in_memory != nullptr) {
        auto it = in_memory->find(rec.job_id);
        if (it != in_memory->end()) held = &it->second;
      }
      if (held != nullptr) {
        const Job& job = *held;
        replacement = JobWrite{job, Event{now, job.id, job.state, job.state,
                                          StrCat("record rewritten from the scheduler's copy; "
                                                 "the stored one was unreadable (",
                                                 rec.error, ")")}};
        outcome = StrCat("job ", rec.job_id, " rewritten from memory");
      } else {
        replacement = FailedInPlaceOf(rec, now);
        outcome = StrCat("job ", rec.job_id, " marked FAILED");
      }
    } else {
      outcome = "the node registers again";
    }
    FP8RT_RETURN_IF_ERROR(store->SetAside(rec, replacement));
    lines.push_back(
        StrCat("set aside ", rec.key, " as corrupt/", rec.key, " (", rec.error, "): ", outcome));
  }
  return lines;
}

}  // namespace fp8rt::sched

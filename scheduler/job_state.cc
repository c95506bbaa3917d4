// Job state machine edges, transitions with their events, and the JSON the job store keeps.
#include "scheduler/job_state.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace fp8rt::sched {
namespace {

constexpr JobState kAllStates[] = {
    JobState::kPending,   JobState::kScheduled, JobState::kRunning, JobState::kPreempting,
    JobState::kPreempted, JobState::kCompleted, JobState::kFailed,  JobState::kCancelled};

bool Allowed(JobState from, JobState to) {
  using S = JobState;
  switch (from) {
    case S::kPending:  // FAILED: fallback fail with no FP8-capable placement
      return to == S::kScheduled || to == S::kCancelled || to == S::kFailed;
    case S::kScheduled:  // PENDING: node lost or launch refused before the job started
      return to == S::kRunning || to == S::kPending || to == S::kFailed || to == S::kCancelled;
    case S::kRunning:
      return to == S::kCompleted || to == S::kFailed || to == S::kCancelled ||
             to == S::kPreempting || to == S::kPending;
    case S::kPreempting:  // the job may finish or die before it acknowledges the stop
      return to == S::kPreempted || to == S::kCompleted || to == S::kFailed ||
             to == S::kCancelled || to == S::kPending;
    case S::kPreempted:
      return to == S::kPending || to == S::kCancelled;
    case S::kCompleted:
    case S::kFailed:
    case S::kCancelled:
      return false;
  }
  return false;
}

using json = nlohmann::ordered_json;

json AssignmentsToJson(const std::vector<NodeAssignment>& as) {
  json arr = json::array();
  for (const auto& a : as) arr.push_back({{"node", a.node_id}, {"gpus", a.gpus}});
  return arr;
}

}  // namespace

const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kScheduled:
      return "SCHEDULED";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kPreempting:
      return "PREEMPTING";
    case JobState::kPreempted:
      return "PREEMPTED";
    case JobState::kCompleted:
      return "COMPLETED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
  }
  return "?";
}

Result<JobState> ParseJobState(const std::string& s) {
  std::string list;
  for (JobState st : kAllStates) {
    if (s == JobStateName(st)) return st;
    list += (list.empty() ? "" : ", ") + std::string(JobStateName(st));
  }
  return Status::InvalidArgument(StrCat("job state '", s, "' is not one of: ", list));
}

bool IsTerminal(JobState s) {
  return s == JobState::kCompleted || s == JobState::kFailed || s == JobState::kCancelled;
}

Status CheckTransition(JobState from, JobState to) {
  if (Allowed(from, to)) return Status::Ok();
  std::string allowed;
  for (JobState st : kAllStates) {
    if (Allowed(from, st)) allowed += (allowed.empty() ? "" : ", ") + std::string(JobStateName(st));
  }
  return Status::FailedPrecondition(StrCat("job state transition ", JobStateName(from), " -> ",
                                           JobStateName(to), " is not allowed; from ",
                                           JobStateName(from), ": ",
                                           allowed.empty() ? "none (terminal state)" : allowed));
}

Result<Event> Transition(Job* job, JobState to, int64_t now, std::string reason) {
  const Status s = CheckTransition(job->state, to);
  if (!s.ok()) return Status(s.code(), StrCat("job ", job->id, ": ", s.message()));
  Event e{now, job->id, job->state, to, reason};
  job->state = to;
  job->updated_at = now;
  job->reason = std::move(reason);
  return e;
}

Result<Event> RequeueAfterNodeLoss(Job* job, int64_t now, const std::string& node_id) {
  return RequeueAfterLoss(job, now, StrCat("node ", node_id, " lost"));
}

Result<Event> RequeueAfterLoss(Job* job, int64_t now, const std::string& what) {
  if (job->state != JobState::kScheduled && job->state != JobState::kRunning &&
      job->state != JobState::kPreempting) {
    return Status::FailedPrecondition(StrCat("job ", job->id, " is ", JobStateName(job->state),
                                             "; only SCHEDULED, RUNNING or PREEMPTING jobs hold "
                                             "nodes that can be lost"));
  }
  const int restarts = job->restarts + 1;
  if (restarts > job->spec.max_restarts) {
    return Transition(job, JobState::kFailed, now,
                      StrCat(what, "; restart ", restarts, " would exceed max_restarts ",
                             job->spec.max_restarts));
  }
  FP8RT_ASSIGN_OR_RETURN(Event e,
                         Transition(job, JobState::kPending, now,
                                    StrCat(what, "; requeued (restart ", restarts, " of ",
                                           job->spec.max_restarts, ")")));
  job->restarts = restarts;
  job->placement.clear();
  return e;
}

AttemptPhases PhasesOf(const AttemptTiming& t) {
  AttemptPhases p;
  if (t.failed_at > 0 && t.requeued_at > 0)
    p.detection_s = std::max(0.0, t.requeued_at - t.failed_at);
  if (t.requeued_at > 0 && t.placed_at > 0)
    p.placement_s = std::max(0.0, t.placed_at - t.requeued_at);
  if (t.trained_at <= 0 || t.placed_at <= 0) return p;
  p.load_s = std::max(0.0, t.load_s);
  p.first_step_s = std::max(0.0, t.first_step_s);
  p.start_s = std::max(0.0, t.trained_at - t.placed_at - p.load_s - p.first_step_s);
  const double from = t.failed_at > 0     ? t.failed_at
                      : t.requeued_at > 0 ? t.requeued_at
                                          : t.placed_at;
  p.total_s = std::max(0.0, t.trained_at - from);
  if (t.requeued_at > 0) p.from_detection_s = std::max(0.0, t.trained_at - t.requeued_at);
  return p;
}

std::string DescribeAttempt(const AttemptTiming& t) {
  const AttemptPhases p = PhasesOf(t);
  auto s = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f s", v);
    return std::string(buf);
  };
  std::string out;
  if (t.failed_at > 0) {
    out = StrCat("training again at step ", t.step, " (attempt ", t.attempt, "), ", s(p.total_s),
                 " after the failure (", s(p.from_detection_s), " after its detection): detection ",
                 s(p.detection_s), ", requeue and placement ", s(p.placement_s), ", ");
  } else if (t.requeued_at > 0) {
    out = StrCat("training again at step ", t.step, " (attempt ", t.attempt, "), ", s(p.total_s),
                 " after the requeue: requeue and placement ", s(p.placement_s), ", ");
  } else {
    out = StrCat("first step trained at step ", t.step, " (attempt ", t.attempt, "), ",
                 s(p.total_s), " after the placement: ");
  }
  return StrCat(out, "process start ", s(p.start_s), ", checkpoint load ", s(p.load_s),
                ", first step ", s(p.first_step_s));
}

std::string JobToJson(const Job& job) {
  json j;
  j["id"] = job.id;
  j["owner"] = job.owner;
  j["spec"] = json::parse(job.spec.ToJson());
  j["state"] = JobStateName(job.state);
  j["precision"] = job.precision ? PrecisionName(*job.precision) : "";
  j["precision_source"] = job.precision ? PrecisionSourceName(job.precision_source) : "";
  j["precision_reason"] = job.precision_reason;
  j["placement"] = AssignmentsToJson(job.placement);
  j["restarts"] = job.restarts;
  j["attempt"] = job.attempt;
  j["hold"] = job.hold;
  j["checkpoint_step"] = job.checkpoint_step;
  j["checkpoint_at"] = job.checkpoint_at;
  const JobProgress& p = job.progress;
  json prog = {{"step", p.step}, {"total_steps", p.total_steps}, {"at", p.at}};
  for (const auto& [key, v] : {std::pair<const char*, double>{"loss", p.loss},
                               {"tokens_per_s", p.tokens_per_s},
                               {"mfu", p.mfu},
                               {"eta_s", p.eta_s},
                               {"step_s", p.step_s},
                               {"save_s", p.save_s},
                               {"val_loss", p.val_loss}}) {
    prog[key] = v >= 0 ? json(v) : json(nullptr);
  }
  prog["val_step"] = p.val_step >= 0 ? json(p.val_step) : json(nullptr);
  if (!p.checkpoint_error.empty()) prog["checkpoint_error"] = p.checkpoint_error;
  if (p.checkpoint_disk_bytes >= 0) prog["checkpoint_disk_bytes"] = p.checkpoint_disk_bytes;
  j["progress"] = prog;
  if (job.timing.attempt > 0) {
    const AttemptTiming& t = job.timing;
    json tj = {{"attempt", t.attempt}};
    for (const auto& [key, v] : {std::pair<const char*, double>{"failed_at", t.failed_at},
                                 {"requeued_at", t.requeued_at},
                                 {"placed_at", t.placed_at},
                                 {"trained_at", t.trained_at}}) {
      tj[key] = v > 0 ? json(v) : json(nullptr);
    }
    tj["load_s"] = t.load_s >= 0 ? json(t.load_s) : json(nullptr);
    tj["first_step_s"] = t.first_step_s >= 0 ? json(t.first_step_s) : json(nullptr);
    tj["step"] = t.step >= 0 ? json(t.step) : json(nullptr);
    // (derived, for readers: not read back)
    const AttemptPhases ph = PhasesOf(t);
    json phases = json::object();
    for (const auto& [key, v] : {std::pair<const char*, double>{"detection_s", ph.detection_s},
                                 {"placement_s", ph.placement_s},
                                 {"start_s", ph.start_s},
                                 {"load_s", ph.load_s},
                                 {"first_step_s", ph.first_step_s},
                                 {"total_s", ph.total_s},
                                 {"from_detection_s", ph.from_detection_s}}) {
      phases[key] = v >= 0 ? json(v) : json(nullptr);
    }
    tj["phases"] = std::move(phases);
    j["timing"] = std::move(tj);
  }
  j["submitted_at"] = job.submitted_at;
  j["updated_at"] = job.updated_at;
  j["reason"] = job.reason;
  return j.dump();
}

Result<Job> JobFromJson(const std::string& text) {
  Job job;
  std::string state, precision, source, spec;
  try {
    const json j = json::parse(text);
    job.id = j.at("id").get<int64_t>();
    job.owner = j.at("owner").get<std::string>();
    spec = j.at("spec").dump();
    state = j.at("state").get<std::string>();
    precision = j.at("precision").get<std::string>();
    for (const auto& a : j.at("placement")) {
      job.placement.push_back(
          {a.at("node").get<std::string>(), a.at("gpus").get<std::vector<int>>()});
    }
    job.restarts = j.at("restarts").get<int>();
    // Records written before these fields existed read with their defaults.
    job.attempt = j.value("attempt", 0);
    job.hold = j.value("hold", false);
    job.precision_reason = j.value("precision_reason", std::string());
    source = j.value("precision_source", std::string());
    job.checkpoint_step = j.at("checkpoint_step").get<int64_t>();
    job.checkpoint_at = j.value("checkpoint_at", int64_t{0});
    if (j.contains("progress")) {
      const json& p = j.at("progress");
      job.progress.step = p.at("step").get<int64_t>();
      job.progress.total_steps = p.at("total_steps").get<int64_t>();
      job.progress.at = p.at("at").get<int64_t>();
      for (const auto& [key, out] : {std::pair<const char*, double*>{"loss", &job.progress.loss},
                                     {"tokens_per_s", &job.progress.tokens_per_s},
                                     {"mfu", &job.progress.mfu},
                                     {"eta_s", &job.progress.eta_s},
                                     {"step_s", &job.progress.step_s},
                                     {"save_s", &job.progress.save_s},
                                     {"val_loss", &job.progress.val_loss}}) {
        *out = !p.contains(key) || p.at(key).is_null() ? -1 : p.at(key).get<double>();
      }
      job.progress.val_step = !p.contains("val_step") || p.at("val_step").is_null()
                                  ? -1
                                  : p.at("val_step").get<int64_t>();
      job.progress.checkpoint_error = p.value("checkpoint_error", std::string());
      job.progress.checkpoint_disk_bytes = p.value("checkpoint_disk_bytes", int64_t{-1});
    }
    if (j.contains("timing")) {
      const json& t = j.at("timing");
      job.timing.attempt = t.at("attempt").get<int>();
      auto num = [&t](const char* key, double none) {
        return !t.contains(key) || t.at(key).is_null() ? none : t.at(key).get<double>();
      };
      job.timing.failed_at = num("failed_at", 0);
      job.timing.requeued_at = num("requeued_at", 0);
      job.timing.placed_at = num("placed_at", 0);
      job.timing.trained_at = num("trained_at", 0);
      job.timing.load_s = num("load_s", -1);
      job.timing.first_step_s = num("first_step_s", -1);
      job.timing.step =
          !t.contains("step") || t.at("step").is_null() ? -1 : t.at("step").get<int64_t>();
    }
    job.submitted_at = j.at("submitted_at").get<int64_t>();
    job.updated_at = j.at("updated_at").get<int64_t>();
    job.reason = j.at("reason").get<std::string>();
  } catch (const json::exception& e) {
    return Status::Corruption(StrCat("job record is not valid: ", e.what()));
  }
  auto parsed = ParseJobSpec(spec, SpecSource::kStored);
  if (!parsed.ok()) {
    return Status::Corruption(StrCat("job ", job.id, " spec: ", parsed.status().message()));
  }
  job.spec = std::move(parsed).value();
  FP8RT_ASSIGN_OR_RETURN(job.state, ParseJobState(state));
  if (!precision.empty()) {
    FP8RT_ASSIGN_OR_RETURN(job.precision, ParsePrecision(precision));
  }
  for (PrecisionSource ps :
       {PrecisionSource::kConfig, PrecisionSource::kOverride, PrecisionSource::kFallback}) {
    if (source == PrecisionSourceName(ps)) job.precision_source = ps;
  }
  return job;
}

std::string EventToJson(const Event& e) {
  json j;
  j["time"] = e.time;
  j["job_id"] = e.job_id;
  j["from"] = JobStateName(e.from);
  j["to"] = JobStateName(e.to);
  j["reason"] = e.reason;
  return j.dump();
}

Result<Event> EventFromJson(const std::string& text) {
  Event e;
  std::string from, to;
  try {
    const json j = json::parse(text);
    e.time = j.at("time").get<int64_t>();
    e.job_id = j.at("job_id").get<int64_t>();
    from = j.at("from").get<std::string>();
    to = j.at("to").get<std::string>();
    e.reason = j.at("reason").get<std::string>();
  } catch (const json::exception& ex) {
    return Status::Corruption(StrCat("event record is not valid: ", ex.what()));
  }
  FP8RT_ASSIGN_OR_RETURN(e.from, ParseJobState(from));
  FP8RT_ASSIGN_OR_RETURN(e.to, ParseJobState(to));
  return e;
}

}  // namespace fp8rt::sched

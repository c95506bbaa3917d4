// Routes, authentication, per-token rate limiting and the job endpoints of the scheduler API.
#include "scheduler/api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "common/read_file.h"
#include "common/strict_yaml.h"
#include "scheduler/node.h"
#include "scheduler/scheduler.h"
#include "scheduler/store_repair.h"

namespace fp8rt::sched {
namespace {

using json = nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse Respond(int status, std::string content_type, std::string body) {
  HttpResponse r;
  r.status = status;
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  return r;
}

HttpResponse Json(int status, const json& j) {
  return Respond(status, "application/json", Dump(j));
}

HttpResponse Error(int status, const std::string& message) {
  return Json(status, json{{"error", message}});
}

std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    const size_t j = std::min(path.find('/', i), path.size());
    parts.push_back(path.substr(i, j - i));
    i = j;
  }
  return parts;
}

std::optional<int64_t> ParseId(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

bool IsGet(const std::string& method) { return method == "GET" || method == "HEAD"; }

// A scheduler error as the HTTP status that fits it.
HttpResponse FromStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return Error(400, s.message());
    case StatusCode::kNotFound:
      return Error(404, s.message());
    case StatusCode::kFailedPrecondition:
      return Error(409, s.message());
    default:
      return Error(500, s.ToString());
  }
}

HttpResponse MethodNotAllowed(const HttpRequest& r, const char* allowed) {
  HttpResponse res = Error(
      405, StrCat("method ", r.method, " is not allowed on ", r.target, "; allowed: ", allowed));
  res.headers["Allow"] = allowed;
  return res;
}

}  // namespace

double SystemClockSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Api::Api(Scheduler* scheduler, JobStore* store, TokenAuth auth, ApiClock clock, ApiOptions options)
    : store_(store),
      scheduler_(scheduler),
      auth_(std::move(auth)),
      clock_(std::move(clock)),
      options_(options) {}

HttpResponse Api::Handle(const HttpRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  HttpResponse r;
  try {
    r = HandleLocked(request);
  } catch (const std::exception& e) {
    r = Error(500, StrCat("internal error: ", e.what()));
  }
  ++requests_by_code_[r.status];
  return r;
}

HttpResponse Api::BodyTooLarge() {
  return TransportError(
      413, StrCat("request body is larger than the limit of ", options_.max_body_bytes, " bytes"));
}

HttpResponse Api::TransportError(int status, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_by_code_[status];
  return Error(status, message);
}

HttpResponse Api::HandleLocked(const HttpRequest& request) {
  if (request.body.size() > options_.max_body_bytes) {
    return Error(
        413, StrCat("request body of ", request.body.size(), " bytes is larger than the limit of ",
                    options_.max_body_bytes, " bytes"));
  }
  const std::string path = request.target.substr(0, request.target.find('?'));
  return Route(request, path);
}

double Api::TakeToken(const std::string& key) {
  const double now = clock_();
  if (buckets_.size() >= options_.max_rate_buckets && !buckets_.count(key)) TrimBuckets(now);
  auto [it, inserted] = buckets_.try_emplace(key, Bucket{options_.burst, now});
  Bucket& b = it->second;
  if (!inserted) {
    b.tokens =
        std::min(options_.burst, b.tokens + std::max(0.0, now - b.last) * options_.rate_per_s);
    b.last = now;
  }
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return 0;
  }
  return options_.rate_per_s > 0 ? (1 - b.tokens) / options_.rate_per_s : 3600;
}

// A bucket that has refilled is the same as a new one, so dropping it changes nothing; only if
// every bucket is busy does the longest-idle one go (its key starts again with a full bucket).
void Api::TrimBuckets(double now) {
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    const Bucket& b = it->second;
    const bool full =
        b.tokens + std::max(0.0, now - b.last) * options_.rate_per_s >= options_.burst;
    it = full ? buckets_.erase(it) : std::next(it);
  }
  while (!buckets_.empty() && buckets_.size() >= options_.max_rate_buckets) {
    auto oldest = std::min_element(
        buckets_.begin(), buckets_.end(),
        [](const auto& a, const auto& b) { return a.second.last < b.second.last; });
    buckets_.erase(oldest);
  }
}

Status Api::SetAsideUnreadable() {
  const auto now = static_cast<int64_t>(clock_());
  auto lines = scheduler_->SetAsideUnreadable(now);
  if (!lines.ok()) return lines.status();
  for (const std::string& l : *lines) std::fprintf(stderr, "fp8rt scheduler api: %s\n", l.c_str());
  return Status::Ok();
}

Result<Job> Api::GetJob(int64_t id) {
  auto got = store_->Get(id);
  if (got.ok() || got.status().code() != StatusCode::kCorruption) return got;
  FP8RT_RETURN_IF_ERROR(SetAsideUnreadable());
  return store_->Get(id);
}

HttpResponse Api::Metrics() {
  auto jobs = store_->List();
  if (!jobs.ok()) return Error(500, jobs.status().ToString());
  std::map<JobState, int64_t> by_state;
  for (JobState s :
       {JobState::kPending, JobState::kScheduled, JobState::kRunning, JobState::kPreempting,
        JobState::kPreempted, JobState::kCompleted, JobState::kFailed, JobState::kCancelled}) {
    by_state[s] = 0;
  }
  for (const Job& j : *jobs) ++by_state[j.state];
  std::ostringstream os;
  os << "# HELP fp8rt_jobs Jobs in the store, by state.\n# TYPE fp8rt_jobs gauge\n";
  for (const auto& [s, n] : by_state)
    os << "fp8rt_jobs{state=\"" << JobStateName(s) << "\"} " << n << "\n";
  {
    std::map<std::string, int64_t> nodes{{"READY", 0}, {"LOST", 0}, {"DRAINING", 0}};
    int64_t gpus = 0, busy = 0;
    for (const NodeInfo& n : scheduler_->Nodes()) {
      ++nodes[NodeStateName(n.state)];
      gpus += static_cast<int64_t>(n.gpus.size());
      for (int64_t j : n.gpu_job) busy += j != kNoJob;
    }
    os << "# HELP fp8rt_nodes Registered nodes, by state.\n# TYPE fp8rt_nodes gauge\n";
    for (const auto& [st, n] : nodes) os << "fp8rt_nodes{state=\"" << st << "\"} " << n << "\n";
    os << "# HELP fp8rt_gpus GPUs of registered nodes, and those held by jobs.\n"
          "# TYPE fp8rt_gpus gauge\n"
       << "fp8rt_gpus{use=\"total\"} " << gpus << "\nfp8rt_gpus{use=\"busy\"} " << busy << "\n";
  }
  os << "# HELP fp8rt_api_rate_limit_buckets Rate-limit buckets held (one per principal).\n"
        "# TYPE fp8rt_api_rate_limit_buckets gauge\n"
     << "fp8rt_api_rate_limit_buckets " << buckets_.size() << "\n";
  os << "# HELP fp8rt_api_requests_total API requests answered, by HTTP status code.\n"
        "# TYPE fp8rt_api_requests_total counter\n";
  for (const auto& [code, n] : requests_by_code_) {
    os << "fp8rt_api_requests_total{code=\"" << code << "\"} " << n << "\n";
  }
  return Respond(200, "text/plain; version=0.0.4", os.str());
}

HttpResponse Api::Route(const HttpRequest& req, const std::string& path) {
  if (path == "/v1/health") {
    if (!IsGet(req.method)) return MethodNotAllowed(req, "GET, HEAD");
    return Json(200, json{{"status", "ok"}});
  }
  if (path == "/metrics") {
    if (!IsGet(req.method)) return MethodNotAllowed(req, "GET, HEAD");
    return Metrics();
  }

  const std::vector<std::string> parts = SplitPath(path);
  if (parts.size() >= 2 && parts[0] == "v1" && parts[1] == "nodes") {
    return RouteNodes(req, path, parts);
  }
  // /v1/jobs[/{id}[/cancel|/preempt|/resume|/events|/logs]]
  if (parts.size() < 2 || parts.size() > 4 || parts[0] != "v1" || parts[1] != "jobs") {
    return Error(404, StrCat("no route for ", req.method, " ", path));
  }
  std::optional<int64_t> id;
  if (parts.size() >= 3) {
    id = ParseId(parts[2]);
    if (!id) return Error(404, StrCat("job id '", parts[2], "' is not a positive integer"));
  }
  const std::string action = parts.size() == 4 ? parts[3] : "";
  const bool post_action = action == "cancel" || action == "preempt" || action == "resume";
  if (!action.empty() && !post_action && action != "events" && action != "logs") {
    return Error(404, StrCat("no route for ", req.method, " ", path));
  }
  const char* allowed = parts.size() == 2 ? "GET, HEAD, POST" : post_action ? "POST" : "GET, HEAD";
  const bool method_ok = parts.size() == 2 ? (IsGet(req.method) || req.method == "POST")
                         : post_action     ? req.method == "POST"
                                           : IsGet(req.method);
  if (!method_ok) return MethodNotAllowed(req, allowed);

  Principal p;
  if (auto refused = Authorize(req, "", /*jobs_api=*/true, &p)) return *refused;

  if (!id) return IsGet(req.method) ? ListJobs(p) : SubmitJob(req, p);

  auto got = GetJob(*id);
  if (!got.ok()) {
    if (got.status().code() == StatusCode::kNotFound) {
      return Error(404, StrCat("job ", *id, " not found"));
    }
    return Error(500, got.status().ToString());
  }
  Job job = std::move(got).value();
  if (p.role != Role::kAdmin && job.owner != p.name) {
    return Error(403, StrCat("job ", *id, " belongs to another user"));
  }
  if (action.empty()) return Respond(200, "application/json", JobToJson(job));
  if (action == "events") {
    auto events = store_->Events(*id);
    if (!events.ok()) return Error(500, events.status().ToString());
    json arr = json::array();
    for (const Event& e : *events) arr.push_back(json::parse(EventToJson(e)));
    return Json(200, json{{"job_id", *id}, {"events", arr}});
  }
  if (action == "logs") return Logs(req, *id);
  if (action == "preempt" || action == "resume") {
    bool hold = false;
    if (action == "preempt" && !req.body.empty()) {
      auto body = strict::Parse(req.body, "preempt request");
      Status read = body.ok() ? strict::ReadFields(*body, "", {{"hold", strict::Bool(&hold)}})
                              : body.status();
      if (!read.ok()) return Error(400, read.message());
    }
    const auto now = static_cast<int64_t>(clock_());
    auto done = action == "preempt" ? scheduler_->Preempt(*id, p.name, hold, now)
                                    : scheduler_->Resume(*id, p.name, now);
    if (!done.ok()) return FromStatus(done.status());
    return Respond(200, "application/json", JobToJson(*done));
  }
  // cancel
  auto cancelled = scheduler_->Cancel(*id, p.name, static_cast<int64_t>(clock_()));
  if (!cancelled.ok()) return FromStatus(cancelled.status());
  return Respond(200, "application/json", JobToJson(*cancelled));
}

HttpResponse Api::Logs(const HttpRequest& req, int64_t id) {
  int rank = 0;
  int64_t tail = -1;
  const size_t q = req.target.find('?');
  std::string query = q == std::string::npos ? "" : req.target.substr(q + 1);
  for (size_t start = 0; start < query.size();) {
    const size_t amp = std::min(query.find('&', start), query.size());
    const std::string kv = query.substr(start, amp - start);
    start = amp + 1;
    const size_t eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : kv.substr(eq + 1);
    const std::optional<int64_t> n = ParseId(value);  // a positive integer
    if (key == "rank" && (value == "0" || (n && *n < 1'000'000))) {
      rank = value == "0" ? 0 : static_cast<int>(*n);
    } else if (key == "tail" && (value == "0" || n)) {
      tail = value == "0" ? 0 : *n;
    } else {
      return Error(400, StrCat("query '", kv, "': expected rank=R and tail=N (non-negative integers)"));
    }
  }
  auto ranks = store_->LogRanks(id);
  if (!ranks.ok()) return Error(500, ranks.status().ToString());
  auto text = store_->Log(id, rank);
  if (!text.ok()) return Error(500, text.status().ToString());
  std::string out = std::move(text).value();
  if (tail >= 0) {
    size_t at = out.size();
    if (!out.empty() && out.back() == '\n') --at;
    for (int64_t lines = 0; at > 0 && lines < tail; ) {
      --at;
      if (out[at] == '\n' && ++lines == tail) {
        ++at;
        break;
      }
    }
    out = tail == 0 ? "" : out.substr(at);
  }
  return Json(200, json{{"job_id", id}, {"rank", rank}, {"ranks", *ranks}, {"text", out}});
}

HttpResponse Api::ListJobs(const Principal& p) {
  JobFilter filter;
  if (p.role != Role::kAdmin) filter.owner = p.name;
  std::vector<UnreadableRecord> unreadable;
  auto jobs = store_->ListJobs(filter, &unreadable);
  if (jobs.ok() && !unreadable.empty()) {
    // Set aside (the job then lists as FAILED, saying why), then list again.
    if (const Status s = SetAsideUnreadable(); !s.ok()) return Error(500, s.ToString());
    jobs = store_->List(filter);
  }
  if (!jobs.ok()) return Error(500, jobs.status().ToString());
  json arr = json::array();
  for (const Job& j : *jobs) arr.push_back(json::parse(JobToJson(j)));
  return Json(200, json{{"jobs", arr}});
}

// The training config of a config_path spec, read once, now: the path resolved against the
// config directory, confined to the config roots and opened by its real path; its relative
// inputs are relative to the file's directory, as for fp8train --config.
Status Api::LoadConfigPath(JobSpec* spec) const {
  std::filesystem::path given(spec->config_path);
  if (given.is_relative()) given = std::filesystem::path(options_.config_dir) / given;
  FP8RT_ASSIGN_OR_RETURN(const std::string real,
                         ConfineInput("config_path", given.lexically_normal().string(),
                                      InputKind::kFile, options_.config_inputs));
  FP8RT_ASSIGN_OR_RETURN(
      const std::string text,
      ReadRegularFile(real, "config_path", {.max_bytes = kMaxConfigBytes, .no_follow = true}));
  auto config = ParseRunConfig(text, "config");
  if (!config.ok()) {
    return Status::InvalidArgument(
        StrCat("config_path '", spec->config_path, "': ", config.status().message()));
  }
  config->ResolveInputs(given.parent_path().string());
  spec->config = std::move(config).value();
  return spec->Validate();
}

// POST /v1/jobs: validated whole before anything is stored (the spec, its config, where its files
// lie, whether any node could ever run it); the job and its submit event are durable before the
// 201 goes out.
HttpResponse Api::SubmitJob(const HttpRequest& req, const Principal& p) {
  if (!strict::IsUtf8(req.body)) return Error(400, "request body is not valid UTF-8");
  auto spec = ParseJobSpec(req.body);
  if (!spec.ok()) return Error(400, spec.status().message());
  if (!spec->config_path.empty()) {
    if (const Status s = LoadConfigPath(&*spec); !s.ok()) return Error(400, s.message());
  } else {
    spec->config.ResolveInputs(options_.config_dir);
  }
  if (const Status s = ConfineInputs(&spec->config, options_.data_inputs); !s.ok()) {
    return Error(400, StrCat("config: ", s.message()));
  }
  if (p.role != Role::kAdmin && spec->priority > options_.max_user_priority) {
    return Error(403,
                 StrCat("priority = ", spec->priority, " is above ", options_.max_user_priority,
                        ", the most a user may set; an admin token may set up to ", kMaxPriority));
  }
  if (const Status s = scheduler_->CheckFeasible(*spec); !s.ok()) {
    return Error(400, StrCat("no node could ever run this job: ", s.message()));
  }
  const auto now = static_cast<int64_t>(clock_());
  auto job = scheduler_->Submit(p.name, std::move(spec).value(), now);
  if (!job.ok()) return FromStatus(job.status());
  return Respond(201, "application/json", JobToJson(*job));
}

std::optional<HttpResponse> Api::Authorize(const HttpRequest& req, const std::string& node_id,
                                           bool jobs_api, Principal* who) {
  const auto header = req.headers.find("authorization");
  auto p = auth_.Authenticate(header == req.headers.end() ? "" : header->second);
  if (!p.ok()) return Error(401, p.status().message());
  *who = *p;
  if (jobs_api && who->role == Role::kNode) {
    return Error(403, StrCat("node '", who->name, "': node tokens may not use the jobs API"));
  }
  // Limits are per principal. One node token is normally shared by every daemon, so each
  // registered node id has a bucket of its own; any other id (made up, or registering) shares
  // the token's, so inventing ids buys nothing and the table stays bounded.
  const bool own_bucket =
      who->role == Role::kNode && !node_id.empty() && scheduler_->HasNode(node_id);
  const std::string key = own_bucket ? StrCat(who->token_sha256, "/", node_id) : who->token_sha256;
  if (const double wait = TakeToken(key); wait > 0) {
    HttpResponse res = Error(
        429, StrCat("rate limit exceeded: ", options_.rate_per_s,
                    " requests per second per token (burst ", options_.burst, "); retry later"));
    res.headers["Retry-After"] = std::to_string(static_cast<int64_t>(std::ceil(wait)));
    return res;
  }
  return std::nullopt;
}

// /v1/nodes (GET), /v1/nodes/register (POST), /v1/nodes/{id} (GET), /v1/nodes/{id}/heartbeat
// (POST), /v1/nodes/{id}/drain and /undrain (POST, admin). Node tokens are shared by daemons, so
// their rate-limit bucket is per node id.
HttpResponse Api::RouteNodes(const HttpRequest& req, const std::string& path,
                             const std::vector<std::string>& parts) {
  const bool list = parts.size() == 2;
  const bool reg = parts.size() == 3 && parts[2] == "register";
  const bool get = parts.size() == 3 && !reg;
  const bool beat = parts.size() == 4 && parts[3] == "heartbeat";
  const bool drain = parts.size() == 4 && (parts[3] == "drain" || parts[3] == "undrain");
  if (!list && !reg && !get && !beat && !drain) {
    return Error(404, StrCat("no route for ", req.method, " ", path));
  }
  const bool post = reg || beat || drain;
  if (post ? req.method != "POST" : !IsGet(req.method)) {
    return MethodNotAllowed(req, post ? "POST" : "GET, HEAD");
  }
  Principal p;
  const std::string node_id = parts.size() >= 3 ? parts[2] : "";
  if (auto refused = Authorize(req, node_id, /*jobs_api=*/false, &p)) return *refused;
  if (beat && p.role != Role::kNode) {
    return Error(403, StrCat(RoleName(p.role), " '", p.name, "': only node tokens may heartbeat"));
  }
  if (reg && p.role == Role::kUser) {
    return Error(403, StrCat("user '", p.name, "': only node or admin tokens may register nodes"));
  }
  if (drain && p.role != Role::kAdmin) {
    return Error(403, StrCat(RoleName(p.role), " '", p.name, "': only admin tokens may ",
                             parts[3], " nodes"));
  }
  const auto now = static_cast<int64_t>(clock_());
  if (drain) {
    std::string reason;
    if (parts[3] == "drain" && !req.body.empty()) {
      auto body = strict::Parse(req.body, "drain request");
      Status read = body.ok() ? strict::ReadFields(*body, "", {{"reason", strict::String(&reason)}})
                              : body.status();
      if (!read.ok()) return Error(400, read.message());
    }
    auto n = scheduler_->DrainNode(node_id, parts[3] == "drain", reason, p.name, now);
    if (!n.ok()) return FromStatus(n.status());
    return Json(200, json{{"node", json::parse(NodeToJson(*n, true))}});
  }
  if (list) {
    json arr = json::array();
    for (const NodeInfo& n : scheduler_->Nodes()) arr.push_back(json::parse(NodeToJson(n, true)));
    return Json(200, json{{"nodes", arr}});
  }
  if (get) {
    auto n = scheduler_->Node(node_id);
    if (!n) return Error(404, StrCat("node ", node_id, " is not registered"));
    return Respond(200, "application/json", NodeToJson(*n, true));
  }
  if (reg) {
    auto r = ParseNodeRegistration(req.body);
    if (!r.ok()) return Error(400, r.status().message());
    auto n = scheduler_->RegisterNode(*r, now);
    if (!n.ok()) return FromStatus(n.status());
    return Json(200, json{{"node", json::parse(NodeToJson(*n, true))},
                          {"heartbeat_interval_s", scheduler_->options().heartbeat_interval_s},
                          {"heartbeat_timeout_s", scheduler_->options().heartbeat_timeout_s}});
  }
  auto hb = ParseHeartbeat(req.body);
  if (!hb.ok()) return Error(400, hb.status().message());
  auto commands = scheduler_->Heartbeat(node_id, *hb, now);
  if (!commands.ok()) return FromStatus(commands.status());
  json arr = json::array();
  for (const NodeCommand& c : *commands) arr.push_back(json::parse(CommandToJson(c)));
  return Json(200, json{{"commands", arr}});
}

}  // namespace fp8rt::sched

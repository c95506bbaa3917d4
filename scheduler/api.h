// The scheduler's HTTP API as a transport-free handler: HttpRequest -> HttpResponse over a
// Scheduler (and its JobStore), TokenAuth and an injected clock, so every route and error is
// tested without sockets, on the one code path fp8d runs.
// net/http_server.h puts it on a Boost.Beast server; docs/API.md documents the routes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/input_paths.h"
#include "common/status.h"
#include "net/http.h"
#include "scheduler/auth.h"
#include "scheduler/store.h"

namespace fp8rt::sched {

class Scheduler;

using HttpRequest = net::HttpRequest;
using HttpResponse = net::HttpResponse;

struct ApiOptions {
  size_t max_body_bytes = 1 << 20;  // larger request bodies get 413. Default: 1 MiB
  // Rate limits are per authenticated principal (token); a node token has one bucket per
  // registered node id besides (made-up ids share the token's). Default: 20 per second
  double rate_per_s = 20;
  double burst = 40;  // bucket size. Default: 40 requests
  // Most buckets kept; past it, full (idle) buckets and then the longest-idle are dropped.
  // Default: 10000
  size_t max_rate_buckets = 10000;
  // The highest priority a user token may give a job (admins: up to kMaxPriority). Default: 100
  int max_user_priority = 100;
  // Where a job's files may lie (common/input_paths.h; docs/API.md, "Who may read what"): a
  // config_path is resolved against config_dir and must lie under config_inputs' roots (the
  // config directory and fp8d --config-root); the training config's inputs (relative ones in an
  // inline config resolved against config_dir too) under data_inputs' (fp8d --data-root).
  // Defaults: none, which refuses every path
  std::string config_dir;
  InputRules config_inputs{.roots = {}, .private_paths = {}, .roots_name = kConfigRootsName};
  InputRules data_inputs;
};

// Seconds since the epoch (fractions count for the rate limiter).
using ApiClock = std::function<double()>;
double SystemClockSeconds();

class Api final : public net::HttpHandler {
 public:
  // `scheduler` and its `store` must outlive the Api. Handle may be called from several threads.
  // Every change goes through the scheduler (so the scheduling loop sees it); reads come from the
  // store.
  Api(Scheduler* scheduler, JobStore* store, TokenAuth auth, ApiClock clock = SystemClockSeconds,
      ApiOptions options = {});

  // Never throws; every error is a JSON body {"error": "..."} with its status code.
  HttpResponse Handle(const HttpRequest& request) override;
  size_t max_body_bytes() const override { return options_.max_body_bytes; }
  // The 413 answer for a body the transport refused before reading it all (counted in /metrics
  // like any other answer).
  HttpResponse BodyTooLarge() override;
  // An answer the transport gives on its own (414 URL too long, 431 headers too large), as a
  // JSON error counted in /metrics like any other.
  HttpResponse TransportError(int status, const std::string& message) override;

  const ApiOptions& options() const { return options_; }

 private:
  struct Bucket {
    double tokens = 0;
    double last = 0;
  };

  HttpResponse HandleLocked(const HttpRequest& request);
  HttpResponse Route(const HttpRequest& request, const std::string& path);
  HttpResponse RouteNodes(const HttpRequest& request, const std::string& path,
                          const std::vector<std::string>& parts);
  // Authenticates, refuses node tokens on the jobs API, and rate-limits (bucket: the token; for
  // node tokens, the token and `node_id`); an error response if refused.
  std::optional<HttpResponse> Authorize(const HttpRequest& request, const std::string& node_id,
                                        bool jobs_api, Principal* who);
  HttpResponse Metrics();
  // Takes one request's token from the key's bucket: 0 if there was one, else the seconds until
  // there will be. Keeps the table within options_.max_rate_buckets.
  double TakeToken(const std::string& key);
  void TrimBuckets(double now);
  HttpResponse ListJobs(const Principal& p);
  HttpResponse Logs(const HttpRequest& req, int64_t id);
  HttpResponse SubmitJob(const HttpRequest& req, const Principal& p);
  // Reads a config_path spec's training config into spec->config (400s for every refusal).
  Status LoadConfigPath(JobSpec* spec) const;
  // Get that sets aside a record that does not read back, then reads again.
  Result<Job> GetJob(int64_t id);
  Status SetAsideUnreadable();

  JobStore* store_;
  Scheduler* scheduler_;
  TokenAuth auth_;
  ApiClock clock_;
  ApiOptions options_;

  std::mutex mu_;  // one request at a time: the store's read-modify-write steps stay atomic
  std::map<std::string, Bucket> buckets_;    // by token hash
  std::map<int, int64_t> requests_by_code_;  // for /metrics
};

}  // namespace fp8rt::sched

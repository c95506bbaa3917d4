// The scheduler's HTTP API as a transport-free handler: HttpRequest -> HttpResponse over an
// injected JobStore, TokenAuth, clock and (optionally) Scheduler, so every route and error is
// tested without sockets.
// scheduler/http_server.h puts it on a Boost.Beast server; docs/API.md documents the routes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/auth.h"
#include "scheduler/store.h"

namespace fp8rt::sched {

class Scheduler;

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // "/v1/jobs/3?x=y" (the query is ignored)
  std::map<std::string, std::string> headers;  // names in lower case ("authorization")
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;  // extra headers: Allow (405), Retry-After (429)
};

struct ApiOptions {
  size_t max_body_bytes = 1 << 20;  // larger request bodies get 413. Default: 1 MiB
  double rate_per_s = 20;           // per-token token bucket refill rate. Default: 20 per second
  double burst = 40;                // per-token bucket size. Default: 40 requests
};

// Seconds since the epoch (fractions count for the rate limiter).
using ApiClock = std::function<double()>;
double SystemClockSeconds();

class Api {
 public:
  // `store` (and `scheduler`, if given) must outlive the Api. Handle may be called from several
  // threads. With a scheduler, submissions and cancels go through it (so the scheduling loop
  // sees them) and the /v1/nodes routes exist; without one, jobs only wait in the store and
  // /v1/nodes answers 503.
  Api(JobStore* store, TokenAuth auth, ApiClock clock = SystemClockSeconds, ApiOptions options = {},
      Scheduler* scheduler = nullptr);

  // Never throws; every error is a JSON body {"error": "..."} with its status code.
  HttpResponse Handle(const HttpRequest& request);

  // The 413 answer for a body the transport refused before reading it all (counted in /metrics
  // like any other answer).
  HttpResponse BodyTooLarge();

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
  // there will be.
  double TakeToken(const std::string& key);

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

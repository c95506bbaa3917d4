// fp8d's command line and its --scheduler mode: job store, scheduling loop and HTTP API over the
// data directory, until SIGTERM/SIGINT.
#include "cli/fp8d.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/atomic_file.h"
#include "net/http_server.h"
#include "scheduler/api.h"
#include "scheduler/auth.h"
#include "scheduler/scheduler.h"
#include "scheduler/store.h"

namespace fp8rt::fp8d {
namespace {

namespace fs = std::filesystem;
using namespace fp8rt::sched;
using net::HttpServer;
using net::HttpServerOptions;

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status WritePortFile(const std::string& path, uint16_t port) {
  return WriteFileAtomic(path, StrCat(port, "\n"));
}

void LogTick(const TickResult& r) {
  if (!r.scheduled.empty()) spdlog::info("scheduled {} job(s)", r.scheduled.size());
  if (!r.preempting.empty()) spdlog::info("preempting {} job(s)", r.preempting.size());
  if (!r.requeued.empty()) spdlog::info("requeued {} job(s)", r.requeued.size());
  if (!r.failed.empty()) spdlog::info("failed {} job(s)", r.failed.size());
  for (const auto& n : r.lost_nodes) spdlog::warn("node {} lost (no heartbeat)", n);
}

}  // namespace

Status RunScheduler(const Options& o) {
  auto auth = TokenAuth::Load(o.tokens_file);
  if (!auth.ok()) return Status::InvalidArgument(auth.status().message());
  std::error_code ec;
  fs::create_directories(o.data_dir, ec);
  if (ec) {
    return Status::IOError(StrCat("--data-dir ", o.data_dir, ": cannot create: ", ec.message()));
  }
  FP8RT_ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store,
                         OpenRocksDbJobStore((fs::path(o.data_dir) / "jobs").string()));
  SchedulerOptions so;
  so.heartbeat_timeout_s = o.heartbeat_timeout_s;
  so.heartbeat_interval_s = o.heartbeat_interval_s;
  so.preemption_grace_s = o.preemption_grace_s;
  FP8RT_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                         Scheduler::Open(store.get(), so, NowSeconds()));
  for (const std::string& line : scheduler->set_aside_at_open()) {
    spdlog::warn("job store: {}", line);
  }
  ApiOptions ao;
  ao.rate_per_s = o.rate_per_s;
  ao.burst = o.rate_burst;
  ao.max_user_priority = o.max_user_priority;
  ao.config_roots = o.config_roots;
  Api api(store.get(), std::move(auth).value(), SystemClockSeconds, ao, scheduler.get());
  HttpServerOptions ho;
  ho.address = o.bind;
  ho.threads = o.threads;
  ho.tls_cert_file = o.tls_cert;
  ho.tls_key_file = o.tls_key;
  ho.max_connections = o.max_connections;
  HttpServer server(&api, ho);
  FP8RT_RETURN_IF_ERROR(server.Start(o.port));
  TickLoop loop(scheduler.get(), std::chrono::milliseconds(o.tick_interval_ms), NowSeconds, LogTick,
                [](const Status& s) { spdlog::error("scheduling tick failed: {}", s.ToString()); });
  loop.Start();
  if (!o.port_file.empty()) {
    const Status s = WritePortFile(o.port_file, server.port());
    if (!s.ok()) {
      loop.Stop();
      server.Stop();
      return s;
    }
  }
  std::cout << "fp8d: scheduler listening on " << (o.tls_cert.empty() ? "http" : "https") << "://"
            << o.bind << ":" << server.port() << " (data dir " << o.data_dir << ")" << std::endl;

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("{}: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  // The server first, so no request is answered after the loop stops; every acknowledged change
  // is already durable, so nothing else needs flushing.
  server.Stop();
  loop.Stop();
  return Status::Ok();
}

int Main(int argc, char** argv) {
  // Blocked before any thread starts, so every thread inherits the mask and RunScheduler's
  // sigwait is the only place these signals arrive.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  CLI::App app{"fp8d: the fp8rt daemon (scheduler, node daemon, or both in one process)"};
  Options o;
  bool scheduler = false, standalone = false, daemon = false;
  auto* f_sched = app.add_flag("--scheduler", scheduler,
                               "run the scheduler: job store, scheduling loop and HTTP API");
  auto* f_alone = app.add_flag("--standalone", standalone,
                               "scheduler and node daemon in one process (not implemented yet)");
  auto* f_daemon = app.add_flag("--daemon", daemon, "run the node daemon (not implemented yet)");
  f_sched->excludes(f_alone)->excludes(f_daemon);
  f_alone->excludes(f_daemon);
  app.add_option("--port", o.port, "TCP port of the HTTP API; 0 picks a free one")
      ->check(CLI::Range(0, 65535));
  app.add_option("--bind", o.bind, "address to listen on (default 127.0.0.1)");
  app.add_option("--data-dir", o.data_dir, "directory of the job store (created if missing)");
  app.add_option("--tokens", o.tokens_file, "tokens file (YAML, SHA-256 hashes; docs/API.md)");
  app.add_option("--tls-cert", o.tls_cert, "PEM certificate chain: serve HTTPS (with --tls-key)");
  app.add_option("--tls-key", o.tls_key, "PEM private key for --tls-cert");
  app.add_option("--heartbeat-timeout", o.heartbeat_timeout_s,
                 "seconds without a heartbeat before a node is lost (default 30)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  app.add_option("--heartbeat-interval", o.heartbeat_interval_s,
                 "seconds between heartbeats, told to daemons (default 5)")
      ->check(CLI::Range(int64_t{1}, int64_t{3600}));
  app.add_option("--preemption-grace", o.preemption_grace_s,
                 "seconds a preempted job has to checkpoint before it is stopped (default 60)")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}));
  app.add_option("--tick-interval-ms", o.tick_interval_ms,
                 "the scheduling loop runs after every change and at least this often (default "
                 "200)")
      ->check(CLI::Range(1, 60000));
  app.add_option("--rate-limit", o.rate_per_s,
                 "API requests per second per token (and per registered node id for node "
                 "tokens; default 20)")
      ->check(CLI::Range(0.001, 1e6));
  app.add_option("--rate-burst", o.rate_burst, "requests a token may burst (default 40)")
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--threads", o.threads, "HTTP I/O threads (default 2)")->check(CLI::Range(1, 64));
  app.add_option("--max-connections", o.max_connections,
                 "open HTTP connections at most; more wait in the listen backlog (default 0: the "
                 "open-files limit less 64, 16..1024)")
      ->check(CLI::Range(size_t{0}, size_t{1} << 20));
  app.add_option("--max-user-priority", o.max_user_priority,
                 "highest job priority a user token may set; admins may set up to 1000000 "
                 "(default 100)")
      ->check(CLI::Range(-1'000'000, 1'000'000));
  app.add_option("--config-root", o.config_roots,
                 "absolute directory under which a job's absolute config_path may lie "
                 "(repeatable; default: relative paths only)");
  app.add_option("--port-file", o.port_file,
                 "write the bound port to this file once serving (for --port 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (standalone || daemon) {
    std::cerr << "fp8d: " << (standalone ? "--standalone" : "--daemon")
              << " is not implemented yet (it comes with the node daemon); only --scheduler runs "
                 "today\n";
    return kExitUsage;
  }
  if (!scheduler) {
    std::cerr << "fp8d: choose a mode: --scheduler (--standalone and --daemon are not "
                 "implemented yet)\n"
              << app.help();
    return kExitUsage;
  }
  std::string missing;
  if (app.count("--port") == 0) missing += " --port";
  if (o.data_dir.empty()) missing += " --data-dir";
  if (o.tokens_file.empty()) missing += " --tokens";
  if (!missing.empty()) {
    std::cerr << "fp8d: --scheduler needs" << missing << "\n";
    return kExitUsage;
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    std::cerr << "fp8d: --tls-cert and --tls-key go together (one is missing)\n";
    return kExitUsage;
  }
  const Status s = RunScheduler(o);
  if (!s.ok()) {
    std::cerr << "fp8d: " << s.ToString() << "\n";
    return s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitError;
  }
  return kExitOk;
}

}  // namespace fp8rt::fp8d

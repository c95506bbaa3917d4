// fp8d's command line and its scheduler half: job store, scheduling loop and HTTP API over the
// data directory (--scheduler, and --standalone with cli/fp8d_node.cc's node half).
#include "cli/fp8d.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/local_daemon.h"
#include "common/atomic_file.h"
#include "common/version.h"
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


void LogTick(const TickResult& r) {
  if (!r.scheduled.empty()) spdlog::info("scheduled {} job(s)", r.scheduled.size());
  if (!r.preempting.empty()) spdlog::info("preempting {} job(s)", r.preempting.size());
  if (!r.requeued.empty()) spdlog::info("requeued {} job(s)", r.requeued.size());
  if (!r.failed.empty()) spdlog::info("failed {} job(s)", r.failed.size());
  for (const auto& n : r.lost_nodes) spdlog::warn("node {} lost (no heartbeat)", n);
}

}  // namespace

struct SchedulerService::Parts {
  std::unique_ptr<JobStore> store;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<Api> api;
  std::unique_ptr<HttpServer> server;
  std::unique_ptr<TickLoop> loop;
};

SchedulerService::SchedulerService(std::unique_ptr<Parts> p) : p_(std::move(p)) {}
SchedulerService::~SchedulerService() { Stop(); }
uint16_t SchedulerService::port() const { return p_->server->port(); }

void SchedulerService::Stop() {
  // The server first, so no request is answered after the loop stops; every acknowledged change
  // is already durable, so nothing else needs flushing.
  if (p_->server) p_->server->Stop();
  if (p_->loop) p_->loop->Stop();
}

InputRoots InputRootsOf(const Options& o) {
  InputRoots r;
  std::error_code ec;
  r.config_dir = fs::absolute(o.config_dir.empty() ? fs::current_path(ec) : fs::path(o.config_dir))
                     .lexically_normal()
                     .string();
  r.config_inputs.roots = {r.config_dir};
  for (const std::string& root : o.config_roots) r.config_inputs.roots.push_back(root);
  r.config_inputs.roots_name = kConfigRootsName;
  r.data_inputs.roots = o.data_roots.empty() ? r.config_inputs.roots : o.data_roots;
  std::vector<std::string> state;
  if (!o.data_dir.empty()) state.push_back(fs::absolute(o.data_dir).string());
  state.push_back(fs::absolute(o.checkpoint_root.empty() ? fs::path(o.data_dir) / "checkpoints"
                                                         : fs::path(o.checkpoint_root))
                      .string());
  for (const std::string& f : {o.tokens_file, o.token_file}) {
    if (!f.empty()) state.push_back(fs::absolute(f).string());
  }
  r.config_inputs.private_paths = r.data_inputs.private_paths = state;
  return r;
}

Status CheckTokenFileMode(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::Ok();  // reading it will say why
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(StrCat(what, " ", path, " is not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    return Status::InvalidArgument(StrCat(what, " ", path, " is mode ", mode,
                                          ": a token file must be readable by its owner only; "
                                          "run: chmod 600 ",
                                          path));
  }
  return Status::Ok();
}

Result<std::unique_ptr<SchedulerService>> SchedulerService::Start(const Options& o) {
  auto auth = TokenAuth::Load(o.tokens_file);
  if (!auth.ok()) return Status::InvalidArgument(auth.status().message());
  std::string tightened;
  if (const Status made = CreatePrivateDirectories(o.data_dir, &tightened); !made.ok()) {
    return Status::IOError(StrCat("--data-dir ", o.data_dir, ": ", made.message()));
  }
  if (!tightened.empty()) spdlog::warn("--data-dir {}", tightened);
  auto p = std::make_unique<Parts>();
  FP8RT_ASSIGN_OR_RETURN(p->store, OpenRocksDbJobStore((fs::path(o.data_dir) / "jobs").string()));
  SchedulerOptions so;
  so.heartbeat_timeout_s = o.heartbeat_timeout_s;
  so.heartbeat_interval_s = o.heartbeat_interval_s;
  so.preemption_grace_s = o.preemption_grace_s;
  so.rendezvous_port_base = o.rendezvous_port_base;
  FP8RT_ASSIGN_OR_RETURN(p->scheduler, Scheduler::Open(p->store.get(), so, NowSeconds()));
  for (const std::string& line : p->scheduler->set_aside_at_open()) {
    spdlog::warn("job store: {}", line);
  }
  ApiOptions ao;
  ao.rate_per_s = o.rate_per_s;
  ao.burst = o.rate_burst;
  ao.max_user_priority = o.max_user_priority;
  const InputRoots roots = InputRootsOf(o);
  ao.config_dir = roots.config_dir;
  ao.config_inputs = roots.config_inputs;
  ao.data_inputs = roots.data_inputs;
  std::string listed;
  for (const std::string& r : roots.data_inputs.roots) listed += (listed.empty() ? "" : ", ") + r;
  spdlog::info("jobs' inputs may lie under: {} (config_path: under {} and --config-root)", listed,
               roots.config_dir);
  p->api = std::make_unique<Api>(p->scheduler.get(), p->store.get(), std::move(auth).value(),
                                 SystemClockSeconds, ao);
  HttpServerOptions ho;
  ho.address = o.bind;
  ho.threads = o.threads;
  ho.tls_cert_file = o.tls_cert;
  ho.tls_key_file = o.tls_key;
  ho.max_connections = o.max_connections;
  p->server = std::make_unique<HttpServer>(p->api.get(), ho);
  FP8RT_RETURN_IF_ERROR(p->server->Start(o.port));
  p->loop = std::make_unique<TickLoop>(
      p->scheduler.get(), std::chrono::milliseconds(o.tick_interval_ms), NowSeconds, LogTick,
      [](const Status& s) { spdlog::error("scheduling tick failed: {}", s.ToString()); });
  p->loop->Start();
  return std::unique_ptr<SchedulerService>(new SchedulerService(std::move(p)));
}

Status WritePortFile(const std::string& path, uint16_t port) {
  return WriteFileAtomic(path, StrCat(port, "\n"));
}

int WaitForStopSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("{}: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  return sig;
}

Status RunScheduler(const Options& o) {
  FP8RT_ASSIGN_OR_RETURN(std::unique_ptr<SchedulerService> service, SchedulerService::Start(o));
  std::cout << "fp8d: scheduler listening on " << (o.tls_cert.empty() ? "http" : "https") << "://"
            << o.bind << ":" << service->port() << " (data dir " << o.data_dir << ")" << std::endl;
  // After the line above: whoever waits for the file may read the log at once.
  if (!o.port_file.empty()) FP8RT_RETURN_IF_ERROR(WritePortFile(o.port_file, service->port()));
  WaitForStopSignal();
  service->Stop();
  return Status::Ok();
}

int Main(int argc, char** argv) {
  // Blocked before any thread starts, so every thread inherits the mask and WaitForStopSignal's
  // sigwait is the only place these signals arrive.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  CLI::App app{"fp8d: the fp8rt daemon (scheduler, node daemon, or both in one process)"};
  app.set_version_flag("--version", VersionLine("fp8d"));
  Options o;
  bool standalone = false, node = false;
  std::string scheduler_url;
  auto* f_sched = app.add_option("--scheduler", scheduler_url,
                                 "alone: run the scheduler (job store, scheduling loop, HTTP API); "
                                 "with --node: the scheduler's URL")
                      ->expected(0, 1);
  auto* f_alone = app.add_flag("--standalone", standalone,
                               "scheduler and node daemon in one process: the default on one "
                               "machine");
  auto* f_node = app.add_flag("--node", node, "run the node daemon of this machine");
  f_alone->excludes(f_node)->excludes(f_sched);
  app.add_option("--port", o.port, "TCP port of the HTTP API; 0 picks a free one")
      ->check(CLI::Range(0, 65535));
  app.add_option("--bind", o.bind, "address to listen on (default 127.0.0.1)");
  app.add_option("--data-dir", o.data_dir,
                 "state directory: job store, job logs, checkpoints (--standalone default: "
                 "$FP8D_DATA_DIR, $XDG_DATA_HOME/fp8d or ~/.local/share/fp8d)");
  app.add_option("--tokens", o.tokens_file, "tokens file (YAML, SHA-256 hashes; docs/API.md)");
  app.add_option("--tls-cert", o.tls_cert, "PEM certificate chain: serve HTTPS (with --tls-key)");
  app.add_option("--tls-key", o.tls_key, "PEM private key for --tls-cert");
  app.add_option("--heartbeat-timeout", o.heartbeat_timeout_s,
                 "seconds without a heartbeat before a node is lost (default 30)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  app.add_option("--heartbeat-interval", o.heartbeat_interval_s,
                 "seconds between heartbeats, told to daemons (default 5; --standalone 1)")
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
                 "absolute directory a job's config_path may lie under besides --config-dir "
                 "(repeatable; default: none)");
  app.add_option("--data-root", o.data_roots,
                 "absolute directory a job's inputs (data.train, data.val, train.init_from) may "
                 "lie under, after symlinks (repeatable; default: --config-dir and --config-root)");
  app.add_option("--port-file", o.port_file,
                 "write the bound port to this file once serving (for --port 0)");
  app.add_option("--rendezvous-port-base", o.rendezvous_port_base,
                 "multi-node gangs meet at their first node, port BASE + job id % 1000 (default "
                 "29500)")
      ->check(CLI::Range(1024, 64535));
  // The node daemon.
  app.add_option("--token-file", o.token_file, "--node: file holding this node's token");
  app.add_option("--node-id", o.node_id, "the node's id (default: the host name)");
  app.add_option("--address", o.address,
                 "where other nodes reach this one's ranks (default: the node id; --standalone: "
                 "127.0.0.1)");
  app.add_option("--fake-gpus", o.fake_gpus,
                 "inject an inventory for tests, e.g. \"4xA100:8.0\" (or FP8D_FAKE_GPUS); ranks "
                 "then run on the CPU");
  app.add_option("--cpu-slots", o.cpu_slots, "a CPU node's ranks at once (default: the online CPUs)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--fp8train", o.fp8train,
                 "the trainer (default: next to fp8d, the build tree's runtime/fp8train, or PATH)");
  app.add_option("--checkpoint-root", o.checkpoint_root,
                 "jobs checkpoint to ROOT/<job id>; shared storage for multi-node jobs (default: "
                 "<data-dir>/checkpoints)");
  app.add_option("--config-dir", o.config_dir,
                 "base of relative config_path values and inline configs' relative inputs, and a "
                 "root of both (default: the working directory)");
  app.add_option("--hang-k", o.hang_k,
                 "a gang is hung after k x its median step time without a step (default 10)")
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--hang-floor", o.hang_floor_s,
                 "... and never before this many seconds; also the longest a trainer busy "
                 "starting, evaluating or checkpointing may go without reporting progress "
                 "(default 60)")
      ->check(CLI::Range(0.1, 1e7));
  app.add_option("--stop-grace", o.stop_grace_s,
                 "seconds from SIGTERM (the trainer checkpoints) to SIGKILL (default 60); a job "
                 "whose measured checkpoint takes longer gets 1.5 x its save time + 5 s")
      ->check(CLI::Range(0.0, 86400.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  const bool sched = f_sched->count() > 0;
  if (!sched && !standalone && !node) {
    std::cerr << "fp8d: choose a mode: --standalone (one machine), --scheduler (the head) or "
                 "--node --scheduler URL\n"
              << app.help();
    return kExitUsage;
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    std::cerr << "fp8d: --tls-cert and --tls-key go together (one is missing)\n";
    return kExitUsage;
  }
  std::string missing;
  // Refuses a mode whose required flags are missing, naming them.
  auto missing_for = [&](const char* mode) {
    if (missing.empty()) return false;
    std::cerr << "fp8d: " << mode << " needs" << missing << "\n";
    return true;
  };
  Status s;
  if (node) {
    o.mode = Mode::kNode;
    o.scheduler_url = scheduler_url;
    if (scheduler_url.empty()) missing += " --scheduler URL";
    if (o.token_file.empty()) missing += " --token-file";
    if (o.data_dir.empty()) missing += " --data-dir";
    if (missing_for("--node")) return kExitUsage;
    s = RunNode(o);
  } else if (standalone) {
    o.mode = Mode::kStandalone;
    if (app.count("--port") == 0) o.port = 8080;
    if (app.count("--heartbeat-interval") == 0) o.heartbeat_interval_s = 1;
    if (o.data_dir.empty()) o.data_dir = cli::DefaultStandaloneDataDir();
    s = RunStandalone(o);
  } else {
    if (!scheduler_url.empty()) {
      std::cerr << "fp8d: --scheduler takes a URL only with --node ('" << scheduler_url
                << "' given)\n";
      return kExitUsage;
    }
    if (app.count("--port") == 0) missing += " --port";
    if (o.data_dir.empty()) missing += " --data-dir";
    if (o.tokens_file.empty()) missing += " --tokens";
    if (missing_for("--scheduler")) return kExitUsage;
    s = RunScheduler(o);
  }
  if (!s.ok()) {
    std::cerr << "fp8d: " << s.ToString() << "\n";
    return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kUnauthenticated
               ? kExitUsage
               : kExitError;
  }
  return kExitOk;
}

}  // namespace fp8rt::fp8d

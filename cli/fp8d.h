// fp8d, the fp8rt daemon, as a library: the command line and the modes. `--scheduler` runs the
// control plane (job store, scheduling loop, HTTP API); `--node --scheduler URL` the node daemon
// (node/daemon.h) of one machine; `--standalone` both in one process, the default on one machine.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/exit_codes.h"
#include "common/status.h"
#include "node/daemon.h"

namespace fp8rt::fp8d {

// Exit codes (common/exit_codes.h): kExitOk after SIGTERM / SIGINT, kExitError when it cannot
// run (store, port, ...), kExitUsage for a bad command line, tokens file, TLS files or a token the
// scheduler refuses.

enum class Mode { kScheduler, kStandalone, kNode };

struct Options {
  Mode mode = Mode::kScheduler;
  uint16_t port = 0;                 // 0: an ephemeral port (see port_file). Default: 0
  std::string bind = "127.0.0.1";    // Default: 127.0.0.1
  std::string data_dir;              // required: the job store lives in DIR/jobs
  std::string tokens_file;           // required: see docs/API.md
  std::string tls_cert;              // PEM; with tls_key serves HTTPS only. Default: ""
  std::string tls_key;               // Default: ""
  int64_t heartbeat_timeout_s = 30;  // Default: 30
  int64_t heartbeat_interval_s = 5;  // told to daemons. Default: 5
  int64_t preemption_grace_s = 60;   // Default: 60
  int tick_interval_ms = 200;        // the scheduling loop runs at least this often. Default: 200
  int threads = 2;                   // HTTP I/O threads. Default: 2
  double rate_per_s = 20;            // API requests per second per token. Default: 20
  double rate_burst = 40;            // per-token burst. Default: 40
  size_t max_connections = 0;   // open HTTP connections; 0: from the open-files limit. Default: 0
  int max_user_priority = 100;  // highest priority a user token may set. Default: 100
  // Where a config_path may lie besides config_dir (--config-root). Default: none
  std::vector<std::string> config_roots;
  // Where a job's inputs (data.train, data.val, train.init_from) may lie (--data-root).
  // Default: config_dir and config_roots
  std::vector<std::string> data_roots;
  std::string port_file;  // written (atomically) with the bound port once serving. Default: ""
  int rendezvous_port_base = 29500;  // multi-node gangs meet at base + job id % 1000

  // The node daemon (--node, --standalone).
  std::string scheduler_url;  // --node: the scheduler's URL
  std::string token_file;     // --node: a file holding the node token
  std::string node_id;        // Default: the host name
  std::string address;        // Default: the node id (--standalone: 127.0.0.1)
  std::string fake_gpus;      // Default: FP8D_FAKE_GPUS, else NVML, else CPU slots
  int cpu_slots = 0;          // a CPU node's slots; 0: the online CPUs
  std::string fp8train;       // Default: next to fp8d (or the build tree's runtime/), else PATH
  std::string checkpoint_root;  // Default: <data-dir>/checkpoints
  // The base of relative config_path values and of relative inputs in an inline config, and a
  // root of both. Default: the working directory
  std::string config_dir;
  double hang_k = 10;           // Default: 10 x the median step time
  double hang_floor_s = 60;     // Default: 60 s
  double stop_grace_s = 60;     // SIGTERM -> SIGKILL. Default: 60 s
};

// The whole program: parses argv (CLI11; unknown flags refused), runs the mode, returns the exit
// code. Blocks SIGTERM and SIGINT and returns after one of them arrives.
int Main(int argc, char** argv);

// Runs the scheduler until SIGTERM or SIGINT (which the caller must have blocked in every
// thread). Usage problems (tokens, TLS files) are InvalidArgument.
Status RunScheduler(const Options& options);
// The node daemon until SIGTERM or SIGINT.
Status RunNode(const Options& options);
// Both: a scheduler on --port and a node daemon that registers with it over loopback. Without
// --tokens it makes its own: <data-dir>/token (mode 0600, a user token for the local user, which
// fp8ctl finds) and a node token; <data-dir>/server holds the URL.
Status RunStandalone(const Options& options);

// The scheduler half of a mode: job store, scheduling loop and HTTP API, until Stop().
class SchedulerService {
 public:
  static Result<std::unique_ptr<SchedulerService>> Start(const Options& options);
  ~SchedulerService();
  uint16_t port() const;
  void Stop();

  struct Parts;

 private:
  explicit SchedulerService(std::unique_ptr<Parts> p);
  std::unique_ptr<Parts> p_;
};

// Writes `port` to `path` atomically (--port-file).
Status WritePortFile(const std::string& path, uint16_t port);
// Blocks until SIGTERM or SIGINT (blocked in every thread); returns which.
int WaitForStopSignal();
// The node daemon's options from fp8d's (inventory discovered, token read, fp8train found).
Result<node::DaemonOptions> NodeOptions(const Options& o);

// Where a job's files may lie (common/input_paths.h), from the options: config_path under the
// config directory and --config-root; inputs under --data-root (default: the same roots); never
// under fp8d's own state (the data directory, the checkpoint root, the token files).
struct InputRoots {
  std::string config_dir;  // absolute
  InputRules config_inputs;
  InputRules data_inputs;
};
InputRoots InputRootsOf(const Options& o);
// A file holding a token must be its owner's alone: InvalidArgument naming the file and the fix
// when its mode lets anyone else read or write it (or it is not a regular file).
Status CheckTokenFileMode(const std::string& path, const std::string& what);

}  // namespace fp8rt::fp8d

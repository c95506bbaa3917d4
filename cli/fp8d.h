// fp8d, the fp8rt daemon, as a library: the command line and the modes. `--scheduler` runs the
// control plane (job store, scheduling loop, HTTP API); `--standalone` (scheduler and node daemon
// in one process) and `--daemon` (the node daemon) come with the node-daemon roadmap step and for
// now say so and exit 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8rt::fp8d {

// Exit codes.
inline constexpr int kExitOk = 0;     // clean shutdown (SIGTERM / SIGINT)
inline constexpr int kExitError = 1;  // could not run: store, port, ...
inline constexpr int kExitUsage = 2;  // bad command line, tokens file or TLS files

enum class Mode { kScheduler, kStandalone, kDaemon };

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
  std::vector<std::string> config_roots;  // where absolute config paths may lie. Default: none
  std::string port_file;  // written (atomically) with the bound port once serving. Default: ""
};

// The whole program: parses argv (CLI11; unknown flags refused), runs the mode, returns the exit
// code. Blocks SIGTERM and SIGINT and returns after one of them arrives.
int Main(int argc, char** argv);

// Runs the scheduler until SIGTERM or SIGINT (which the caller must have blocked in every
// thread). Usage problems (tokens, TLS files) are InvalidArgument.
Status RunScheduler(const Options& options);

}  // namespace fp8rt::fp8d

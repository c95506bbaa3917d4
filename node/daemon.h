// The node daemon (fp8d --node, and the node half of fp8d --standalone): registers the node's
// inventory with the scheduler, heartbeats the state of every job it runs, and acts on the
// commands the answers carry: start a gang's local ranks, checkpoint-and-stop them (preemption),
// stop them (cancel). One loop supervises every gang: a failed rank ends its gang (the scheduler
// restarts it from its checkpoint, up to max_restarts); a gang whose step counter stops moving is
// killed as hung; a NaN/inf loss is reported as such (not restarted). Restarted, it kills the ranks
// a previous daemon left (recorded in <data-dir>/ranks.json): their jobs are requeued and resume
// from their checkpoints.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/input_paths.h"
#include "common/status.h"
#include "node/inventory.h"
#include "node/progress.h"
#include "node/protocol.h"
#include "node/supervisor.h"

namespace fp8rt::node {

struct DaemonOptions {
  std::string node_id;          // registered id. Required
  std::string address;          // where other nodes reach this one's rank 0. Default: node_id
  std::string scheduler_url;    // http://host:port. Required
  std::string token;            // a node (or admin) token. Required
  std::string data_dir;         // jobs/<id>/{config.json,metrics.jsonl,logs/}, ranks.json
  std::string checkpoint_root;  // <root>/<job id>; shared storage for multi-node gangs.
                                // Default: <data_dir>/checkpoints
  // Where the jobs' inputs may lie (fp8train checks them again when it opens them, with these
  // roots and fp8d's own state as private paths). Default: none, which refuses every input
  InputRules inputs;
  std::string fp8train;         // the trainer's path. Required
  Inventory inventory;
  HangOptions hang;
  // SIGTERM -> SIGKILL for a stop, cancel, preemption or the daemon's own shutdown; a job whose
  // measured checkpoint takes longer gets 1.5 x that + 5 s (NodeDaemon::GraceFor). Default: 60 s
  std::chrono::milliseconds stop_grace{60'000};
  std::chrono::milliseconds loop{200};  // supervision period. Default: 200 ms
  // A GPU whose used memory stays this far above what it was when fp8d started is dirty after a
  // job: reported unhealthy, not offered. Default: 0.5 GiB
  double dirty_gib = 0.5;
  std::function<void(const std::string&)> log;  // the daemon's log lines. Default: stderr
};

class NodeDaemon {
 public:
  explicit NodeDaemon(DaemonOptions o);
  ~NodeDaemon();  // kills what still runs

  // Kills the ranks a previous daemon left running (their process groups, after checking each
  // pid is still the process recorded). Returns how many it killed.
  Result<int> KillOrphans();
  // Runs until `stop`: registers (retrying until the scheduler answers), heartbeats, supervises.
  // On stop, every gang gets SIGTERM (the trainers checkpoint) and SIGKILL after the grace.
  Status Run(const std::atomic<bool>& stop);

 private:
  struct JobRun {
    int64_t id = 0;
    int attempt = 0;
    std::vector<int> gpus;
    std::string dir, checkpoint_dir;
    std::unique_ptr<Gang> gang;
    std::unique_ptr<MetricsTail> tail;
    Progress progress;
    HangDetector hang;
    int64_t total_steps = -1;
    int64_t checkpoint_every = 0;
    bool exited = false;
    int exit_code = 0;
    int failed_rank = -1;
    std::string reason;  // set when the daemon ended the gang (hang, NaN) or it failed
    // When the failure began, as far as this daemon can tell: a rank's failed exit, a hung
    // trainer's last progress, a NaN loss seen. Unset: none.
    std::optional<std::chrono::system_clock::time_point> failed_at;
    bool forget = false;  // told to stop: dropped once its ranks are gone
    std::map<int, std::string> logs;      // rank -> its log file
    std::map<int, uint64_t> log_sent;     // rank -> bytes the scheduler has
  };

  void Log(const std::string& line) const;
  Status Register();
  Status Heartbeat();
  void Apply(const Command& c);
  void Start(int64_t job_id, const StartJob& s);
  void Supervise(JobRun* run);
  std::chrono::milliseconds GraceFor(const JobRun& run) const;
  void CheckDirtyGpus();
  void RecordRanks();
  static int64_t LatestCheckpoint(const std::string& dir);

  DaemonOptions o_;
  std::map<int64_t, JobRun> runs_;
  std::chrono::milliseconds heartbeat_{5000};
  DirtyGpus dirty_;  // NVML nodes
  std::string recorded_;  // ranks.json as last written
};

}  // namespace fp8rt::node

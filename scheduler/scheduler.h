// The scheduling loop: the in-memory cluster (registered nodes, their daemons' latest reports,
// every unfinished job) over the durable JobStore. Tick(now) runs the pure policies (Place,
// ChooseVictims) on a snapshot and stores their transitions; heartbeats turn daemon reports into
// RUNNING / COMPLETED / FAILED / requeues and answer with commands. Every transition is stored
// (synced, with its event) before anyone hears of it: before the heartbeat answer, the API answer
// or the start command that depends on it. Time is always passed in (seconds), so tests drive it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "scheduler/node.h"
#include "scheduler/placement.h"
#include "scheduler/store.h"

namespace fp8rt::sched {

struct SchedulerOptions {
  // Policy knobs (its heartbeat_timeout_s is ignored: lost nodes are marked kLost by the loop).
  PlacementOptions placement;
  int64_t heartbeat_timeout_s = 30;  // a node silent this long is lost. Default: 30
  int64_t heartbeat_interval_s = 5;  // what registration tells daemons to use. Default: 5
  int64_t preemption_grace_s = 60;   // PREEMPTING -> stopped after this long. Default: 60
  // Placement runs on every tick after a change (submission, freed GPUs, node change) and at
  // least this often otherwise, for time-based decisions (fallback wait timeouts). Default: 1
  int64_t replace_interval_s = 1;
  // A gang of several nodes meets at gang node 0's address, port base + job id % 1000 (one-node
  // gangs pick a free port themselves). Default: 29500
  int rendezvous_port_base = 29500;
  // Seconds since the epoch, fractional: stamps the phases of an attempt's start (AttemptTiming).
  // Empty: the system clock.
  std::function<double()> wall_clock;
};

// What one Tick did.
struct TickResult {
  std::vector<int64_t> scheduled;   // PENDING -> SCHEDULED
  std::vector<int64_t> failed;      // PENDING -> FAILED (fallback fail) or node loss past restarts
  std::vector<int64_t> preempting;  // RUNNING -> PREEMPTING (victims)
  std::vector<int64_t> requeued;    // -> PENDING (node loss, or preemption completed)
  std::vector<std::string> lost_nodes;
  bool placement_ran = false;
};

class Scheduler {
 public:
  // Loads the nodes and every unfinished job from `store` (which must outlive the scheduler).
  // Known nodes get a fresh heartbeat deadline from `now`: their daemons have heartbeat_timeout_s
  // to report again before their jobs are requeued (reconciliation after a restart). Records that
  // do not read back are set aside first (set_aside_at_open() says which), never fatal.
  static Result<std::unique_ptr<Scheduler>> Open(JobStore* store, SchedulerOptions options,
                                                 int64_t now);

  // Sets aside every stored record that does not read back (scheduler/store_repair.h); jobs this
  // scheduler holds are rewritten from its copy. One line per record, for the log.
  Result<std::vector<std::string>> SetAsideUnreadable(int64_t now);
  // What Open set aside, one line per record.
  const std::vector<std::string>& set_aside_at_open() const { return set_aside_at_open_; }

  // Stores a new PENDING job with its submit event (durable on return) and queues it.
  Result<Job> Submit(const std::string& owner, JobSpec spec, int64_t now);
  // -> CANCELLED (NotFound: no such job; FailedPrecondition: not allowed from its state). The
  // daemons running it get "stop" on their next heartbeat.
  Result<Job> Cancel(int64_t id, const std::string& by, int64_t now);
  // RUNNING -> PREEMPTING on a user's word: the ranks checkpoint and stop, then the job is
  // requeued (resuming from that checkpoint), or with `hold` stays PREEMPTED until Resume.
  Result<Job> Preempt(int64_t id, const std::string& by, bool hold, int64_t now);
  // A held job: PREEMPTED -> PENDING (or, still PREEMPTING, the hold is dropped).
  Result<Job> Resume(int64_t id, const std::string& by, int64_t now);

  // Adds or updates a node's inventory; a lost node that registers is ready again. Jobs on GPU
  // indices the new inventory no longer has are requeued as after a node loss.
  Result<NodeInfo> RegisterNode(const NodeRegistration& reg, int64_t now);
  // An admin's drain (`drain` true) or undrain of a registered node (NotFound otherwise). A drained
  // node gets no new placements; its RUNNING jobs are preempted (checkpoint, then requeued to run
  // elsewhere: no restart counted, held jobs aside) and its SCHEDULED ones requeued at once. It
  // stays drained through loss, re-registration and restarts. Undrain makes it READY (if alive).
  Result<NodeInfo> DrainNode(const std::string& node_id, bool drain, const std::string& reason,
                             const std::string& by, int64_t now);
  // Applies a daemon's reports (stored before returning) and returns its commands. NotFound for a
  // node that never registered.
  Result<std::vector<NodeCommand>> Heartbeat(const std::string& node_id, const HeartbeatRequest& hb,
                                             int64_t now);

  // One round: lost nodes and their jobs, preemption grace periods, placement, preemption.
  Result<TickResult> Tick(int64_t now);

  // Whether any registered node could ever run `spec` (placement.h's CheckFeasible over every
  // node, whatever its state and occupancy).
  Status CheckFeasible(const JobSpec& spec) const;

  // Nodes with their current occupancy, in id order.
  std::vector<NodeInfo> Nodes() const;
  std::optional<NodeInfo> Node(const std::string& id) const;
  bool HasNode(const std::string& id) const;
  const SchedulerOptions& options() const { return options_; }

  // Blocks until something changed that a tick should see, Wake() was called, or `timeout`
  // passed.
  void WaitForWork(std::chrono::milliseconds timeout);
  void Wake();

  class Batch;  // scheduler_internal.h

 private:
  struct NodeRt {
    NodeInfo info;                                 // gpu_job unused here; see Snapshot
    std::map<int64_t, JobReport> reports;          // the daemon's latest report, by job
    std::map<int64_t, std::vector<int>> draining;  // left jobs still running: GPUs stay busy
    double last_heartbeat_wall = 0;                // WallNow() at the last heartbeat
  };

  Scheduler(JobStore* store, SchedulerOptions options) : store_(store), options_(options) {}

  // Seconds a PREEMPTING job has before it is stopped: the configured grace, or more when its
  // measured save time needs it (1.5 x save time + a heartbeat).
  int64_t PreemptionGrace(const Job& job) const;
  double WallNow() const;
  // The node's report of `job` if it is of the job's current attempt; nullptr otherwise.
  static const JobReport* CurrentReport(const NodeRt& node, const Job& job);
  ClusterSnapshot SnapshotLocked(int64_t now) const;
  bool OnNode(const Job& job, const std::string& node_id) const;
  Status CommitLocked(Batch* batch);
  Status HandleLostNodesLocked(int64_t now, TickResult* out);
  Status FinishPreemptionsLocked(int64_t now, TickResult* out);
  Status PlaceLocked(int64_t now, TickResult* out);
  Status PreemptLocked(const PlacementDecision& d, int64_t now, TickResult* out);
  void ApplyReport(const NodeRt& node, const Job& job, const JobReport* report, int64_t now,
                   Batch* batch) const;
  std::vector<NodeCommand> CommandsLocked(const NodeRt& node, const HeartbeatRequest& hb) const;
  void MarkDirtyLocked();

  JobStore* store_;
  SchedulerOptions options_;

  mutable std::mutex mu_;
  std::condition_variable work_;
  std::map<std::string, NodeRt> nodes_;
  std::map<int64_t, Job> active_;  // every job not in a terminal state
  std::vector<std::string> set_aside_at_open_;
  bool dirty_ = true;
  bool wake_ = false;
  int64_t last_placement_ = 0;
};

// Runs Scheduler::Tick on its own thread: after every change (woken by WaitForWork) and at least
// every `interval`. Errors are reported through `on_error` and the loop goes on.
class TickLoop {
 public:
  using Clock = std::function<int64_t()>;
  TickLoop(Scheduler* scheduler, std::chrono::milliseconds interval, Clock clock,
           std::function<void(const TickResult&)> on_tick = nullptr,
           std::function<void(const Status&)> on_error = nullptr);
  ~TickLoop();  // Stop()s
  void Start();
  void Stop();

 private:
  Scheduler* scheduler_;
  std::chrono::milliseconds interval_;
  Clock clock_;
  std::function<void(const TickResult&)> on_tick_;
  std::function<void(const Status&)> on_error_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fp8rt::sched

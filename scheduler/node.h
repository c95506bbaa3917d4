// What node daemons and the scheduler say to each other: the registration (GPU inventory), the
// heartbeat (reports about the jobs running on the node) and the commands a heartbeat's answer
// carries (start / checkpoint / stop). JSON on the wire, parsed strictly like job specs; the
// node record the job store keeps. docs/API.md documents the messages.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "scheduler/cluster.h"
#include "scheduler/job_state.h"

namespace fp8rt::sched {

const char* NodeStateName(NodeState s);  // "READY", "LOST", "DRAINING"
Result<NodeState> ParseNodeState(const std::string& s);

// POST /v1/nodes/register:
//   {"id": "node-1", "address": "10.0.0.5",
//    "gpus": [{"name": "H100", "compute_capability": "9.0", "memory_gib": 80, "count": 8,
//              "healthy": true}]}
// Each gpus entry stands for `count` identical GPUs (count defaults to 1, healthy to true); GPU
// indices follow the order of the entries. A CPU node registers {"name": "cpu", "memory_gib": M,
// "count": slots} (no compute capability). `address` (a host name or IP, optional) is where a
// gang's rank 0 on this node serves the rendezvous.
struct NodeRegistration {
  std::string id;  // [A-Za-z0-9._-], 1..128 chars, not "register"
  std::vector<GpuInfo> gpus;
  std::string address;  // Default: "" (the id is used)
};
Result<NodeRegistration> ParseNodeRegistration(const std::string& body);
Status ValidateNodeId(const std::string& id);

// One job on the node as its daemon sees it (its local ranks taken together).
enum class RankStatus { kRunning, kExited };
struct JobReport {
  int64_t job_id = 0;
  RankStatus status = RankStatus::kRunning;
  int exit_code = 0;             // kExited only. Default: 0
  int64_t checkpoint_step = -1;  // latest checkpoint; -1: none. Default: -1
  // Which start of the job this is (NodeCommand::attempt); a report of an earlier attempt is
  // stale and read as no report. -1: not said (taken as the current one). Default: -1
  int attempt = -1;
  int failed_rank = -1;  // kExited with a non-zero code: the rank that failed first. Default: -1
  std::string reason;    // kExited: why, in the daemon's words ("no progress since ..."). Default: ""
  // The latest training step and, from the node of rank 0, the rest of its metrics (`at` unused).
  JobProgress progress;
  // kExited with a non-zero code: how long ago (seconds) the daemon saw the failure (the first
  // failed rank's exit, or the last progress of a hung one). -1: not said. Default: -1
  double failed_age_s = -1;
  // The attempt's start as the trainer measured it, once its first step is trained (from the node
  // of rank 0): that step, its checkpoint load and first step (seconds), and how long ago the
  // step ended. step -1: not yet (then all are -1).
  struct Startup {
    int64_t step = -1;
    double load_s = -1, first_step_s = -1, age_s = -1;
  } startup;
  // Output the ranks of this node wrote since the last heartbeat, by rank (at most 64 KiB each).
  std::map<int, std::string> logs;
};

// POST /v1/nodes/{id}/heartbeat:
//   {"jobs": [{"job_id": 3, "status": "running", "step": 1200, "checkpoint_step": 1000},
//             {"job_id": 4, "status": "exited", "exit_code": 0}],
//    "unhealthy_gpus": [5]}
// A daemon reports every job it has started until an answer tells it to stop that job (for an
// exited job, "stop" means "forget it"): so a report the scheduler missed is sent again.
struct HeartbeatRequest {
  std::vector<JobReport> jobs;                     // at most one per job id
  std::optional<std::vector<int>> unhealthy_gpus;  // absent: health unchanged
};
Result<HeartbeatRequest> ParseHeartbeat(const std::string& body);

enum class CommandKind { kStart, kCheckpoint, kStop };
const char* CommandKindName(CommandKind k);  // "start", "checkpoint", "stop"

// What the daemon is to do. start carries everything needed to launch the job's ranks on this
// node: rank r = node_rank * gpus.size() + k runs on gpus[k].
struct NodeCommand {
  CommandKind kind = CommandKind::kStop;
  int64_t job_id = 0;
  std::string reason;
  // kStart only:
  Precision precision = Precision::kFp8;
  std::vector<int> gpus;                // GPU indices on this node
  int node_rank = 0;                    // this node's index in the gang
  std::vector<std::string> gang_nodes;  // every node of the gang, node_rank 0 first
  JobSpec spec;                         // config / config_path, checkpoint_interval, ...
  int64_t resume_step = -1;             // resume from this checkpoint; -1: start fresh
  int attempt = 0;                      // the job's placements so far; reports carry it back
  std::string master_addr;              // gang node 0's address: the rendezvous host
  int master_port = 0;                  // 0: a one-node gang; its daemon picks a free port
  // kCheckpoint only: seconds the ranks have to save before they are killed (the grace period,
  // at least the job's measured save time).
  int64_t grace_s = 0;
};
std::string CommandToJson(const NodeCommand& c);

// The node as the job store keeps it (no occupancy) and as GET /v1/nodes shows it (with it).
std::string NodeToJson(const NodeInfo& node, bool with_jobs);
Result<NodeInfo> NodeFromJson(const std::string& text);

}  // namespace fp8rt::sched

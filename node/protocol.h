// The node daemon's side of the node protocol (docs/API.md, "Node daemons"): the registration and
// heartbeat it sends and the commands the answers carry. The scheduler's side (scheduler/node.h)
// parses what this writes and writes what this parses; tests/scheduler/node_protocol_test.cc holds
// the two together. The node reads only the fields it acts on, and refuses commands that lack them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "node/inventory.h"

namespace fp8rt::node {

// POST /v1/nodes/register. A GPU node lists its GPUs one entry each (NVML order); a CPU node
// registers `cpu_slots` slots named "cpu" with no compute capability.
std::string RegistrationJson(const std::string& node_id, const std::string& address,
                             const Inventory& inventory);

// One job as this node reports it in a heartbeat (scheduler/node.h's JobReport).
struct JobReport {
  int64_t job_id = 0;
  int attempt = 0;
  bool running = true;
  int exit_code = 0;  // when !running
  int failed_rank = -1;
  std::string reason;
  int64_t step = -1;
  int64_t checkpoint_step = -1;
  int64_t total_steps = -1;
  double loss = -1, tokens_per_s = -1, mfu = -1, eta_s = -1;
  double step_s = -1;  // median seconds per step
  double save_s = -1;  // longest checkpoint save measured
  std::string checkpoint_error;  // the last failed checkpoint gone on from; "": none
  int64_t checkpoint_disk_bytes = -1;  // the job's committed checkpoints; -1: not said yet
  double val_loss = -1;  // the latest held-out loss, measured at step val_step
  int64_t val_step = -1;
  double failed_age_s = -1;  // !running, failed: seconds since this node saw the failure
  // The attempt's first step (from the trainer's startup line): the step, its checkpoint load
  // and first step seconds, and how long ago that step ended. step -1: not yet.
  int64_t startup_step = -1;
  double startup_load_s = -1, startup_first_step_s = -1, startup_age_s = -1;
  std::map<int, std::string> logs;  // rank -> output since the last heartbeat (<= 64 KiB each)
};
// POST /v1/nodes/{id}/heartbeat.
std::string HeartbeatJson(const std::vector<JobReport>& jobs, const std::vector<int>& unhealthy);

// A start command: everything this node needs to run its share of a job.
struct StartJob {
  int attempt = 0;
  Precision precision = Precision::kFp8;  // the scheduler's decision
  std::vector<int> gpus;          // this node's GPU (or CPU slot) indices, one rank each
  int node_rank = 0;
  int nodes = 1;                  // gang size in nodes
  std::string master_addr;        // gang node 0's address
  int master_port = 0;            // 0: a one-node gang; pick a free port
  JobSpec spec;                   // the job as submitted: its typed training config and more
  int64_t resume_step = -1;
};

struct Command {
  enum class Kind { kStart, kCheckpoint, kStop } kind = Kind::kStop;
  int64_t job_id = 0;
  std::string reason;
  StartJob start;  // kStart only
  double grace_s = 0;  // kCheckpoint: the time the job has to save before SIGKILL
};

// The heartbeat answer {"commands": [...]}. InvalidArgument naming the field for anything this
// daemon cannot act on.
Result<std::vector<Command>> ParseCommands(const std::string& body);

}  // namespace fp8rt::node

// A snapshot of the cluster as the placement and preemption policies see it: nodes, their GPUs,
// which job holds each GPU, and the time the snapshot was taken (the policies' only clock).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp8rt::sched {

// Job ids are positive; 0 in NodeInfo::gpu_job means the GPU is free.
inline constexpr int64_t kNoJob = 0;

// A CPU node registers its CPU slots as "GPUs" of this name (compute capability 0): fp8train runs
// every precision there, FP8 and BF16 emulated, so the precision rule does not apply to them.
inline constexpr const char* kCpuSlotName = "cpu";

struct GpuInfo {
  std::string name;            // product name as the node reports it, e.g. "H100". Default: ""
  int compute_capability = 0;  // 10 * major + minor (H100: 90, L40S: 89, A100: 80). Default: 0
  double memory_gib = 0;       // Default: 0
  bool healthy = true;         // false after an XID / ECC error. Default: true
  bool operator==(const GpuInfo&) const = default;
};

// kDraining: alive but drained by an admin (no new placements; its jobs were moved off).
enum class NodeState { kReady, kLost, kDraining };

struct NodeInfo {
  std::string id;
  std::vector<GpuInfo> gpus;
  std::vector<int64_t> gpu_job;  // per GPU: the job holding it, or kNoJob; same size as gpus
  int64_t last_heartbeat = 0;    // seconds, same clock as ClusterSnapshot::now
  NodeState state = NodeState::kReady;
  std::string address;  // where the node's ranks can be reached (a gang's rendezvous). Default: ""
  // Drained by an admin (`fp8ctl drain`): kDraining while alive, kLost when silent; it stays
  // drained through loss, re-registration and scheduler restarts until undrained.
  bool drained = false;
  std::string drain_reason;  // Default: ""

  // The state of a node that heartbeats: kDraining when drained, else kReady.
  NodeState alive_state() const { return drained ? NodeState::kDraining : NodeState::kReady; }

  bool free(size_t gpu) const { return gpu >= gpu_job.size() || gpu_job[gpu] == kNoJob; }
};

struct ClusterSnapshot {
  std::vector<NodeInfo> nodes;
  int64_t now = 0;  // seconds; the injected clock of every policy decision
};

// The GPUs a job holds on one node. A gang of N nodes x G GPUs has N of these; rank
// r = i * G + k runs on node nodes[i], GPU gpus[k].
struct NodeAssignment {
  std::string node_id;
  std::vector<int> gpus;  // ascending GPU indices on that node
  bool operator==(const NodeAssignment&) const = default;
};

}  // namespace fp8rt::sched

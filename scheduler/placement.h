// The placement policy: a pure function of a cluster snapshot and the pending queue. It decides
// which jobs start where (whole gangs only), in which precision, and why.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "scheduler/cluster.h"

namespace fp8rt::sched {

struct PendingJob {
  int64_t id = 0;
  JobSpec spec;
  int64_t submitted_at = 0;  // seconds, same clock as ClusterSnapshot::now
};

// Which GPUs run which precision is common/precision.h's rule (ComputeCapabilities), the
// trainer's too.
struct PlacementOptions {
  // A node whose last heartbeat is older than this is treated as lost even if its state still
  // says ready; 0 trusts NodeInfo::state alone. Default: 0
  int64_t heartbeat_timeout_s = 0;
};

enum class DecisionKind {
  kPlace,  // start now on `assignment` in `precision`
  kWait,   // stay pending; `reason` says what it waits for
  kFail,   // can never run under its spec (fallback: fail and no FP8-capable placement exists)
};
const char* DecisionKindName(DecisionKind k);

struct JobDecision {
  int64_t job_id = 0;
  DecisionKind kind = DecisionKind::kWait;
  std::vector<NodeAssignment> assignment;  // kPlace only; one entry per gang node
  Precision precision = Precision::kFp8;   // kPlace only
  std::string reason;
  PrecisionSource precision_source = PrecisionSource::kConfig;  // kPlace only
};

struct PlacementDecision {
  std::vector<JobDecision> jobs;  // one per queued job, in scheduling order
  // The highest-priority blocked job, and the GPUs held back for it (see Place).
  std::optional<int64_t> reserved_job_id;
  std::vector<NodeAssignment> reservation;
};

// Scheduling order: priority descending, then submit time, then id (FIFO).
void SortQueue(std::vector<PendingJob>* queue);

// Decides for every queued job, in SortQueue order, against the free GPUs of `cluster` (GPUs given
// to an earlier job in this call are no longer free).
//
// Starvation: the first job in order that cannot be placed but could fit the cluster if it were
// empty gets a reservation: the gang it would take if occupancy were ignored, preferring the nodes
// with the most free usable GPUs (they complete soonest). Later jobs may only backfill on GPUs
// outside that reservation, so a stream of small jobs can never delay the blocked head job; free
// reserved GPUs stay idle until the head job fits. This is the simplest correct form of backfill
// (no runtime estimates). A job that could never fit gets no reservation, so it blocks nobody.
PlacementDecision Place(const ClusterSnapshot& cluster, std::vector<PendingJob> queue,
                        const PlacementOptions& options = {});

// The decision for one job alone against the free GPUs of `cluster` (no reservations). The
// preemption policy uses it to ask "would this job fit if those GPUs were free".
JobDecision DecideOne(const ClusterSnapshot& cluster, const PendingJob& job,
                      const PlacementOptions& options = {});

// Whether `spec` could ever be placed on `nodes` (every registered node, whatever its state and
// occupancy; none at all: yes, nothing to judge). InvalidArgument naming the resource no node
// offers ("gpus_per_node = 4: ... the most on a node is 1"), so a job that would wait forever is
// refused at submit instead.
Status CheckFeasible(const JobSpec& spec, const std::vector<NodeInfo>& nodes);

// "2 x A100" or "8 x H100 + 8 x H200".
std::string DescribeGpus(const ClusterSnapshot& cluster, const std::vector<NodeAssignment>& a);

}  // namespace fp8rt::sched

// The job store: jobs, their event logs, the job id counter and the registered nodes, behind one
// small interface with an in-memory twin and a RocksDB implementation. Both pass
// tests/unit/scheduler_store_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/cluster.h"
#include "scheduler/job_state.h"

namespace fp8rt::sched {

struct JobFilter {
  std::optional<JobState> state;     // only jobs in this state. Default: any
  std::optional<std::string> owner;  // only jobs of this user. Default: any
};

// One job record and, optionally, the event that moved it there.
struct JobWrite {
  Job job;
  std::optional<Event> event;
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Writes `job` (insert or replace) and, if given, appends `event` to its log, atomically: after
  // a crash both or neither are there. Returns only once the write is durable.
  // event->job_id must be job.id and event->to must be job.state.
  virtual Status Put(const Job& job, const std::optional<Event>& event) = 0;
  // Every write of `writes` (in order; a job may appear more than once, each with its own event)
  // atomically and durably, in one batch: what the scheduling loop stores per tick. Nothing is
  // written if any write fails ValidatePut.
  virtual Status PutMany(const std::vector<JobWrite>& writes) = 0;
  // NotFound if there is no such job.
  virtual Result<Job> Get(int64_t id) const = 0;
  // Matching jobs in ascending id order.
  virtual Result<std::vector<Job>> List(const JobFilter& filter = {}) const = 0;
  // The job's events in the order they were put (empty for an unknown job).
  virtual Result<std::vector<Event>> Events(int64_t job_id) const = 0;
  // 1, 2, 3, ...; never hands out an id twice, across reopen too.
  virtual Result<int64_t> NextJobId() = 0;

  // Registered nodes (inventory and state; NodeInfo::gpu_job is not stored). Insert or replace,
  // durable on return.
  virtual Status PutNode(const NodeInfo& node) = 0;
  // In ascending id order, gpu_job all kNoJob.
  virtual Result<std::vector<NodeInfo>> ListNodes() const = 0;
};

// Keeps everything in memory; for tests and for callers that want a store without a disk.
std::unique_ptr<JobStore> NewMemoryJobStore();

struct RocksDbJobStoreOptions {
  bool create_if_missing = true;  // Default: true
  bool sync = true;               // fsync every write before acknowledging it. Default: true
};

Result<std::unique_ptr<JobStore>> OpenRocksDbJobStore(const std::string& path,
                                                      const RocksDbJobStoreOptions& options = {});

// Shared by both implementations: the checks Put makes before writing anything.
Status ValidatePut(const Job& job, const std::optional<Event>& event);
bool MatchesFilter(const Job& job, const JobFilter& filter);

}  // namespace fp8rt::sched

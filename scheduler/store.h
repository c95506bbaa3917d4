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

// A stored record that does not read back (damaged, or written by a more lenient version). The
// listings skip such records, so one of them never takes a listing or a restart down; SetAside
// moves it out of the way (scheduler/store_repair.h decides what takes its place).
struct UnreadableRecord {
  std::string key;     // "job/<016x id>" or "node/<id>"
  int64_t job_id = 0;  // the job's id for job records; 0 for node records
  std::string raw;     // the stored bytes
  std::string error;   // why they do not read back
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
  // NotFound if there is no such job; Corruption if its record does not read back.
  virtual Result<Job> Get(int64_t id) const = 0;
  // Matching jobs in ascending id order. Records that do not read back are skipped and, if
  // `unreadable` is given, appended to it.
  virtual Result<std::vector<Job>> ListJobs(const JobFilter& filter,
                                            std::vector<UnreadableRecord>* unreadable) const = 0;
  Result<std::vector<Job>> List(const JobFilter& filter = {}) const {
    return ListJobs(filter, nullptr);
  }
  // The job's events in the order they were put (empty for an unknown job).
  virtual Result<std::vector<Event>> Events(int64_t job_id) const = 0;
  // 1, 2, 3, ...; never hands out an id twice, across reopen too.
  virtual Result<int64_t> NextJobId() = 0;

  // Registered nodes (inventory and state; NodeInfo::gpu_job is not stored). Insert or replace,
  // durable on return.
  virtual Status PutNode(const NodeInfo& node) = 0;
  // In ascending id order, gpu_job all kNoJob; unreadable records as in ListJobs.
  virtual Result<std::vector<NodeInfo>> ListNodeRecords(
      std::vector<UnreadableRecord>* unreadable) const = 0;
  Result<std::vector<NodeInfo>> ListNodes() const { return ListNodeRecords(nullptr); }

  // Moves an unreadable record's bytes to "corrupt/<key>" (kept for a human to look at) and, in
  // the same durable write, stores `replacement` in its place (a job record with its event) or,
  // without one, removes the record. FailedPrecondition if the record no longer holds rec.raw.
  virtual Status SetAside(const UnreadableRecord& rec,
                          const std::optional<JobWrite>& replacement) = 0;

  // Ranks' output as their daemons upload it: `text` appended to rank `rank`'s log of the job,
  // of which the last kMaxLogBytes are kept. Not synced (a crash may lose the newest lines: logs
  // are not scheduling state).
  virtual Status AppendLog(int64_t job_id, int rank, const std::string& text) = 0;
  // The ranks with a stored log, ascending, and one rank's log ("" if none).
  virtual Result<std::vector<int>> LogRanks(int64_t job_id) const = 0;
  virtual Result<std::string> Log(int64_t job_id, int rank) const = 0;
};

// What a job store keeps of one rank's log: its last 1 MiB.
inline constexpr size_t kMaxLogBytes = size_t{1} << 20;
// `log` + `text`, cut to its last kMaxLogBytes at a line start where there is one.
std::string AppendCapped(std::string log, const std::string& text);

// Keeps everything in memory; for tests and for callers that want a store without a disk.
std::unique_ptr<JobStore> NewMemoryJobStore();

struct RocksDbJobStoreOptions {
  bool create_if_missing = true;  // Default: true
  bool sync = true;               // fsync every write before acknowledging it. Default: true
};

Result<std::unique_ptr<JobStore>> OpenRocksDbJobStore(const std::string& path,
                                                      const RocksDbJobStoreOptions& options = {});

// Shared by both implementations: the checks Put makes before writing anything, the last of
// them that the record reads back as the same job (a record that would not is never written).
Status ValidatePut(const Job& job, const std::optional<Event>& event);
// The same for a node record: an id, and a record that reads back as the same node.
Status ValidatePutNode(const NodeInfo& node);
bool MatchesFilter(const Job& job, const JobFilter& filter);

}  // namespace fp8rt::sched

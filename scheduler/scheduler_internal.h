// Helpers shared by scheduler.cc and scheduler_nodes.cc; not part of the scheduler's interface.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "scheduler/scheduler.h"

namespace fp8rt::sched {

// SCHEDULED, RUNNING and PREEMPTING jobs hold their placement's GPUs.
bool HoldsGpus(JobState s);

// The transitions of one step, stored together by Scheduler::CommitLocked.
class Scheduler::Batch {
 public:
  void Add(const Job& job, std::optional<Event> event) {
    writes_.push_back({job, std::move(event)});
  }
  bool empty() const { return writes_.empty(); }
  const std::vector<JobWrite>& writes() const { return writes_; }

 private:
  std::vector<JobWrite> writes_;
};

// PREEMPTING -> PREEMPTED ("<what>") -> PENDING (resumes from its latest checkpoint; restarts are
// not counted), both transitions added to `batch`.
void AddRequeueAfterPreemption(Job* job, int64_t now, const std::string& what,
                               Scheduler::Batch* batch);

// A loss requeued `job` (now PENDING; nothing to note otherwise): its next attempt's timing starts
// with the failure (seconds on the wall clock: the last sign of life of what failed) and the
// requeue (`now`).
void NoteRequeue(Job* job, double failed_at, double now);

}  // namespace fp8rt::sched

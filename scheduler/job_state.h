// The job record, its state machine and the events that record every transition.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "scheduler/cluster.h"

namespace fp8rt::sched {

// PENDING -> SCHEDULED -> RUNNING -> COMPLETED | FAILED | CANCELLED
// RUNNING -> PREEMPTING -> PREEMPTED -> PENDING (requeue)
// SCHEDULED | RUNNING | PREEMPTING -> PENDING when a node is lost (see RequeueAfterNodeLoss)
enum class JobState {
  kPending,
  kScheduled,
  kRunning,
  kPreempting,
  kPreempted,
  kCompleted,
  kFailed,
  kCancelled,
};
const char* JobStateName(JobState s);  // "PENDING", ...
Result<JobState> ParseJobState(const std::string& s);
bool IsTerminal(JobState s);

// Ok if from -> to is an edge of the state machine; otherwise FailedPrecondition naming both.
Status CheckTransition(JobState from, JobState to);

// Training progress as the gang's node 0 last reported it (rank 0's metrics); -1: not known.
struct JobProgress {
  int64_t step = -1;
  int64_t total_steps = -1;
  double loss = -1;
  double tokens_per_s = -1;
  double mfu = -1;
  double eta_s = -1;
  double step_s = -1;  // median seconds per step
  double save_s = -1;  // the longest checkpoint save measured (what a preemption waits for)
  double val_loss = -1;   // the latest held-out loss (data.val)
  int64_t val_step = -1;  // the step val_loss was measured at
  // A checkpoint that failed and that the job went on from (train.on_checkpoint_error:
  // continue), in the trainer's words; "": none since the last good one.
  std::string checkpoint_error;
  // What the job's committed checkpoints take on disk (after retention); -1: not said yet.
  int64_t checkpoint_disk_bytes = -1;
  int64_t at = 0;  // seconds: when it was reported
  bool operator==(const JobProgress&) const = default;
};

// How an attempt got to its first step (the recovery after a loss, or any start), in seconds on the
// scheduler's clock (since the epoch, fractional; 0: not known) and the trainer's own durations
// (-1: not said yet).
struct AttemptTiming {
  int attempt = 0;           // the placement these times are of (Job::attempt)
  double failed_at = 0;      // the last sign of life of what ended the previous attempt (a lost
                             // node's last heartbeat, a rank's exit as its node saw it); 0: none
  double requeued_at = 0;    // the scheduler requeued the job after that loss; 0: not a requeue
  double placed_at = 0;      // PENDING -> SCHEDULED
  double trained_at = 0;     // the attempt's first step ended; 0: not yet
  double load_s = -1;        // the trainer's checkpoint load (0: a fresh start)
  double first_step_s = -1;  // the trainer's first step
  int64_t step = -1;         // the first step this attempt trained
  bool operator==(const AttemptTiming&) const = default;
};

// The phases of an attempt's start, in seconds (-1 where the timing does not have them):
// detection (the failure to the requeue), requeue and placement, process start (the start command
// reaching the node, the launch, the trainer's set-up: the rest), checkpoint load, first step;
// total from the failure (or, without one, from the requeue or the placement) to the first step.
struct AttemptPhases {
  double detection_s = -1, placement_s = -1, start_s = -1, load_s = -1, first_step_s = -1;
  double total_s = -1;
  double from_detection_s = -1;  // the requeue to the first step (-1: not a requeue)
};
AttemptPhases PhasesOf(const AttemptTiming& t);
// "training again at step 121, 9.8 s after the failure: detection 5.2 s, ...": the event's words.
std::string DescribeAttempt(const AttemptTiming& t);

struct Job {
  int64_t id = 0;
  std::string owner;  // submitting user
  JobSpec spec;
  JobState state = JobState::kPending;
  std::optional<Precision> precision;     // decided at placement; unset while never placed
  // Which decided it (common/precision.h): the config, the spec's override, or the fallback
  // policy because the placed GPUs do not run what was asked. Meaningful once `precision` is set.
  PrecisionSource precision_source = PrecisionSource::kConfig;
  std::string precision_reason;           // the decision's words on it (a fallback says why)
  std::vector<NodeAssignment> placement;  // current or last placement
  int restarts = 0;                       // requeues after a loss or a failed gang so far
  int attempt = 0;                        // placements so far (the start command carries it)
  bool hold = false;  // preempted with hold: stays PREEMPTED until resumed. Default: false
  int64_t checkpoint_step = -1;           // latest checkpoint the job reported; -1: none
  int64_t checkpoint_at = 0;              // seconds: when checkpoint_step was first reported
  JobProgress progress;
  AttemptTiming timing;                   // the current (or last) attempt's start
  int64_t submitted_at = 0;               // seconds
  int64_t updated_at = 0;                 // seconds, time of the last transition
  std::string reason;                     // why it is in its current state

  bool operator==(const Job&) const = default;
};

struct Event {
  int64_t time = 0;
  int64_t job_id = 0;
  JobState from = JobState::kPending;
  JobState to = JobState::kPending;
  std::string reason;

  bool operator==(const Event&) const = default;
};

// Moves `job` to `to` if legal, stamping updated_at and reason; returns the event to store with it.
Result<Event> Transition(Job* job, JobState to, int64_t now, std::string reason);

// A node under a SCHEDULED/RUNNING/PREEMPTING job was lost: requeue it (PENDING, restarts + 1,
// placement cleared) or, once restarts would exceed spec.max_restarts, FAILED.
Result<Event> RequeueAfterNodeLoss(Job* job, int64_t now, const std::string& node_id);
// The same for any loss of the job's ranks; `what` says what happened ("node n1 lost", "node n1
// no longer reports the job") and starts the event's reason.
Result<Event> RequeueAfterLoss(Job* job, int64_t now, const std::string& what);

// Storage encoding (JSON); JobFromJson(JobToJson(j)) == j.
std::string JobToJson(const Job& job);
Result<Job> JobFromJson(const std::string& text);
std::string EventToJson(const Event& e);
Result<Event> EventFromJson(const std::string& text);

}  // namespace fp8rt::sched

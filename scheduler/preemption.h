// Victim choice for preemption, a pure function like placement: which running gangs to stop so a
// higher-priority pending job fits.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "scheduler/cluster.h"
#include "scheduler/placement.h"

namespace fp8rt::sched {

struct RunningJob {
  int64_t id = 0;  // its GPUs are those NodeInfo::gpu_job marks with this id
  int priority = 0;
  bool preemptible = true;
  int64_t steps_since_checkpoint = 0;  // work lost if stopped now
  int64_t started_at = 0;              // seconds, same clock as ClusterSnapshot::now
  // Seconds lost if stopped now: the steps since its checkpoint at its measured step time, plus its
  // measured save time; 0 where neither is known (then steps decide).
  double lost_s = 0;
};

struct PreemptionPlan {
  std::vector<int64_t> victims;  // whole gangs, in the order they were chosen
  JobDecision placement;         // where `job` goes once the victims' GPUs are free (kPlace)
};

// Chooses victims among running jobs with lower priority than `job` that are preemptible,
// preferring those that cost the least to stop (lost_s: redoing the steps since their checkpoint
// plus the save; then the fewest steps since their last checkpoint), then the
// lowest priority, then the newest (latest started_at, then highest id). Victims are added in that
// order until the job fits; victims the final placement turns out not to need are then dropped,
// so no gang is stopped for nothing. nullopt when the job already fits, or when even stopping every
// eligible victim would not make it fit.
std::optional<PreemptionPlan> ChooseVictims(const ClusterSnapshot& cluster, const PendingJob& job,
                                            const std::vector<RunningJob>& running,
                                            const PlacementOptions& options = {});

}  // namespace fp8rt::sched

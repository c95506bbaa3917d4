// Greedy victim selection with a final pruning pass; placement's DecideOne is the fit test, so
// preemption and placement can never disagree on what "fits" means.
#include "scheduler/preemption.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace fp8rt::sched {
namespace {

ClusterSnapshot Without(const ClusterSnapshot& c, const std::set<int64_t>& victims) {
  ClusterSnapshot out = c;
  for (auto& n : out.nodes) {
    for (auto& j : n.gpu_job) {
      if (victims.count(j)) j = kNoJob;
    }
  }
  return out;
}

bool Fits(const JobDecision& d) { return d.kind == DecisionKind::kPlace; }

}  // namespace

std::optional<PreemptionPlan> ChooseVictims(const ClusterSnapshot& cluster, const PendingJob& job,
                                            const std::vector<RunningJob>& running,
                                            const PlacementOptions& options) {
  if (Fits(DecideOne(cluster, job, options))) return std::nullopt;
  std::vector<RunningJob> eligible;
  for (const auto& r : running) {
    if (r.preemptible && r.priority < job.spec.priority) eligible.push_back(r);
  }
  std::sort(eligible.begin(), eligible.end(), [](const RunningJob& a, const RunningJob& b) {
    return std::make_tuple(a.lost_s, a.steps_since_checkpoint, a.priority, -a.started_at, -a.id) <
           std::make_tuple(b.lost_s, b.steps_since_checkpoint, b.priority, -b.started_at, -b.id);
  });

  std::vector<int64_t> chosen;
  std::set<int64_t> chosen_set;
  std::optional<JobDecision> fit;
  for (const auto& r : eligible) {
    chosen.push_back(r.id);
    chosen_set.insert(r.id);
    JobDecision d = DecideOne(Without(cluster, chosen_set), job, options);
    if (Fits(d)) {
      fit = std::move(d);
      break;
    }
  }
  if (!fit) return std::nullopt;

  // Drop victims whose GPUs the job does not need: last-chosen (most costly) first.
  for (size_t i = chosen.size(); i-- > 0;) {
    std::set<int64_t> trial = chosen_set;
    trial.erase(chosen[i]);
    JobDecision d = DecideOne(Without(cluster, trial), job, options);
    if (Fits(d)) {
      chosen_set = std::move(trial);
      fit = std::move(d);
    }
  }
  PreemptionPlan plan;
  for (int64_t id : chosen) {
    if (chosen_set.count(id)) plan.victims.push_back(id);
  }
  plan.placement = std::move(*fit);
  return plan;
}

}  // namespace fp8rt::sched

// The scheduling loop: opening (reconcile from the store), submissions and cancels, the batch that
// stores transitions before memory changes, the snapshot the pure policies see, and Tick.
// Heartbeats and registration live in scheduler_nodes.cc.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "scheduler/preemption.h"
#include "scheduler/scheduler_internal.h"
#include "scheduler/store_repair.h"

namespace fp8rt::sched {

bool HoldsGpus(JobState s) {
  return s == JobState::kScheduled || s == JobState::kRunning || s == JobState::kPreempting;
}

Result<std::unique_ptr<Scheduler>> Scheduler::Open(JobStore* store, SchedulerOptions options,
                                                   int64_t now) {
  if (options.heartbeat_timeout_s < 1 || options.preemption_grace_s < 0 ||
      options.heartbeat_interval_s < 1 || options.replace_interval_s < 0) {
    return Status::InvalidArgument(
        StrCat("scheduler options: heartbeat_timeout_s = ", options.heartbeat_timeout_s,
               " and heartbeat_interval_s = ", options.heartbeat_interval_s, " must be >= 1; ",
               "preemption_grace_s = ", options.preemption_grace_s,
               " and replace_interval_s = ", options.replace_interval_s, " must be >= 0"));
  }
  options.placement.heartbeat_timeout_s = 0;  // node liveness is NodeInfo::state, kept here
  std::unique_ptr<Scheduler> s(new Scheduler(store, options));
  FP8RT_ASSIGN_OR_RETURN(s->set_aside_at_open_, sched::SetAsideUnreadable(store, now, nullptr));
  FP8RT_ASSIGN_OR_RETURN(std::vector<NodeInfo> nodes, store->ListNodes());
  for (NodeInfo& n : nodes) {
    n.last_heartbeat = now;  // every daemon gets a full timeout to report after a restart
    s->nodes_[n.id].last_heartbeat_wall = s->WallNow();
    s->nodes_[n.id].info = std::move(n);
  }
  FP8RT_ASSIGN_OR_RETURN(std::vector<Job> jobs, store->List());
  for (Job& j : jobs) {
    if (!IsTerminal(j.state)) s->active_.emplace(j.id, std::move(j));
  }
  s->last_placement_ = now;
  return s;
}

Result<std::vector<std::string>> Scheduler::SetAsideUnreadable(int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  return sched::SetAsideUnreadable(store_, now, &active_);
}

Result<Job> Scheduler::Submit(const std::string& owner, JobSpec spec, int64_t now) {
  // Nobody else knows the job before it is inserted below, so the two synced writes happen
  // outside the lock and ticks go on meanwhile.
  FP8RT_ASSIGN_OR_RETURN(const int64_t id, store_->NextJobId());
  Job job;
  job.id = id;
  job.owner = owner;
  job.spec = std::move(spec);
  job.state = JobState::kPending;
  job.submitted_at = job.updated_at = now;
  job.reason = "submitted";
  const Event ev{now, id, JobState::kPending, JobState::kPending, StrCat("submitted by ", owner)};
  FP8RT_RETURN_IF_ERROR(store_->Put(job, ev));
  std::lock_guard<std::mutex> lock(mu_);
  active_.emplace(id, job);
  MarkDirtyLocked();
  return job;
}

Result<Job> Scheduler::Cancel(int64_t id, const std::string& by, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(id);
  Job job;
  if (it != active_.end()) {
    job = it->second;
  } else {
    auto stored = store_->Get(id);  // terminal (or unknown): the transition below refuses it
    if (!stored.ok()) return stored.status();
    job = std::move(stored).value();
  }
  FP8RT_ASSIGN_OR_RETURN(Event ev,
                         Transition(&job, JobState::kCancelled, now, StrCat("cancelled by ", by)));
  Batch batch;
  batch.Add(job, ev);
  FP8RT_RETURN_IF_ERROR(CommitLocked(&batch));
  return job;
}

Result<Job> Scheduler::Preempt(int64_t id, const std::string& by, bool hold, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(id);
  if (it == active_.end()) {
    auto stored = store_->Get(id);
    if (!stored.ok()) return stored.status();
    return Status::FailedPrecondition(
        StrCat("job ", id, " is ", JobStateName(stored->state), "; only RUNNING jobs can be preempted"));
  }
  Job job = it->second;
  if (job.state != JobState::kRunning) {
    return Status::FailedPrecondition(
        StrCat("job ", id, " is ", JobStateName(job.state), "; only RUNNING jobs can be preempted"));
  }
  job.hold = hold;
  FP8RT_ASSIGN_OR_RETURN(
      Event ev, Transition(&job, JobState::kPreempting, now,
                           StrCat("preempted by ", by, hold ? " (held until resumed)" : "",
                                  "; checkpointing")));
  Batch batch;
  batch.Add(job, ev);
  FP8RT_RETURN_IF_ERROR(CommitLocked(&batch));
  return job;
}

Result<Job> Scheduler::Resume(int64_t id, const std::string& by, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(id);
  const bool held = it != active_.end() && it->second.hold &&
                    (it->second.state == JobState::kPreempted ||
                     it->second.state == JobState::kPreempting);
  if (!held) {
    JobState state = JobState::kPending;
    if (it != active_.end()) {
      state = it->second.state;
    } else {
      auto stored = store_->Get(id);
      if (!stored.ok()) return stored.status();
      state = stored->state;
    }
    return Status::FailedPrecondition(StrCat("job ", id, " is ", JobStateName(state),
                                             " and not held; only a job preempted with --hold "
                                             "waits for resume"));
  }
  Job job = it->second;
  job.hold = false;
  Batch batch;
  if (job.state == JobState::kPreempting) {
    batch.Add(job, Event{now, id, job.state, job.state, StrCat("resumed by ", by, " while stopping")});
  } else {
    FP8RT_ASSIGN_OR_RETURN(
        Event ev, Transition(&job, JobState::kPending, now,
                             job.checkpoint_step >= 0
                                 ? StrCat("resumed by ", by, "; resumes from checkpoint step ",
                                          job.checkpoint_step)
                                 : StrCat("resumed by ", by, "; no checkpoint, starts from scratch")));
    batch.Add(job, ev);
  }
  FP8RT_RETURN_IF_ERROR(CommitLocked(&batch));
  return job;
}

double Scheduler::WallNow() const {
  if (options_.wall_clock) return options_.wall_clock();
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t Scheduler::PreemptionGrace(const Job& job) const {
  const double save = job.progress.save_s;
  if (!(save > 0)) return options_.preemption_grace_s;
  return std::max<int64_t>(options_.preemption_grace_s,
                           static_cast<int64_t>(std::ceil(1.5 * save)) +
                               options_.heartbeat_interval_s);
}

bool Scheduler::OnNode(const Job& job, const std::string& node_id) const {
  if (!HoldsGpus(job.state)) return false;
  for (const auto& a : job.placement) {
    if (a.node_id == node_id) return true;
  }
  return false;
}

void Scheduler::MarkDirtyLocked() {
  dirty_ = true;
  work_.notify_all();
}

void Scheduler::Wake() {
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = true;
  work_.notify_all();
}

void Scheduler::WaitForWork(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  work_.wait_for(lock, timeout, [this] { return dirty_ || wake_; });
  wake_ = false;
}

// Stores the batch (one synced write), then applies it to memory. A job that leaves a node while
// its daemon still reports it running keeps its GPUs there ("draining") until the daemon reports
// it gone, so nothing is placed onto GPUs a process still uses.
Status Scheduler::CommitLocked(Batch* batch) {
  if (batch->empty()) return Status::Ok();
  FP8RT_RETURN_IF_ERROR(store_->PutMany(batch->writes()));
  for (const JobWrite& w : batch->writes()) {
    const Job& now = w.job;
    auto it = active_.find(now.id);
    if (it != active_.end()) {
      const Job& before = it->second;
      for (const auto& a : before.placement) {
        if (!OnNode(before, a.node_id) || OnNode(now, a.node_id)) continue;
        MarkDirtyLocked();  // GPUs freed (now, or once the daemon stops the ranks)
        auto n = nodes_.find(a.node_id);
        if (n == nodes_.end()) continue;
        auto r = n->second.reports.find(now.id);
        if (r != n->second.reports.end() && r->second.status == RankStatus::kRunning) {
          n->second.draining[now.id] = a.gpus;
        }
      }
    }
    if (now.state == JobState::kPending && (it == active_.end() || it->second.state != now.state)) {
      MarkDirtyLocked();
    }
    if (IsTerminal(now.state)) {
      if (it != active_.end()) active_.erase(it);
    } else if (it != active_.end()) {
      it->second = now;
    } else {
      active_.emplace(now.id, now);
    }
  }
  return Status::Ok();
}

ClusterSnapshot Scheduler::SnapshotLocked(int64_t now) const {
  ClusterSnapshot c;
  c.now = now;
  c.nodes.reserve(nodes_.size());
  std::map<std::string, size_t> index;
  for (const auto& [id, n] : nodes_) {
    index.emplace(id, c.nodes.size());
    c.nodes.push_back(n.info);
    NodeInfo& out = c.nodes.back();
    out.gpu_job.assign(out.gpus.size(), kNoJob);
    for (const auto& [job, gpus] : n.draining) {
      for (int g : gpus) {
        if (g >= 0 && static_cast<size_t>(g) < out.gpu_job.size()) out.gpu_job[g] = job;
      }
    }
  }
  for (const auto& [id, job] : active_) {
    if (!HoldsGpus(job.state)) continue;
    for (const auto& a : job.placement) {
      auto it = index.find(a.node_id);
      if (it == index.end()) continue;
      NodeInfo& n = c.nodes[it->second];
      for (int g : a.gpus) {
        if (g >= 0 && static_cast<size_t>(g) < n.gpu_job.size()) n.gpu_job[g] = id;
      }
    }
  }
  return c;
}

Status Scheduler::HandleLostNodesLocked(int64_t now, TickResult* out) {
  for (auto& [id, n] : nodes_) {
    if (n.info.state == NodeState::kLost) continue;
    if (now - n.info.last_heartbeat <= options_.heartbeat_timeout_s) continue;
    NodeInfo lost = n.info;
    lost.state = NodeState::kLost;
    FP8RT_RETURN_IF_ERROR(store_->PutNode(lost));
    n.info.state = NodeState::kLost;
    n.reports.clear();
    n.draining.clear();
    out->lost_nodes.push_back(id);
    MarkDirtyLocked();
  }
  Batch batch;
  for (const auto& [id, job] : active_) {
    if (!HoldsGpus(job.state)) continue;
    for (const auto& a : job.placement) {
      auto n = nodes_.find(a.node_id);
      if (n != nodes_.end() && n->second.info.state != NodeState::kLost) continue;
      Job j = job;
      FP8RT_ASSIGN_OR_RETURN(
          Event ev, RequeueAfterLoss(&j, now,
                                     n == nodes_.end()
                                         ? StrCat("node ", a.node_id, " is not registered")
                                         : StrCat("node ", a.node_id, " lost (no heartbeat for ",
                                                  now - n->second.info.last_heartbeat, "s)")));
      NoteRequeue(&j, n == nodes_.end() ? WallNow() : n->second.last_heartbeat_wall, WallNow());
      (j.state == JobState::kFailed ? out->failed : out->requeued).push_back(j.id);
      batch.Add(j, ev);
      break;
    }
  }
  return CommitLocked(&batch);
}

Status Scheduler::FinishPreemptionsLocked(int64_t now, TickResult* out) {
  Batch batch;
  for (const auto& [id, job] : active_) {
    if (job.state != JobState::kPreempting) continue;
    if (now - job.updated_at < PreemptionGrace(job)) continue;
    Job j = job;
    AddRequeueAfterPreemption(
        &j, now, StrCat("grace period of ", PreemptionGrace(job), "s over; ranks stopped"),
        &batch);
    out->requeued.push_back(id);
  }
  return CommitLocked(&batch);
}

Status Scheduler::PlaceLocked(int64_t now, TickResult* out) {
  if (!dirty_ && now - last_placement_ < options_.replace_interval_s) return Status::Ok();
  dirty_ = false;
  last_placement_ = now;
  out->placement_ran = true;
  std::vector<PendingJob> queue;
  for (const auto& [id, job] : active_) {
    if (job.state == JobState::kPending) queue.push_back({id, job.spec, job.submitted_at});
  }
  if (queue.empty()) return Status::Ok();
  const ClusterSnapshot snapshot = SnapshotLocked(now);
  const PlacementDecision d = Place(snapshot, std::move(queue), options_.placement);
  Batch batch;
  for (const JobDecision& jd : d.jobs) {
    Job j = active_.at(jd.job_id);
    if (jd.kind == DecisionKind::kWait) {
      // Why it waits, for `fp8ctl status` (no event: waiting is not a transition).
      if (j.reason != jd.reason) {
        j.reason = jd.reason;
        batch.Add(j, std::nullopt);
      }
      continue;
    }
    if (jd.kind == DecisionKind::kPlace) {
      FP8RT_ASSIGN_OR_RETURN(Event ev, Transition(&j, JobState::kScheduled, now, jd.reason));
      ++j.attempt;
      if (j.timing.attempt != j.attempt) j.timing = AttemptTiming{.attempt = j.attempt};
      j.timing.placed_at = WallNow();
      j.precision = jd.precision;
      j.precision_source = jd.precision_source;
      j.precision_reason = jd.reason;
      j.placement = jd.assignment;
      batch.Add(j, ev);
      out->scheduled.push_back(j.id);
    } else {
      FP8RT_ASSIGN_OR_RETURN(Event ev, Transition(&j, JobState::kFailed, now, jd.reason));
      batch.Add(j, ev);
      out->failed.push_back(j.id);
    }
  }
  FP8RT_RETURN_IF_ERROR(CommitLocked(&batch));
  // Placing jobs is not news for the next tick; only what frees GPUs or queues jobs is.
  dirty_ = false;
  return PreemptLocked(d, now, out);
}

// For the first few jobs placement left waiting, highest priority first: stop whole gangs of
// lower-priority preemptible RUNNING jobs (ChooseVictims) if that makes the job fit. GPUs of jobs
// already PREEMPTING count as free here, so a job waiting for its victims does not take more.
Status Scheduler::PreemptLocked(const PlacementDecision& d, int64_t now, TickResult* out) {
  constexpr int kCandidatesPerTick = 4;
  int lowest = std::numeric_limits<int>::max();
  std::vector<RunningJob> running;
  for (const auto& [id, job] : active_) {
    if (job.state != JobState::kRunning || !job.spec.preemptible) continue;
    int64_t step = -1;
    for (const auto& a : job.placement) {
      auto n = nodes_.find(a.node_id);
      if (n == nodes_.end()) continue;
      auto r = n->second.reports.find(id);
      if (r != n->second.reports.end()) step = std::max(step, r->second.progress.step);
    }
    const int64_t lost = step < 0 ? 0 : step - std::max<int64_t>(job.checkpoint_step, 0);
    RunningJob r{id, job.spec.priority, true, std::max<int64_t>(lost, 0), job.updated_at};
    // What stopping it costs in seconds: the steps since its checkpoint, redone, and the save.
    if (job.progress.step_s > 0) r.lost_s = static_cast<double>(r.steps_since_checkpoint) * job.progress.step_s;
    if (job.progress.save_s > 0) r.lost_s += job.progress.save_s;
    running.push_back(r);
    lowest = std::min(lowest, job.spec.priority);
  }
  if (running.empty()) return Status::Ok();
  ClusterSnapshot c;
  bool have_snapshot = false;
  int tried = 0;
  for (const JobDecision& jd : d.jobs) {
    if (jd.kind != DecisionKind::kWait) continue;
    auto it = active_.find(jd.job_id);
    if (it == active_.end() || it->second.state != JobState::kPending) continue;
    const Job& job = it->second;
    if (job.spec.priority <= lowest) break;  // queue order: nobody after this one can preempt
    if (tried++ == kCandidatesPerTick) break;
    if (!have_snapshot) {
      c = SnapshotLocked(now);
      for (auto& n : c.nodes) {
        for (auto& g : n.gpu_job) {
          auto a = active_.find(g);
          if (a != active_.end() && a->second.state == JobState::kPreempting) g = kNoJob;
        }
      }
      have_snapshot = true;
    }
    auto plan = ChooseVictims(c, {job.id, job.spec, job.submitted_at}, running, options_.placement);
    if (!plan) continue;
    Batch batch;
    for (int64_t v : plan->victims) {
      Job victim = active_.at(v);
      FP8RT_ASSIGN_OR_RETURN(
          Event ev,
          Transition(&victim, JobState::kPreempting, now,
                     StrCat("preempted for job ", job.id, " (priority ", job.spec.priority, " > ",
                            victim.spec.priority, "); checkpoint requested, stopped after ",
                            PreemptionGrace(victim), "s")));
      batch.Add(victim, ev);
      out->preempting.push_back(v);
    }
    FP8RT_RETURN_IF_ERROR(CommitLocked(&batch));
    // Those GPUs are spoken for; later candidates must not count on them.
    std::set<int64_t> victims(plan->victims.begin(), plan->victims.end());
    for (auto& n : c.nodes) {
      for (auto& g : n.gpu_job) {
        if (victims.count(g)) g = job.id;
      }
    }
    running.erase(std::remove_if(running.begin(), running.end(),
                                 [&](const RunningJob& r) { return victims.count(r.id) > 0; }),
                  running.end());
  }
  return Status::Ok();
}

Result<TickResult> Scheduler::Tick(int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  TickResult out;
  FP8RT_RETURN_IF_ERROR(HandleLostNodesLocked(now, &out));
  FP8RT_RETURN_IF_ERROR(FinishPreemptionsLocked(now, &out));
  FP8RT_RETURN_IF_ERROR(PlaceLocked(now, &out));
  return out;
}

Status Scheduler::CheckFeasible(const JobSpec& spec) const {
  std::vector<NodeInfo> nodes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, n] : nodes_) nodes.push_back(n.info);
  }
  return sched::CheckFeasible(spec, nodes);
}

std::vector<NodeInfo> Scheduler::Nodes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return SnapshotLocked(0).nodes;
}

std::optional<NodeInfo> Scheduler::Node(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!nodes_.count(id)) return std::nullopt;
  for (NodeInfo& n : SnapshotLocked(0).nodes) {
    if (n.id == id) return std::move(n);
  }
  return std::nullopt;
}

bool Scheduler::HasNode(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_.count(id) > 0;
}

TickLoop::TickLoop(Scheduler* scheduler, std::chrono::milliseconds interval, Clock clock,
                   std::function<void(const TickResult&)> on_tick,
                   std::function<void(const Status&)> on_error)
    : scheduler_(scheduler),
      interval_(interval),
      clock_(std::move(clock)),
      on_tick_(std::move(on_tick)),
      on_error_(std::move(on_error)) {}

TickLoop::~TickLoop() { Stop(); }

void TickLoop::Start() {
  stop_ = false;
  thread_ = std::thread([this] {
    while (!stop_) {
      scheduler_->WaitForWork(interval_);
      if (stop_) break;
      auto r = scheduler_->Tick(clock_());
      if (!r.ok()) {
        if (on_error_) on_error_(r.status());
      } else if (on_tick_) {
        on_tick_(*r);
      }
    }
  });
}

void TickLoop::Stop() {
  stop_ = true;
  scheduler_->Wake();
  if (thread_.joinable()) thread_.join();
}

}  // namespace fp8rt::sched

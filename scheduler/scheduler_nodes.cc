// The scheduler's side of the node daemons: registration, heartbeats (reports -> transitions,
// stored before the answer) and the commands each answer carries. Commands are level-triggered:
// every answer says what the node should be doing now, so a lost answer or a scheduler restart
// only delays them.
#include <set>

#include "common/exit_codes.h"

#include "scheduler/scheduler.h"
#include "scheduler/scheduler_internal.h"

namespace fp8rt::sched {

const JobReport* Scheduler::CurrentReport(const NodeRt& node, const Job& job) {
  auto it = node.reports.find(job.id);
  if (it == node.reports.end()) return nullptr;
  // A report of an earlier start (a gang that failed and was placed again) is stale.
  if (it->second.attempt >= 0 && it->second.attempt != job.attempt) return nullptr;
  return &it->second;
}

void NoteRequeue(Job* job, double failed_at, double now) {
  if (job->state != JobState::kPending) return;
  job->timing =
      AttemptTiming{.attempt = job->attempt + 1, .failed_at = failed_at, .requeued_at = now};
}

void AddRequeueAfterPreemption(Job* job, int64_t now, const std::string& what,
                               Scheduler::Batch* batch) {
  auto stopped = Transition(
      job, JobState::kPreempted, now,
      job->hold ? StrCat(what, "; held until `fp8ctl resume ", job->id, "`") : what);
  if (!stopped.ok()) return;
  job->placement.clear();
  batch->Add(*job, *stopped);
  if (job->hold) return;
  auto requeued = Transition(
      job, JobState::kPending, now,
      job->checkpoint_step >= 0
          ? StrCat("requeued after preemption; resumes from checkpoint step ", job->checkpoint_step)
          : std::string("requeued after preemption; no checkpoint yet, "
                        "starts from scratch"));
  job->placement.clear();
  if (requeued.ok()) batch->Add(*job, *requeued);
}

Result<NodeInfo> Scheduler::RegisterNode(const NodeRegistration& reg, int64_t now) {
  FP8RT_RETURN_IF_ERROR(ValidateNodeId(reg.id));
  if (reg.gpus.empty()) return Status::InvalidArgument("gpus: a node must have at least one GPU");
  std::lock_guard<std::mutex> lock(mu_);
  // Jobs on GPUs the node no longer has cannot go on: requeue them first.
  Batch batch;
  for (const auto& [id, job] : active_) {
    if (!OnNode(job, reg.id)) continue;
    for (const auto& a : job.placement) {
      if (a.node_id != reg.id) continue;
      bool gone = false;
      for (int g : a.gpus) gone = gone || static_cast<size_t>(g) >= reg.gpus.size();
      if (!gone) continue;
      Job j = job;
      FP8RT_ASSIGN_OR_RETURN(
          Event ev, RequeueAfterLoss(&j, now,
                                     StrCat("node ", reg.id, " registered again with only ",
                                            reg.gpus.size(), " GPU(s)")));
      batch.Add(j, ev);
    }
  }
  FP8RT_RETURN_IF_ERROR(CommitLocked(&batch));
  NodeInfo info;
  info.id = reg.id;
  info.gpus = reg.gpus;
  info.address = reg.address;
  if (auto known = nodes_.find(reg.id); known != nodes_.end()) {  // a drain outlives a restart
    info.drained = known->second.info.drained;
    info.drain_reason = known->second.info.drain_reason;
  }
  info.state = info.alive_state();
  info.last_heartbeat = now;
  FP8RT_RETURN_IF_ERROR(store_->PutNode(info));
  NodeRt& n = nodes_[reg.id];
  n.info = info;
  n.last_heartbeat_wall = WallNow();
  for (auto it = n.draining.begin(); it != n.draining.end();) {
    bool gone = false;
    for (int g : it->second) gone = gone || static_cast<size_t>(g) >= info.gpus.size();
    it = gone ? n.draining.erase(it) : std::next(it);
  }
  MarkDirtyLocked();
  info.gpu_job.assign(info.gpus.size(), kNoJob);
  return info;
}

Result<NodeInfo> Scheduler::DrainNode(const std::string& node_id, bool drain,
                                      const std::string& reason, const std::string& by,
                                      int64_t now) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(node_id);
    if (it == nodes_.end()) return Status::NotFound(StrCat("node ", node_id, " is not registered"));
    NodeInfo info = it->second.info;
    info.drained = drain;
    info.drain_reason = drain ? (reason.empty() ? StrCat("drained by ", by) : reason) : "";
    if (info.state != NodeState::kLost) info.state = info.alive_state();
    Batch batch;
    for (const auto& [id, job] : active_) {
      if (!drain || !OnNode(job, node_id)) continue;
      Job j = job;
      const std::string why = StrCat("node ", node_id, " drained by ", by,
                                     reason.empty() ? "" : StrCat(" (", reason, ")"));
      if (j.state == JobState::kRunning) {
        j.hold = false;
        FP8RT_ASSIGN_OR_RETURN(
            Event ev, Transition(&j, JobState::kPreempting, now,
                                 StrCat(why, "; checkpointing to move to another node")));
        batch.Add(j, ev);
      } else if (j.state == JobState::kScheduled) {
        FP8RT_ASSIGN_OR_RETURN(Event ev, Transition(&j, JobState::kPending, now,
                                                    StrCat(why, " before the job started; requeued")));
        j.placement.clear();
        batch.Add(j, ev);
      }
    }
    FP8RT_RETURN_IF_ERROR(store_->PutNode(info));
    it->second.info = info;
    FP8RT_RETURN_IF_ERROR(CommitLocked(&batch));
    MarkDirtyLocked();
  }
  auto n = Node(node_id);
  if (!n) return Status::NotFound(StrCat("node ", node_id, " is not registered"));
  return *n;
}

// One job on `node`, given the daemon's report (nullptr: not reported). Adds the transitions the
// report implies to `batch`; reads other gang nodes' latest reports for whole-gang decisions.
void Scheduler::ApplyReport(const NodeRt& node, const Job& job, const JobReport* rep, int64_t now,
                            Batch* batch) const {
  Job j = job;
  bool updated = false;
  if (rep != nullptr && rep->checkpoint_step > j.checkpoint_step) {
    j.checkpoint_step = rep->checkpoint_step;
    j.checkpoint_at = now;
    updated = true;
  }
  // Progress comes from the node of rank 0 (the gang's first).
  if (rep != nullptr && !j.placement.empty() && j.placement[0].node_id == node.info.id &&
      rep->progress.step >= 0) {
    JobProgress p = rep->progress;
    p.save_s = std::max(p.save_s, j.progress.save_s);
    // (A new attempt says what its checkpoints take at its first commit.)
    if (p.checkpoint_disk_bytes < 0) p.checkpoint_disk_bytes = j.progress.checkpoint_disk_bytes;
    p.at = now;
    if (!(p == j.progress)) {
      j.progress = p;
      updated = true;
    }
  }
  auto emit = [&](JobState to, std::string why) {
    auto ev = Transition(&j, to, now, std::move(why));
    if (!ev.ok()) return;
    batch->Add(j, *ev);
    updated = false;
  };
  // The report of every gang node, this one's being `rep`; nullptr where a node has none.
  auto gang_reports = [&] {
    std::vector<const JobReport*> out;
    for (const auto& a : j.placement) {
      if (a.node_id == node.info.id) {
        out.push_back(rep);
        continue;
      }
      auto n = nodes_.find(a.node_id);
      out.push_back(n == nodes_.end() ? nullptr : CurrentReport(n->second, j));
    }
    return out;
  };
  const std::string& node_id = node.info.id;
  if (j.state == JobState::kScheduled && rep != nullptr) {
    bool all = true;
    for (const JobReport* r : gang_reports()) all = all && r != nullptr;
    if (all) {
      emit(JobState::kRunning,
           StrCat("running: every node of the gang reports its ranks (", j.placement.size(),
                  " node(s), ", j.precision ? PrecisionName(*j.precision) : "?", ")"));
    }
  }
  if (j.state == JobState::kRunning) {
    if (rep == nullptr) {
      auto ev = RequeueAfterLoss(&j, now, StrCat("node ", node_id, " no longer reports the job"));
      NoteRequeue(&j, WallNow(), WallNow());
      if (ev.ok()) {
        batch->Add(j, *ev);
        updated = false;
      }
    } else if (rep->status == RankStatus::kExited && rep->exit_code != 0) {
      // What failed, in the daemon's words when it gave some.
      std::string what = rep->failed_rank >= 0
                             ? StrCat("rank ", rep->failed_rank, " on node ", node_id)
                             : StrCat("ranks on node ", node_id);
      what += rep->reason.empty() ? StrCat(" exited with code ", rep->exit_code)
                                  : StrCat(": ", rep->reason, " (exit code ", rep->exit_code, ")");
      if (rep->exit_code == kExitNonFinite || rep->exit_code == kExitUsage) {
        // The same state and data fail the same way again: no restart.
        emit(JobState::kFailed,
             StrCat(what, rep->exit_code == kExitNonFinite
                              ? "; the loss turned NaN/inf: not restarted"
                              : "; a bad config or checkpoint: not restarted"));
      } else {
        // The gang restarts from its last checkpoint, counted against max_restarts.
        auto ev = RequeueAfterLoss(
            &j, now,
            StrCat(what, j.checkpoint_step >= 0
                             ? StrCat("; resumes from checkpoint step ", j.checkpoint_step)
                             : std::string("; no checkpoint yet")));
        NoteRequeue(&j, WallNow() - std::max(0.0, rep->failed_age_s), WallNow());
        if (ev.ok()) {
          batch->Add(j, *ev);
          updated = false;
        }
      }
    } else if (rep->status == RankStatus::kExited) {
      bool all = true;
      for (const JobReport* r : gang_reports()) {
        all = all && r != nullptr && r->status == RankStatus::kExited && r->exit_code == 0;
      }
      if (all) emit(JobState::kCompleted, "every rank exited with code 0");
    }
  } else if (j.state == JobState::kPreempting) {
    if (rep != nullptr && rep->status == RankStatus::kExited && rep->exit_code == 0) {
      emit(JobState::kCompleted, "finished (exit code 0) before the preemption stopped it");
    } else if (rep == nullptr || rep->status == RankStatus::kExited) {
      AddRequeueAfterPreemption(
          &j, now,
          rep == nullptr
              ? StrCat("node ", node_id, " no longer reports the job; stopped")
              : StrCat("ranks on node ", node_id, " stopped (exit code ", rep->exit_code, ")"),
          batch);
      updated = false;
    }
  }
  // The attempt's first step (from the node of rank 0): its start, phase by phase, becomes an
  // event after whatever the report changed.
  AttemptTiming& t = j.timing;
  if (rep != nullptr && rep->startup.step >= 0 && !j.placement.empty() &&
      j.placement[0].node_id == node.info.id && t.attempt == j.attempt && t.placed_at > 0 &&
      t.trained_at == 0) {
    t.trained_at = std::max(t.placed_at, WallNow() - rep->startup.age_s);
    t.load_s = rep->startup.load_s;
    t.first_step_s = rep->startup.first_step_s;
    t.step = rep->startup.step;
    batch->Add(j, Event{now, j.id, j.state, j.state, DescribeAttempt(t)});
    updated = false;
  }
  if (updated) batch->Add(j, std::nullopt);
}

Result<std::vector<NodeCommand>> Scheduler::Heartbeat(const std::string& node_id,
                                                      const HeartbeatRequest& hb, int64_t now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) {
    return Status::NotFound(StrCat("node ", node_id, " is not registered; register it first"));
  }
  NodeRt& node = it->second;
  if (hb.unhealthy_gpus) {
    for (int g : *hb.unhealthy_gpus) {
      if (g < 0 || static_cast<size_t>(g) >= node.info.gpus.size()) {
        return Status::InvalidArgument(StrCat("unhealthy_gpus: GPU ", g, " does not exist; node ",
                                              node_id, " has ", node.info.gpus.size(), " GPU(s)"));
      }
    }
  }
  NodeInfo info = node.info;
  bool changed = info.state != info.alive_state();
  info.state = info.alive_state();
  if (hb.unhealthy_gpus) {
    const std::set<int> bad(hb.unhealthy_gpus->begin(), hb.unhealthy_gpus->end());
    for (size_t g = 0; g < info.gpus.size(); ++g) {
      const bool healthy = bad.count(static_cast<int>(g)) == 0;
      changed = changed || info.gpus[g].healthy != healthy;
      info.gpus[g].healthy = healthy;
    }
  }
  if (changed) {
    FP8RT_RETURN_IF_ERROR(store_->PutNode(info));
    MarkDirtyLocked();
  }
  node.info = info;
  node.info.last_heartbeat = now;
  node.last_heartbeat_wall = WallNow();
  node.reports.clear();
  for (const JobReport& r : hb.jobs) {
    node.reports[r.job_id] = r;
    node.reports[r.job_id].logs.clear();  // stored below, not kept in memory
    // Output is kept only from the ranks this node runs of a job placed on it now (its current
    // attempt): a node cannot write into another node's job, a job not yet submitted, or ranks
    // outside the gang (each rank's log is capped by the store).
    auto a = active_.find(r.job_id);
    std::set<int> ranks;
    if (a != active_.end() && CurrentReport(node, a->second) != nullptr) {
      const Job& job = a->second;
      for (size_t i = 0; i < job.placement.size(); ++i) {
        if (job.placement[i].node_id != node_id) continue;
        const int per_node = job.spec.gpus_per_node;
        for (int k = 0; k < per_node; ++k) ranks.insert(static_cast<int>(i) * per_node + k);
      }
    }
    for (const auto& [rank, text] : r.logs) {
      if (text.empty() || !ranks.count(rank)) continue;
      FP8RT_RETURN_IF_ERROR(store_->AppendLog(r.job_id, rank, text));
    }
  }

  Batch batch;
  for (const auto& [id, job] : active_) {
    if (!OnNode(job, node_id)) continue;
    ApplyReport(node, job, CurrentReport(node, job), now, &batch);
  }
  FP8RT_RETURN_IF_ERROR(CommitLocked(&batch));
  for (auto d = node.draining.begin(); d != node.draining.end();) {
    auto r = node.reports.find(d->first);
    const bool running = r != node.reports.end() && r->second.status == RankStatus::kRunning;
    if (!running) MarkDirtyLocked();
    d = running ? std::next(d) : node.draining.erase(d);
  }
  return CommandsLocked(node, hb);
}

std::vector<NodeCommand> Scheduler::CommandsLocked(const NodeRt& node,
                                                   const HeartbeatRequest& hb) const {
  std::vector<NodeCommand> out;
  const std::string& node_id = node.info.id;
  for (const auto& [id, job] : active_) {
    if (!OnNode(job, node_id)) continue;
    const JobReport* current = CurrentReport(node, job);
    const bool reported = current != nullptr;
    if (job.state == JobState::kScheduled && !reported) {
      NodeCommand c;
      c.kind = CommandKind::kStart;
      c.job_id = id;
      c.attempt = job.attempt;
      c.precision = job.precision.value_or(job.spec.requested_precision().precision);
      for (size_t i = 0; i < job.placement.size(); ++i) {
        c.gang_nodes.push_back(job.placement[i].node_id);
        if (job.placement[i].node_id == node_id) {
          c.node_rank = static_cast<int>(i);
          c.gpus = job.placement[i].gpus;
        }
      }
      if (!job.placement.empty()) {
        auto first = nodes_.find(job.placement[0].node_id);
        c.master_addr = first == nodes_.end() || first->second.info.address.empty()
                            ? job.placement[0].node_id
                            : first->second.info.address;
      }
      c.master_port = job.placement.size() > 1
                          ? options_.rendezvous_port_base + static_cast<int>(id % 1000)
                          : 0;
      c.spec = job.spec;
      c.resume_step = job.checkpoint_step;
      c.reason = job.reason;
      out.push_back(std::move(c));
    } else if (job.state == JobState::kPreempting && reported &&
               current->status == RankStatus::kRunning) {
      NodeCommand c;
      c.kind = CommandKind::kCheckpoint;
      c.job_id = id;
      c.grace_s = PreemptionGrace(job);
      c.reason = job.reason;
      out.push_back(std::move(c));
    }
  }
  for (const JobReport& r : hb.jobs) {
    auto a = active_.find(r.job_id);
    if (a != active_.end() && OnNode(a->second, node_id)) continue;
    NodeCommand c;
    c.kind = CommandKind::kStop;
    c.job_id = r.job_id;
    c.reason = a == active_.end() ? StrCat("job ", r.job_id, " is finished or unknown")
                                  : StrCat("job ", r.job_id, " is ", JobStateName(a->second.state),
                                           " and not placed on ", node_id);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace fp8rt::sched

// The in-memory JobStore twin (same contract as the RocksDB store, no durability), and the checks
// both implementations share.
#include <cstdint>
#include <map>
#include <mutex>

#include "scheduler/node.h"
#include "scheduler/store.h"

namespace fp8rt::sched {

Status ValidatePut(const Job& job, const std::optional<Event>& event) {
  if (job.id <= 0) return Status::InvalidArgument(StrCat("job id ", job.id, " must be > 0"));
  if (event && event->job_id != job.id) {
    return Status::InvalidArgument(
        StrCat("event for job ", event->job_id, " cannot be stored with job ", job.id));
  }
  // The log must end in the state the record holds, or replaying it would disagree with the job.
  if (event && event->to != job.state) {
    return Status::InvalidArgument(StrCat("event of job ", job.id, " ends in ",
                                          JobStateName(event->to), " but the job is ",
                                          JobStateName(job.state)));
  }
  // Round trip: a record that would not read back as this job (a NaN a parser let through, a
  // string that is not UTF-8) is refused here, before anyone is told it was stored.
  auto back = [&]() -> Status {
    try {
      auto j = JobFromJson(JobToJson(job));
      if (!j.ok()) return j.status();
      if (!(*j == job)) return Status::Internal("it reads back as a different job");
      if (event) {
        auto e = EventFromJson(EventToJson(*event));
        if (!e.ok()) return e.status();
        if (!(*e == *event)) return Status::Internal("its event reads back differently");
      }
      return Status::Ok();
    } catch (const std::exception& ex) {
      return Status::Internal(ex.what());
    }
  }();
  if (!back.ok()) {
    return Status::InvalidArgument(StrCat(
        "job ", job.id, ": the record would not read back, so it is not stored: ", back.message()));
  }
  return Status::Ok();
}

Status ValidatePutNode(const NodeInfo& node) {
  if (node.id.empty()) return Status::InvalidArgument("node id must not be empty");
  auto back = NodeFromJson(NodeToJson(node, false));
  const bool same = back.ok() && back->id == node.id && back->gpus == node.gpus &&
                    back->last_heartbeat == node.last_heartbeat && back->state == node.state;
  if (!same) {
    return Status::InvalidArgument(
        StrCat("node ", node.id, ": the record would not read back, so it is not stored",
               back.ok() ? std::string() : StrCat(": ", back.status().message())));
  }
  return Status::Ok();
}

bool MatchesFilter(const Job& job, const JobFilter& filter) {
  if (filter.state && job.state != *filter.state) return false;
  return !filter.owner || job.owner == *filter.owner;
}

namespace {

class MemoryJobStore final : public JobStore {
 public:
  Status Put(const Job& job, const std::optional<Event>& event) override {
    FP8RT_RETURN_IF_ERROR(ValidatePut(job, event));
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[job.id] = job;
    if (event) events_[job.id].push_back(*event);
    return Status::Ok();
  }

  Status PutMany(const std::vector<JobWrite>& writes) override {
    for (const JobWrite& w : writes) FP8RT_RETURN_IF_ERROR(ValidatePut(w.job, w.event));
    std::lock_guard<std::mutex> lock(mu_);
    for (const JobWrite& w : writes) {
      jobs_[w.job.id] = w.job;
      if (w.event) events_[w.job.id].push_back(*w.event);
    }
    return Status::Ok();
  }

  Status PutNode(const NodeInfo& node) override {
    FP8RT_RETURN_IF_ERROR(ValidatePutNode(node));
    std::lock_guard<std::mutex> lock(mu_);
    // Through JSON, so the twin keeps exactly what RocksDB keeps.
    FP8RT_ASSIGN_OR_RETURN(nodes_[node.id], NodeFromJson(NodeToJson(node, false)));
    return Status::Ok();
  }

  Result<std::vector<NodeInfo>> ListNodeRecords(std::vector<UnreadableRecord>*) const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<NodeInfo> out;
    for (const auto& [id, n] : nodes_) out.push_back(n);
    return out;
  }

  Result<Job> Get(int64_t id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return Status::NotFound(StrCat("no job ", id));
    return it->second;
  }

  Result<std::vector<Job>> ListJobs(const JobFilter& filter,
                                    std::vector<UnreadableRecord>*) const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Job> out;
    for (const auto& [id, job] : jobs_) {
      if (MatchesFilter(job, filter)) out.push_back(job);
    }
    return out;
  }

  Result<std::vector<Event>> Events(int64_t job_id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(job_id);
    if (it == events_.end()) return std::vector<Event>{};
    return it->second;
  }

  Result<int64_t> NextJobId() override {
    std::lock_guard<std::mutex> lock(mu_);
    return ++last_id_;
  }

  // Records in memory always read back; this keeps the contract for callers that set aside.
  Status SetAside(const UnreadableRecord& rec,
                  const std::optional<JobWrite>& replacement) override {
    if (replacement) FP8RT_RETURN_IF_ERROR(PutMany({*replacement}));
    std::lock_guard<std::mutex> lock(mu_);
    corrupt_["corrupt/" + rec.key] = rec.raw;
    return Status::Ok();
  }

  Status AppendLog(int64_t job_id, int rank, const std::string& text) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string& log = logs_[{job_id, rank}];
    log = AppendCapped(std::move(log), text);
    return Status::Ok();
  }
  Result<std::vector<int>> LogRanks(int64_t job_id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int> out;
    for (auto it = logs_.lower_bound({job_id, INT32_MIN}); it != logs_.end() && it->first.first == job_id; ++it) {
      out.push_back(it->first.second);
    }
    return out;
  }
  Result<std::string> Log(int64_t job_id, int rank) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = logs_.find({job_id, rank});
    return it == logs_.end() ? std::string() : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<int64_t, int>, std::string> logs_;
  std::map<int64_t, Job> jobs_;
  std::map<int64_t, std::vector<Event>> events_;
  std::map<std::string, NodeInfo> nodes_;
  std::map<std::string, std::string> corrupt_;
  int64_t last_id_ = 0;
};

}  // namespace

std::unique_ptr<JobStore> NewMemoryJobStore() { return std::make_unique<MemoryJobStore>(); }

std::string AppendCapped(std::string log, const std::string& text) {
  log += text;
  if (log.size() <= kMaxLogBytes) return log;
  size_t cut = log.size() - kMaxLogBytes;
  const size_t nl = log.find('\n', cut);
  if (nl != std::string::npos && nl + 1 < log.size()) cut = nl + 1;
  return log.substr(cut);
}

}  // namespace fp8rt::sched

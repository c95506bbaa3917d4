// RocksDB JobStore. Keys: "job/<016x id>" -> job JSON; "event/<016x job>/<016x seq>" -> event
// JSON, seq from a store-wide counter so a job's events iterate in put order; "node/<id>" -> node
// JSON; "meta/last_job_id" and "meta/last_event_seq" -> decimal counters; "corrupt/<key>" -> the
// bytes of a record that did not read back, set aside (SetAside). A transition is one synced
// WriteBatch (job, event, event counter), so after kill -9 a job's state and its log never
// disagree.
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <iomanip>
#include <mutex>
#include <sstream>

#include "scheduler/node.h"
#include "scheduler/store.h"

namespace fp8rt::sched {
namespace {

constexpr char kLastJobId[] = "meta/last_job_id";
constexpr char kLastEventSeq[] = "meta/last_event_seq";

std::string Hex(int64_t v) {
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << static_cast<uint64_t>(v);
  return os.str();
}

std::string JobKey(int64_t id) { return "job/" + Hex(id); }
std::string LogKey(int64_t id, int rank) { return StrCat("log/", Hex(id), "/", rank); }
// The id in "job/<016x>"; 0 if the key does not hold one.
int64_t IdOfKey(const std::string& key) {
  try {
    return static_cast<int64_t>(std::stoull(key.substr(4), nullptr, 16));
  } catch (const std::exception&) {
    return 0;
  }
}
std::string EventPrefix(int64_t job_id) { return "event/" + Hex(job_id) + "/"; }
constexpr char kNodePrefix[] = "node/";

class RocksDbJobStore final : public JobStore {
 public:
  RocksDbJobStore(rocksdb::DB* db, bool sync, int64_t last_job_id, int64_t last_event_seq)
      : db_(db), last_job_id_(last_job_id), last_event_seq_(last_event_seq) {
    write_options_.sync = sync;
  }
  ~RocksDbJobStore() override { delete db_; }

  Status Put(const Job& job, const std::optional<Event>& event) override {
    return PutMany({JobWrite{job, event}});
  }

  Status PutMany(const std::vector<JobWrite>& writes) override {
    for (const JobWrite& w : writes) FP8RT_RETURN_IF_ERROR(ValidatePut(w.job, w.event));
    std::lock_guard<std::mutex> lock(mu_);
    rocksdb::WriteBatch batch;
    int64_t seq = last_event_seq_;
    for (const JobWrite& w : writes) {
      batch.Put(JobKey(w.job.id), JobToJson(w.job));
      if (w.event) batch.Put(EventPrefix(w.job.id) + Hex(++seq), EventToJson(*w.event));
    }
    if (seq != last_event_seq_) batch.Put(kLastEventSeq, std::to_string(seq));
    rocksdb::Status s = db_->Write(write_options_, &batch);
    if (!s.ok()) {
      return Status::IOError(
          StrCat("job store write of ", writes.size(), " job(s)",
                 writes.size() == 1 ? StrCat(" (job ", writes[0].job.id, ")") : std::string(), ": ",
                 s.ToString()));
    }
    last_event_seq_ = seq;
    return Status::Ok();
  }

  Status PutNode(const NodeInfo& node) override {
    FP8RT_RETURN_IF_ERROR(ValidatePutNode(node));
    std::lock_guard<std::mutex> lock(mu_);
    rocksdb::Status s = db_->Put(write_options_, kNodePrefix + node.id, NodeToJson(node, false));
    if (!s.ok())
      return Status::IOError(StrCat("job store write of node ", node.id, ": ", s.ToString()));
    return Status::Ok();
  }

  Result<std::vector<NodeInfo>> ListNodeRecords(
      std::vector<UnreadableRecord>* unreadable) const override {
    std::vector<NodeInfo> out;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(kNodePrefix); it->Valid() && it->key().starts_with(kNodePrefix); it->Next()) {
      auto n = NodeFromJson(it->value().ToString());
      if (!n.ok()) {
        if (unreadable != nullptr) {
          unreadable->push_back(
              {it->key().ToString(), 0, it->value().ToString(), n.status().message()});
        }
        continue;
      }
      out.push_back(std::move(n).value());
    }
    if (!it->status().ok()) return Status::IOError(it->status().ToString());
    return out;
  }

  Result<Job> Get(int64_t id) const override {
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), JobKey(id), &v);
    if (s.IsNotFound()) return Status::NotFound(StrCat("no job ", id));
    if (!s.ok()) return Status::IOError(StrCat("job store read of job ", id, ": ", s.ToString()));
    auto job = JobFromJson(v);
    if (!job.ok()) {
      return Status::Corruption(
          StrCat("job ", id, ": the stored record is unreadable: ", job.status().message()));
    }
    return job;
  }

  Result<std::vector<Job>> ListJobs(const JobFilter& filter,
                                    std::vector<UnreadableRecord>* unreadable) const override {
    std::vector<Job> out;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek("job/"); it->Valid() && it->key().starts_with("job/"); it->Next()) {
      auto job = JobFromJson(it->value().ToString());
      if (!job.ok()) {
        if (unreadable != nullptr) {
          const std::string key = it->key().ToString();
          unreadable->push_back(
              {key, IdOfKey(key), it->value().ToString(), job.status().message()});
        }
        continue;
      }
      if (MatchesFilter(*job, filter)) out.push_back(std::move(job).value());
    }
    if (!it->status().ok()) return Status::IOError(it->status().ToString());
    return out;
  }

  Result<std::vector<Event>> Events(int64_t job_id) const override {
    std::vector<Event> out;
    const std::string prefix = EventPrefix(job_id);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      FP8RT_ASSIGN_OR_RETURN(Event e, EventFromJson(it->value().ToString()));
      out.push_back(std::move(e));
    }
    if (!it->status().ok()) return Status::IOError(it->status().ToString());
    return out;
  }

  Status SetAside(const UnreadableRecord& rec,
                  const std::optional<JobWrite>& replacement) override {
    if (replacement) FP8RT_RETURN_IF_ERROR(ValidatePut(replacement->job, replacement->event));
    std::lock_guard<std::mutex> lock(mu_);
    std::string now;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), rec.key, &now);
    if (!s.ok() || now != rec.raw) {
      return Status::FailedPrecondition(
          StrCat("job store: ", rec.key, " changed since it was found unreadable; not set aside"));
    }
    rocksdb::WriteBatch batch;
    batch.Put("corrupt/" + rec.key, rec.raw);
    int64_t seq = last_event_seq_;
    if (replacement) {
      batch.Put(JobKey(replacement->job.id), JobToJson(replacement->job));
      if (replacement->event) {
        batch.Put(EventPrefix(replacement->job.id) + Hex(++seq), EventToJson(*replacement->event));
        batch.Put(kLastEventSeq, std::to_string(seq));
      }
    } else {
      batch.Delete(rec.key);
    }
    s = db_->Write(write_options_, &batch);
    if (!s.ok())
      return Status::IOError(StrCat("job store: setting aside ", rec.key, ": ", s.ToString()));
    last_event_seq_ = seq;
    return Status::Ok();
  }

  Status AppendLog(int64_t job_id, int rank, const std::string& text) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string log;
    const std::string key = LogKey(job_id, rank);
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &log);
    if (!s.ok() && !s.IsNotFound()) return Status::IOError(StrCat("job store log read: ", s.ToString()));
    s = db_->Put(rocksdb::WriteOptions(), key, AppendCapped(std::move(log), text));
    if (!s.ok()) return Status::IOError(StrCat("job store log write: ", s.ToString()));
    return Status::Ok();
  }
  Result<std::vector<int>> LogRanks(int64_t job_id) const override {
    std::vector<int> out;
    const std::string prefix = "log/" + Hex(job_id) + "/";
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      out.push_back(std::stoi(it->key().ToString().substr(prefix.size())));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  Result<std::string> Log(int64_t job_id, int rank) const override {
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), LogKey(job_id, rank), &v);
    if (s.IsNotFound()) return std::string();
    if (!s.ok()) return Status::IOError(StrCat("job store log read: ", s.ToString()));
    return v;
  }

  Result<int64_t> NextJobId() override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t id = last_job_id_ + 1;
    // Synced before the id is handed out, so a crash can never make it be handed out again.
    rocksdb::Status s = db_->Put(write_options_, kLastJobId, std::to_string(id));
    if (!s.ok()) return Status::IOError(StrCat("job store id counter: ", s.ToString()));
    last_job_id_ = id;
    return id;
  }

 private:
  rocksdb::DB* db_;
  rocksdb::WriteOptions write_options_;
  std::mutex mu_;  // serialises writers so the counters and the batches agree
  int64_t last_job_id_;
  int64_t last_event_seq_;
};

Result<int64_t> ReadCounter(rocksdb::DB* db, const char* key) {
  std::string v;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), key, &v);
  if (s.IsNotFound()) return int64_t{0};
  if (!s.ok()) return Status::IOError(StrCat("job store read of ", key, ": ", s.ToString()));
  try {
    size_t used = 0;
    const long long n = std::stoll(v, &used);
    if (used != v.size() || n < 0) throw std::invalid_argument(v);
    return static_cast<int64_t>(n);
  } catch (const std::exception&) {
    return Status::Corruption(StrCat("job store counter ", key, " = '", v, "' is not a count"));
  }
}

}  // namespace

Result<std::unique_ptr<JobStore>> OpenRocksDbJobStore(const std::string& path,
                                                      const RocksDbJobStoreOptions& options) {
  rocksdb::Options db_options;
  db_options.create_if_missing = options.create_if_missing;
  db_options.paranoid_checks = true;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, path, &raw);
  if (!s.ok()) return Status::IOError(StrCat("cannot open job store '", path, "': ", s.ToString()));
  std::unique_ptr<rocksdb::DB> db(raw);
  FP8RT_ASSIGN_OR_RETURN(int64_t last_job_id, ReadCounter(db.get(), kLastJobId));
  FP8RT_ASSIGN_OR_RETURN(int64_t last_event_seq, ReadCounter(db.get(), kLastEventSeq));
  return std::unique_ptr<JobStore>(
      new RocksDbJobStore(db.release(), options.sync, last_job_id, last_event_seq));
}

}  // namespace fp8rt::sched

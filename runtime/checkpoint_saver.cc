// Asynchronous checkpoints (runtime/checkpoint_saver.h).
#include "runtime/checkpoint_saver.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/checkpoint_fence.h"
#include "common/crc32c.h"
#include "runtime/scale_store.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// O_DIRECT wants its buffer, offset and length aligned to the logical block size; 4 KiB is
// that or a multiple of it on every disk we meet.
constexpr size_t kDirectAlign = 4096;

// Writes all of it at `offset`, or says why not, naming the file (`*err`: the errno).
Status PWriteAll(int fd, const std::string& path, const void* data, size_t n, uint64_t offset,
                 int* err = nullptr) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (err != nullptr) *err = w < 0 ? errno : 0;
      return Status::IOError(StrCat(
          "writing '", path, "' failed: ", w < 0 ? std::strerror(errno) : "nothing was written"));
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

}  // namespace

Status WriteSnapshotArray(StateSnapshot* snapshot, int which, const std::string& path,
                          uint32_t* crc_out, double* fsync_s, std::atomic<uint64_t>* progress) {
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW;
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return Status::IOError(StrCat("cannot create '", path, "': ", std::strerror(errno)));
  int direct = ::open(path.c_str(), (flags & ~O_TRUNC) | O_DIRECT, 0644);  // -1: not here

  const int64_t n = snapshot->elements();
  const int64_t chunk = snapshot->chunk_elements();
  const int64_t pieces = (n + chunk - 1) / chunk;
  std::mutex mu;
  std::condition_variable cv;
  int64_t ready = 0;    // pieces read and checksummed
  int64_t written = 0;  // pieces written
  bool stop = false;
  Status read_status = Status::Ok();
  const float* slot_data[2] = {nullptr, nullptr};
  uint32_t crc = 0;

  std::thread reader([&] {
    for (int64_t i = 0; i < pieces; ++i) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || written >= i - 1; });  // slot i % 2 is free
        if (stop) return;
      }
      const int64_t off = i * chunk;
      const int64_t k = std::min(chunk, n - off);
      auto data = snapshot->Read(which, off, k, static_cast<int>(i % 2));
      if (data.ok()) crc = Crc32c(*data, static_cast<size_t>(k) * sizeof(float), crc);
      std::lock_guard<std::mutex> lock(mu);
      if (!data.ok()) {
        read_status = data.status();
        stop = true;
        cv.notify_all();
        return;
      }
      slot_data[i % 2] = *data;
      ready = i + 1;
      cv.notify_all();
    }
  });

  Status s = Status::Ok();
  for (int64_t i = 0; i < pieces && s.ok(); ++i) {
    const float* data = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || ready > i; });
      if (ready <= i) break;  // the reader failed
      data = slot_data[i % 2];
    }
    const uint64_t off = static_cast<uint64_t>(i * chunk) * sizeof(float);
    size_t bytes = static_cast<size_t>(std::min(chunk, n - i * chunk)) * sizeof(float);
    const size_t head = direct >= 0 && reinterpret_cast<uintptr_t>(data) % kDirectAlign == 0 && off % kDirectAlign == 0
                            ? bytes / kDirectAlign * kDirectAlign
                            : 0;
    if (head > 0) {
      int err = 0;
      s = PWriteAll(direct, path, data, head, off, &err);
      if (!s.ok() && err == EINVAL) {  // this file system takes O_DIRECT's open but not its write
        ::close(direct);
        direct = -1;
        s = PWriteAll(fd, path, data, bytes, off);
        bytes = 0;
      } else {
        bytes -= head;
      }
    }
    if (s.ok() && bytes > 0) {
      s = PWriteAll(fd, path, reinterpret_cast<const uint8_t*>(data) + head, bytes, off + head);
    }
    if (s.ok() && progress != nullptr) {
      *progress += static_cast<uint64_t>(std::min(chunk, n - i * chunk)) * sizeof(float);
    }
    std::lock_guard<std::mutex> lock(mu);
    written = i + 1;
    if (!s.ok()) stop = true;
    cv.notify_all();
  }
  reader.join();
  if (s.ok()) s = read_status;

  const auto f0 = std::chrono::steady_clock::now();
  for (const int f : {direct, fd}) {
    if (f < 0) continue;
    if (s.ok() && ::fsync(f) != 0) {
      s = Status::IOError(StrCat("fsync of '", path, "' failed: ", std::strerror(errno)));
    }
  }
  *fsync_s += Since(f0);
  if (direct >= 0) ::close(direct);
  if (::close(fd) != 0 && s.ok()) {
    s = Status::IOError(StrCat("closing '", path, "' failed: ", std::strerror(errno)));
  }
  *crc_out = crc;
  return s;
}

std::atomic<bool>& CheckpointSaver::HoldWriterForTest() {
  static std::atomic<bool> hold{false};
  return hold;
}

CheckpointSaver::CheckpointSaver(const TrainOptions& o, Precision p, const RankPlace& place,
                                 GptModel* model)
    : o_(o), precision_(p), place_(place), model_(model) {
  owner_ = Sharded() ? place.replica == 0 && (place.zero || place.dp_rank == 0) : place.lead;
}

CheckpointSaver::~CheckpointSaver() {
  on_wait_ = nullptr;  // (its owner may be half gone)
  Join();
}

void CheckpointSaver::Join() {
  if (!writer_.joinable()) return;
  uint64_t seen = ~uint64_t{0};
  while (!written_.load()) {
    const uint64_t now = written_bytes_.load();
    if (on_wait_ && now != seen) {
      on_wait_();
      seen = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  writer_.join();
}

Status CheckpointSaver::Begin(int64_t step, const DataCursor& cursor,
                              std::optional<SaveReport>* finished) {
  if (pending_) FP8RT_RETURN_IF_ERROR(Finish(finished));
  const auto t0 = Clock::now();
  report_ = SaveReport{};
  report_.step = step;
  files_.clear();
  written_ = false;
  ck_ = Checkpoint{};
  ck_.step = step;
  ck_.fingerprint = Fingerprint(o_.config, precision_);
  ck_.state = {{"step", std::to_string(step)},
               {"data.epoch", std::to_string(cursor.epoch)},
               {"data.index", std::to_string(cursor.index)},
               {"precision", PrecisionName(precision_)}};
  if (!cursor.shards.empty()) ck_.state["data.shards"] = cursor.shards;
  if (Sharded()) {
    ck_.state["shards.dp"] = std::to_string(place_.dp);
    ck_.state["shards.tp"] = std::to_string(place_.tp);
    ck_.state["shards.zero"] = place_.zero ? "1" : "0";
  }
  // The scale state, the same on every rank, is written once, by rank 0.
  scales_.clear();
  if (precision_ == Precision::kFp8 && place_.lead) {
    FP8RT_ASSIGN_OR_RETURN(scales_, model_->ExportScales());
  }
  if (Sharded()) {
    // Rank 0 empties the staging directory; the others wait for it.
    const CheckpointWriter writer(o_.checkpoint_dir, o_.attempt);
    const Status prepared = place_.lead ? writer.PrepareStaging(step) : Status::Ok();
    FP8RT_ASSIGN_OR_RETURN(auto ready, model_->GatherAcrossReplicas(prepared.ok() ? 1 : 0));
    FP8RT_RETURN_IF_ERROR(prepared);
    if (ready[0] != 1) {
      return Status::IOError(StrCat("rank 0 could not prepare checkpoint step ", step, " in '",
                                    o_.checkpoint_dir, "'"));
    }
  }
  if (owner_) {
    const auto s0 = Clock::now();
    FP8RT_ASSIGN_OR_RETURN(snapshot_, model_->SnapshotOwnedState());
    report_.snapshot_s = Since(s0);
    report_.on_device = snapshot_->on_device();
  }
  report_.blocked_s = Since(t0);
  started_ = t0;
  pending_ = true;
  if (owner_) {
    writer_ = std::thread([this] { Write(); });
  } else {
    written_ = true;
  }
  return Status::Ok();
}

void CheckpointSaver::Write() {
  while (HoldWriterForTest().load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const CheckpointWriter writer(o_.checkpoint_dir, o_.attempt);
  const int64_t step = report_.step;
  const std::string staging = writer.StagingDir(step);
  auto fail = [&](const Status& s) {
    report_.error = s.message();
    report_.error_code = s.code();
    snapshot_.reset();
    std::error_code ec;
    if (!Sharded()) fs::remove_all(staging, ec);  // (sharded: rank 0's, once every rank is done)
    written_ = true;
  };
  if (!Sharded()) {
    if (const Status s = writer.PrepareStaging(step); !s.ok()) return fail(s);
  }
  const auto w0 = Clock::now();
  double fsync_s = 0;
  const int64_t n = snapshot_->elements();
  for (int i = 0; i < 3; ++i) {
    const std::string name = Sharded()
                                 ? ShardFileName(kArrayNames[i], place_.dp_rank, place_.tp_rank)
                                 : StrCat(i == 0   ? "master"
                                          : i == 1 ? "adam_m"
                                                   : "adam_v",
                                          ".bin");
    const std::string path = (fs::path(staging) / name).string();
    uint32_t crc = 0;
    if (const Status s = WriteSnapshotArray(snapshot_.get(), i, path, &crc, &fsync_s, &written_bytes_); !s.ok()) {
      return fail(s);
    }
    const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
    files_.push_back({name, bytes, crc});
    report_.bytes += bytes;
  }
  report_.fsync_s = fsync_s;
  report_.write_s = Since(w0) - fsync_s;
  snapshot_.reset();  // the next checkpoint may take one
  if (!Sharded()) {
    const auto c0 = Clock::now();
    if (const Status s = CommitAlone(); !s.ok()) return fail(s);
    report_.commit_s = Since(c0);
    Retain();
  }
  written_ = true;
}

Status CheckpointSaver::PutScales() {
  if (precision_ != Precision::kFp8 || !place_.lead) return Status::Ok();
  // (A stale attempt stops before it writes scale state for steps the job may redo.)
  FP8RT_RETURN_IF_ERROR(HoldCheckpointFence(o_.checkpoint_dir, o_.attempt).status());
  // Scales first: a checkpoint that LATEST names always has its scale state.
  std::error_code ec;
  fs::create_directories(o_.checkpoint_dir, ec);
  FP8RT_ASSIGN_OR_RETURN(auto store, ScaleStore::Open(ScaleStorePath(o_.checkpoint_dir), true));
  return store->Put(report_.step, scales_);
}

void CheckpointSaver::Retain() {
  const TrainConfig& t = o_.config.train;
  auto removed = PruneCheckpoints(o_.checkpoint_dir, t.keep_checkpoints,
                                  t.keep_checkpoints_every, o_.attempt);
  if (!removed.ok()) {
    report_.retention_error = removed.status().message();
  } else {
    report_.removed = *removed;
    // Their scale state goes with them.
    if (!removed->empty() && precision_ == Precision::kFp8) {
      auto store = ScaleStore::Open(ScaleStorePath(o_.checkpoint_dir), false);
      const Status s = store.ok() ? (*store)->Delete(*removed) : store.status();
      if (!s.ok()) report_.retention_error = s.message();
    }
  }
  report_.disk_bytes = CheckpointDiskBytes(o_.checkpoint_dir);
}

Status CheckpointSaver::CommitAlone() {
  FP8RT_RETURN_IF_ERROR(PutScales());
  return CheckpointWriter(o_.checkpoint_dir, o_.attempt).Commit(ck_, files_);
}

Status CheckpointSaver::Poll(std::optional<SaveReport>* done) {
  if (!pending_) return Status::Ok();
  if (Sharded()) return CommitSharded(false, done);
  if (!written_.load()) return Status::Ok();
  Join();
  report_.total_s = Since(started_);
  pending_ = false;
  *done = report_;
  return Status::Ok();
}

Status CheckpointSaver::Finish(std::optional<SaveReport>* done) {
  if (!pending_) return Status::Ok();
  if (Sharded()) return CommitSharded(true, done);
  Join();
  report_.total_s = Since(started_);
  pending_ = false;
  *done = report_;
  return Status::Ok();
}

Status CheckpointSaver::CommitSharded(bool wait, std::optional<SaveReport>* done) {
  if (wait) {
    Join();
  } else {
    // Everyone's writer done? (Every rank asks at the same steps, so they all go on together.)
    FP8RT_ASSIGN_OR_RETURN(auto all, model_->GatherAcrossReplicas(written_.load() ? 1 : 0));
    for (uint64_t v : all) {
      if (v != 1) return Status::Ok();
    }
    Join();
  }
  const auto c0 = Clock::now();
  // Each rank's files: (top bits) 1 written with its checksum, 2 nothing to write, 0 failed.
  std::vector<uint64_t> told[3];
  for (int i = 0; i < 3; ++i) {
    const bool ok = report_.error.empty() && files_.size() == 3;
    const uint64_t v = !owner_ ? uint64_t{2} << 32
                       : ok    ? (uint64_t{1} << 32 | files_[i].crc32c)
                               : 0;
    FP8RT_ASSIGN_OR_RETURN(told[i], model_->GatherAcrossReplicas(v));
  }
  Status committed = Status::Ok();
  if (place_.lead) {
    std::vector<CheckpointFile> files;
    const uint64_t bytes = files_.empty() ? 0 : files_[0].bytes;
    for (size_t r = 0; r < told[0].size() && committed.ok(); ++r) {
      const int d = static_cast<int>(r) / place_.tp, t = static_cast<int>(r) % place_.tp;
      for (int i = 0; i < 3 && committed.ok(); ++i) {
        const uint64_t v = told[i][r];
        if (v >> 32 == 2) continue;
        if (v >> 32 != 1) {
          committed = Status::IOError(
              StrCat("rank ", r, " could not write its checkpoint shard",
                     r == 0 && !report_.error.empty() ? StrCat(": ", report_.error) : ""));
          break;
        }
        // Every shard of one array has this rank's size (ZeRO-1 and TP split evenly).
        files.push_back(
            {ShardFileName(kArrayNames[i], d, t), bytes, static_cast<uint32_t>(v & 0xffffffffu)});
      }
    }
    if (committed.ok()) committed = PutScales();
    if (committed.ok()) {
      committed = CheckpointWriter(o_.checkpoint_dir, o_.attempt).Commit(ck_, files);
    }
    if (!committed.ok()) {
      std::error_code ec;
      fs::remove_all(CheckpointWriter(o_.checkpoint_dir, o_.attempt).StagingDir(report_.step), ec);
    }
  }
  FP8RT_ASSIGN_OR_RETURN(auto acks, model_->GatherAcrossReplicas(committed.ok() ? 1 : 0));
  if (!committed.ok()) {
    report_.error = committed.message();
    report_.error_code = committed.code();
  } else if (acks[0] != 1 && report_.error.empty()) {
    report_.error = StrCat("rank 0 could not commit checkpoint step ", report_.step, " in '",
                           o_.checkpoint_dir, "'");
  }
  report_.commit_s = Since(c0);
  if (place_.lead && committed.ok()) Retain();
  report_.total_s = Since(started_);
  pending_ = false;
  *done = report_;
  return Status::Ok();
}

}  // namespace fp8rt

// Checkpoints that do not stop training. At a checkpoint step each rank copies what it owns
// (GptModel::SnapshotOwnedState: the master weights and AdamW moments, on the device in
// milliseconds where it has room), the FP8 scale state and the data cursor; training goes on
// while a writer thread streams the copy into the checkpoint's staging directory (64 MiB reads,
// CRC-32C in hardware, large sequential writes, fsync) and commits it: the scale state into
// RocksDB, then the manifest, the rename and LATEST (runtime/checkpoint.h), under the job's
// checkpoint fence. At most one write is in flight per rank: the next checkpoint waits for it.
//
// Alone, or under plain data parallelism (rank 0 writes the whole model), the writer commits by
// itself. Under TP or ZeRO-1 every rank writes its shard and rank 0 commits once every rank has
// written: the ranks learn that in small collectives at step boundaries (Poll), so every rank
// must call Begin, Poll and Finish at the same steps.
//
// A write that fails (a full disk, an I/O error) is reported naming the file, its staging
// directory removed, and the last committed checkpoint left as it was; the trainer stops or goes
// on as train.on_checkpoint_error says.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "runtime/checkpoint.h"
#include "runtime/data.h"
#include "runtime/gpt.h"
#include "runtime/train_checkpoint.h"
#include "runtime/trainer.h"

namespace fp8rt {

// What one save did and measured (the metrics line of the step it committed at).
struct SaveReport {
  int64_t step = -1;       // the checkpoint's step
  double blocked_s = 0;    // training stopped for it: the snapshot, the scale export, staging
  double snapshot_s = 0;   // of which the snapshot
  double write_s = 0;      // the writer: reading the snapshot out, checksums, writes
  double fsync_s = 0;      // the writer's fsyncs
  double commit_s = 0;     // scale state, manifest, rename, LATEST (and waiting for the ranks)
  double total_s = 0;      // from the snapshot to the commit: what a preemption waits for
  uint64_t bytes = 0;      // this rank's files
  bool on_device = false;  // where the snapshot was
  // Rank 0, after the commit: the checkpoints retention removed (train.keep_checkpoints), the
  // bytes the committed ones take now, and why retention failed ("": it did not).
  std::vector<int64_t> removed;
  uint64_t disk_bytes = 0;
  std::string retention_error;
  std::string error;       // a failed save: what failed, naming the file; nothing committed
  // Its kind: kFailedPrecondition when a later attempt of the job holds the checkpoint fence
  // (this run is stale and must stop whatever train.on_checkpoint_error says).
  StatusCode error_code = StatusCode::kOk;
};

// One array of a snapshot into `path`: a reader thread brings piece i into slot i % 2 (from the
// device, where the snapshot lives there) and checksums it while this thread writes piece i - 1,
// so the disk never waits for the copy. Aligned pieces go through O_DIRECT (no page cache to fill
// and flush: what `dd oflag=direct` measures); the tail, and everything on a file system that
// refuses O_DIRECT (tmpfs), through the page cache.
// `*crc` gets the file's CRC-32C; `*fsync_s` grows by the time fsync took. Errors name the file.
// `progress`, when given, grows by each piece's bytes once written.
Status WriteSnapshotArray(StateSnapshot* snapshot, int which, const std::string& path,
                          uint32_t* crc, double* fsync_s,
                          std::atomic<uint64_t>* progress = nullptr);

class CheckpointSaver {
 public:
  // `model` must outlive the saver. Every rank of a sharded checkpoint (TP or ZeRO-1) has one;
  // otherwise rank 0 alone.
  CheckpointSaver(const TrainOptions& o, Precision p, const RankPlace& place, GptModel* model);
  ~CheckpointSaver();  // waits for the write in flight (and, alone, lets it commit)
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // A checkpoint of `step` taken now: waits for the write in flight to finish first (its report,
  // if any, goes to `finished`), snapshots, and starts the writer. An error here (the snapshot,
  // a collective) is the trainer's error; a failed write is reported, not returned.
  Status Begin(int64_t step, const DataCursor& cursor, std::optional<SaveReport>* finished);
  // At a step boundary: `*done` is the report of a save that finished (committed or failed).
  Status Poll(std::optional<SaveReport>* done);
  // Waits for the save in flight and commits it.
  Status Finish(std::optional<SaveReport>* done);
  bool pending() const { return pending_; }
  int64_t pending_step() const { return pending_ ? report_.step : -1; }

  // Called while training waits for the writer (a synchronous save, the last one, a checkpoint
  // due while the last is still being written), each time the writer has written more: the
  // trainer's liveness (a {"busy": "checkpointing"} metrics line).
  void set_on_wait(std::function<void()> f) { on_wait_ = std::move(f); }

  // Test hook: while set, the writer waits before its first write (training steps go on).
  static std::atomic<bool>& HoldWriterForTest();

 private:
  bool Sharded() const { return place_.tp > 1 || place_.zero; }
  // Writes this rank's files from the snapshot (the writer thread); commits alone when not
  // sharded.
  void Write();
  // Under TP/ZeRO-1: every rank says whether its writer is done; when all are, rank 0 commits.
  // Collectives: every rank calls it at the same steps.
  Status CommitSharded(bool wait, std::optional<SaveReport>* done);
  Status CommitAlone();
  // Rank 0, after a commit: retention and the checkpoints' disk use, into report_.
  void Retain();
  Status PutScales();
  void Join();

  const TrainOptions& o_;
  Precision precision_;
  RankPlace place_;
  GptModel* model_;
  bool owner_ = true;  // writes files (sharded without ZeRO: replica 0's TP ranks only)

  bool pending_ = false;
  std::chrono::steady_clock::time_point started_;
  Checkpoint ck_;  // the manifest's fingerprint and state
  std::vector<TensorScaleRecord> scales_;
  std::unique_ptr<StateSnapshot> snapshot_;
  std::vector<CheckpointFile> files_;  // what the writer staged
  SaveReport report_;
  std::thread writer_;
  std::atomic<bool> written_{false};  // the writer is done (report_.error says how)
  std::atomic<uint64_t> written_bytes_{0};  // so far, by the writer (all saves)
  std::function<void()> on_wait_;
};

}  // namespace fp8rt

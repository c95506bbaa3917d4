// Checkpoint files: each checkpoint is a directory step_NNNNNNNN/ of binary blobs plus a
// manifest (sizes, CRC-32C, the model/recipe fingerprint), written to a staging directory,
// fsynced, then renamed into place; LATEST names the newest. A missing, truncated, corrupted or
// mismatched checkpoint is refused with the reason and nothing is overwritten.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8rt {

struct CheckpointBlob {
  std::string name;           // file name inside the checkpoint directory
  std::vector<uint8_t> bytes;
};

struct Checkpoint {
  int64_t step = 0;
  // What must match on resume (model shape, precision recipe), as key -> value strings.
  std::map<std::string, std::string> fingerprint;
  // Small scalar state (RNG, data cursor, scheduler), as key -> value strings.
  std::map<std::string, std::string> state;
  std::vector<CheckpointBlob> blobs;
  // Files the manifest lists that the reader was told not to read (ReadCheckpoint's `wanted`):
  // they have no blob, and a part of them reads as zeros (CheckpointArray).
  std::set<std::string> skipped;
  const CheckpointBlob* Find(const std::string& name) const;
};

// A file already written into a checkpoint's staging directory.
struct CheckpointFile {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

class CheckpointWriter {
 public:
  // `attempt` >= 0: the writer is that attempt (start) of a job, and each phase checks the
  // directory's fence (common/checkpoint_fence.h): once a later attempt has started, it is
  // refused (FailedPrecondition) and LATEST is left as it was. -1: not fenced.
  explicit CheckpointWriter(std::string dir, int attempt = -1)
      : dir_(std::move(dir)), attempt_(attempt) {}
  // Writes step_<step>/ atomically and points LATEST at it.
  Status Write(const Checkpoint& ckpt) const;

  // The same in three phases, for checkpoints that several processes write into one directory
  // (each rank its shard; the directory must be on a filesystem they share): one process
  // prepares an empty staging directory, then every writer stages its files (written and
  // fsynced), then one process commits: writes ckpt's own blobs and the manifest (which lists
  // the staged files too, with their sizes and checksums), renames the directory into place and
  // points LATEST at it. Until the commit nothing a reader sees changes.
  Status PrepareStaging(int64_t step) const;
  Result<CheckpointFile> StageFile(int64_t step, const std::string& name, const void* bytes,
                                   size_t n) const;
  Status Commit(const Checkpoint& ckpt, const std::vector<CheckpointFile>& staged) const;
  // Where step's files are staged (this attempt's: each attempt stages apart).
  std::string StagingDir(int64_t step) const;

 private:
  std::string dir_;
  int attempt_ = -1;
};

// Reads the checkpoint LATEST points at (or `step` when >= 0), verifying every blob's size and
// checksum, and that `expected_fingerprint` matches (keys present in both must be equal).
// `on_progress` is called after each 64 MiB read (a long load is not a hang). `wanted`, when
// given, is asked for each file with the checkpoint's state: a file it declines is neither read
// nor checked; it is listed in `skipped`, with no blob.
using WantedFile =
    std::function<bool(const std::map<std::string, std::string>& state, const std::string& name)>;
Result<Checkpoint> ReadCheckpoint(const std::string& dir, int64_t step,
                                  const std::map<std::string, std::string>& expected_fingerprint,
                                  const std::function<void()>& on_progress = {},
                                  const WantedFile& wanted = {});
// Step LATEST points at, or NotFound.
Result<int64_t> LatestCheckpointStep(const std::string& dir);
std::string CheckpointStepDir(const std::string& dir, int64_t step);

// Retention (train.keep_checkpoints, train.keep_checkpoints_every): of the committed
// checkpoints in `dir` (step_NNNNNNNN directories), removes those older than LATEST's that are
// neither among the `keep` newest (LATEST's counted) nor at a multiple of `keep_every` (0: none
// kept for that). Never the one LATEST names (what a resume takes), nor any newer than it;
// `keep` 0 keeps everything. Each is renamed aside, then removed. With `attempt` >= 0, under the
// directory's fence (a stale attempt removes nothing). The removed steps, ascending.
Result<std::vector<int64_t>> PruneCheckpoints(const std::string& dir, int keep, int64_t keep_every,
                                              int attempt);
// Bytes on disk of the committed checkpoints in `dir` (the step directories).
uint64_t CheckpointDiskBytes(const std::string& dir);

}  // namespace fp8rt

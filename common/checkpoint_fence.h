// The fence that keeps a stale attempt of a job from writing its checkpoints. A job's checkpoint
// directory holds ATTEMPT: the latest attempt (start) of the job that may write there. The node
// daemon raises it before it starts an attempt's ranks; a trainer told its attempt (fp8train
// --attempt) checks it under a shared lock while it commits, so once a newer attempt has started,
// an older one's commit is refused and the last good checkpoint is never replaced by it. POSIX
// record locks (fcntl), which NFS supports, order the raise and the commits.
#pragma once

#include <string>

#include "common/status.h"

namespace fp8rt {

inline constexpr char kCheckpointFenceFile[] = "ATTEMPT";

// Raises `dir`'s fence to `attempt` (>= 0) under an exclusive lock, waiting for a commit in
// progress to finish. FailedPrecondition when it already names a later attempt (this start is
// itself stale).
Status RaiseCheckpointFence(const std::string& dir, int attempt);

// The fence held for a commit: a shared lock on ATTEMPT, released when this goes out of scope.
class FenceHold {
 public:
  FenceHold() = default;
  FenceHold(FenceHold&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FenceHold& operator=(FenceHold&& o) noexcept;
  FenceHold(const FenceHold&) = delete;
  FenceHold& operator=(const FenceHold&) = delete;
  ~FenceHold();

 private:
  friend Result<FenceHold> HoldCheckpointFence(const std::string& dir, int attempt);
  explicit FenceHold(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// For a writer of attempt `attempt`: OK (holding the fence until the hold is dropped) when no
// later attempt has raised it; FailedPrecondition naming both attempts otherwise. attempt < 0
// (a run nobody fences: fp8train by hand) always passes and holds nothing. A directory without
// a fence passes too.
Result<FenceHold> HoldCheckpointFence(const std::string& dir, int attempt);

}  // namespace fp8rt

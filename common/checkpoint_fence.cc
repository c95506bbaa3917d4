// The checkpoint fence (common/checkpoint_fence.h).
#include "common/checkpoint_fence.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace fp8rt {
namespace {

// Blocks until the lock (F_RDLCK or F_WRLCK over the whole file) is held.
bool Lock(int fd, short type) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  while (::fcntl(fd, F_SETLKW, &l) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

// The attempt the fence names; -1 when it is empty.
Result<int> ReadFence(int fd, const std::string& path) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n < 0) return Status::IOError(StrCat("cannot read '", path, "': ", std::strerror(errno)));
  if (n == 0) return -1;
  char* end = nullptr;
  const long v = std::strtol(buf, &end, 10);
  if (end == buf || v < 0 || v > 1'000'000'000) {
    return Status::Corruption(StrCat("'", path, "' does not hold an attempt number"));
  }
  return static_cast<int>(v);
}

}  // namespace

FenceHold& FenceHold::operator=(FenceHold&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

FenceHold::~FenceHold() {
  if (fd_ >= 0) ::close(fd_);  // (closing releases the lock)
}

Status RaiseCheckpointFence(const std::string& dir, int attempt) {
  const std::string path = (std::filesystem::path(dir) / kCheckpointFenceFile).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::IOError(StrCat("cannot open '", path, "': ", std::strerror(errno)));
  if (!Lock(fd, F_WRLCK)) {
    const int err = errno;
    ::close(fd);
    return Status::IOError(StrCat("cannot lock '", path, "': ", std::strerror(err)));
  }
  Status result = Status::Ok();
  auto current = ReadFence(fd, path);
  if (!current.ok()) {
    result = current.status();
  } else if (*current > attempt) {
    result = Status::FailedPrecondition(StrCat("the checkpoint directory '", dir,
                                               "' belongs to attempt ", *current,
                                               " of the job, later than this attempt ", attempt));
  } else {
    const std::string text = StrCat(attempt, "\n");
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
        ::fsync(fd) != 0) {
      result = Status::IOError(StrCat("cannot write '", path, "': ", std::strerror(errno)));
    }
  }
  ::close(fd);
  return result;
}

Result<FenceHold> HoldCheckpointFence(const std::string& dir, int attempt) {
  if (attempt < 0) return FenceHold();
  const std::string path = (std::filesystem::path(dir) / kCheckpointFenceFile).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return FenceHold();
    return Status::IOError(StrCat("cannot open '", path, "': ", std::strerror(errno)));
  }
  FenceHold hold(fd);
  if (!Lock(fd, F_RDLCK)) {
    return Status::IOError(StrCat("cannot lock '", path, "': ", std::strerror(errno)));
  }
  FP8RT_ASSIGN_OR_RETURN(const int current, ReadFence(fd, path));
  if (current > attempt) {
    return Status::FailedPrecondition(StrCat(
        "checkpoint refused: this run is attempt ", attempt, " of the job, and attempt ", current,
        " has started since (", path, "); a stale attempt never replaces the job's checkpoints"));
  }
  return hold;
}

}  // namespace fp8rt

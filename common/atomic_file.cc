// Durable file writes (common/atomic_file.h).
#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

namespace fp8rt {

namespace fs = std::filesystem;

Status FsyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return Status::IOError(StrCat("open for fsync '", path, "' failed"));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::IOError(StrCat("fsync '", path, "' failed"));
  return Status::Ok();
}

Status WriteFileSynced(const std::string& path, const void* bytes, size_t n, int mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::IOError(StrCat("cannot create '", path, "': ", std::strerror(errno)));
  const auto* p = static_cast<const uint8_t*>(bytes);
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd, p + done, n - done);
    if (w <= 0) {
      ::close(fd);
      return Status::IOError(StrCat("short write to '", path, "'"));
    }
    done += static_cast<size_t>(w);
  }
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::IOError(StrCat("fsync '", path, "' failed"));
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, const void* bytes, size_t n, int mode) {
  const std::string tmp = path + ".tmp";
  FP8RT_RETURN_IF_ERROR(WriteFileSynced(tmp, bytes, n, mode));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IOError(StrCat("rename '", tmp, "' -> '", path, "': ", ec.message()));
  const fs::path dir = fs::path(path).parent_path();
  return FsyncPath(dir.empty() ? "." : dir.string(), true);
}

}  // namespace fp8rt

// Durable file writes (common/atomic_file.h).
#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
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

namespace {

Status WriteFd(int fd, const std::string& path, const void* bytes, size_t n) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      return Status::IOError(StrCat("write to '", path, "' failed: ", std::strerror(err)));
    }
    done += static_cast<size_t>(w);
  }
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::IOError(StrCat("fsync '", path, "' failed"));
  return Status::Ok();
}

}  // namespace

Status CreatePrivateDirectories(const std::string& path, std::string* tightened) {
  std::error_code ec;
  fs::path built;
  for (const fs::path& part : fs::path(path)) {
    built /= part;
    if (fs::exists(built, ec)) continue;
    if (::mkdir(built.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::IOError(
          StrCat("cannot create '", built.string(), "': ", std::strerror(errno)));
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::IOError(StrCat("'", path, "' is not a directory"));
  }
  if ((st.st_mode & 077) != 0) {
    char was[8];
    std::snprintf(was, sizeof was, "%04o", st.st_mode & 07777);
    if (::chmod(path.c_str(), 0700) != 0) {
      return Status::IOError(
          StrCat("'", path, "' is mode ", was, " and cannot be made 0700: ", std::strerror(errno)));
    }
    if (tightened != nullptr) {
      *tightened = StrCat(path, " was mode ", was, "; now 0700 (it holds fp8d's state)");
    }
  }
  return Status::Ok();
}

Status WriteFileSynced(const std::string& path, const void* bytes, size_t n, int mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return Status::IOError(StrCat("cannot create '", path, "': ", std::strerror(errno)));
  return WriteFd(fd, path, bytes, n);
}

Status WriteFileAtomic(const std::string& path, const void* bytes, size_t n, int mode) {
  const std::string tmp = path + ".tmp";
  // A fresh temp file: whatever an earlier crash (or someone else) left at that name, a symbolic
  // link included, is unlinked, and O_EXCL | O_NOFOLLOW make sure the file written is the one
  // created here.
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) {
    return Status::IOError(StrCat("cannot remove '", tmp, "': ", std::strerror(errno)));
  }
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return Status::IOError(StrCat("cannot create '", tmp, "': ", std::strerror(errno)));
  FP8RT_RETURN_IF_ERROR(WriteFd(fd, tmp, bytes, n));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IOError(StrCat("rename '", tmp, "' -> '", path, "': ", ec.message()));
  const fs::path dir = fs::path(path).parent_path();
  return FsyncPath(dir.empty() ? "." : dir.string(), true);
}

}  // namespace fp8rt

// Regular-file reads (common/read_file.h).
#include "common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fp8rt {

const char* FileTypeName(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
  }
  return "not a regular file";
}

Result<int> OpenRegularFile(const std::string& path, const std::string& what, bool no_follow) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(
      path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (no_follow ? O_NOFOLLOW : 0));
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(StrCat(what, " '", path, "' does not exist"));
    if (err == ELOOP && no_follow) {
      return Status::InvalidArgument(
          StrCat(what, " '", path, "' is a symbolic link; its target must be named instead"));
    }
    return Status::InvalidArgument(
        StrCat(what, " '", path, "' cannot be opened: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(StrCat(what, " '", path, "' is ", FileTypeName(st.st_mode),
                                          "; a regular file is required"));
  }
  // Reads of a regular file never block; plain blocking semantics from here on.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

Result<std::string> ReadRegularFile(const std::string& path, const std::string& what,
                                    const ReadOptions& o) {
  FP8RT_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, what, o.no_follow));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > o.max_bytes) {
    ::close(fd);
    return Status::InvalidArgument(StrCat(what, " '", path, "' is ", st.st_size, " bytes; at most ",
                                          o.max_bytes, " are allowed"));
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::IOError(StrCat(what, " '", path, "': read failed: ", std::strerror(err)));
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > o.max_bytes) {  // it grew while being read
      ::close(fd);
      return Status::InvalidArgument(StrCat(what, " '", path, "' is more than ", o.max_bytes,
                                            " bytes; at most ", o.max_bytes, " are allowed"));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace fp8rt

// Durable file writes, the one implementation (checkpoints, fp8d's port and token files, the node
// daemon's job files): write + fsync, and the atomic replace through path.tmp + rename + fsync of
// the directory, so a reader sees the old file or the new one, never a torn one, also after a
// power cut.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace fp8rt {

// Creates `path` and its missing parents with mode 0700 (fp8d's state: the job store, logs,
// tokens, checkpoints). An existing `path` readable or writable by others is made 0700 and, when
// `tightened` is given, it says so ("--data-dir /x was mode 0755; now 0700").
Status CreatePrivateDirectories(const std::string& path, std::string* tightened = nullptr);

// fsync of a file, or of a directory (so renames and new entries in it are durable).
Status FsyncPath(const std::string& path, bool directory);
// Creates or truncates `path` (mode 0644, or `mode`), writes `bytes` and fsyncs it. A symbolic
// link at `path` is refused (O_NOFOLLOW), never followed.
Status WriteFileSynced(const std::string& path, const void* bytes, size_t n, int mode = 0644);
// Replaces `path` atomically: path.tmp created afresh (O_EXCL | O_NOFOLLOW: a file or a link left
// at that name is removed first, never written through), written and fsynced, renamed over path,
// directory fsynced.
Status WriteFileAtomic(const std::string& path, const void* bytes, size_t n, int mode = 0644);
inline Status WriteFileAtomic(const std::string& path, const std::string& text, int mode = 0644) {
  return WriteFileAtomic(path, text.data(), text.size(), mode);
}

}  // namespace fp8rt

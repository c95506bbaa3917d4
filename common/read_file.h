// Reading a file a person or a program named, without surprises: it must be a regular file (a
// FIFO, a device or a directory is refused, and opening one never blocks) of at most a given
// size, so that nothing reads a named pipe that never ends or a 16 GiB "config".
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace fp8rt {

struct ReadOptions {
  size_t max_bytes = size_t{1} << 30;  // larger files are refused. Default: 1 GiB
  // Refuse a path whose last component is a symbolic link (O_NOFOLLOW), for paths already
  // resolved to their real path (common/input_paths.h). Default: false
  bool no_follow = false;
};

// The whole file. `what` names it in errors ("config file", "data.train"): "<what> '<path>' is a
// FIFO; a regular file is required", "... is 16777216 bytes; at most 1048576 are allowed".
// NotFound when it does not exist, InvalidArgument for the rest.
Result<std::string> ReadRegularFile(const std::string& path, const std::string& what,
                                    const ReadOptions& options = {});

// Opens `path` for reading the same way (regular files only, never blocking on a FIFO); the
// caller closes the descriptor. For readers that stream a large file.
Result<int> OpenRegularFile(const std::string& path, const std::string& what,
                            bool no_follow = false);

// "a FIFO", "a directory", "a character device", ... for a stat mode.
const char* FileTypeName(unsigned mode);

}  // namespace fp8rt

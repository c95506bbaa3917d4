// Where a local `fp8d --standalone` keeps its state by default, and so where fp8ctl looks for its
// token and URL when it is given neither: $FP8D_DATA_DIR, else $XDG_DATA_HOME/fp8d, else
// ~/.local/share/fp8d. The daemon writes `token` (mode 0600) and `server` there.
#pragma once

#include <cstdlib>
#include <string>

namespace fp8rt::cli {

inline std::string DefaultStandaloneDataDir() {
  if (const char* d = std::getenv("FP8D_DATA_DIR"); d != nullptr && *d != 0) return d;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x != nullptr && *x != 0) {
    return std::string(x) + "/fp8d";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.local/share/fp8d";
}

}  // namespace fp8rt::cli

#include "common/version.h"

#include "common/status.h"

#ifndef FP8RT_VERSION
#error "FP8RT_VERSION is set by common/CMakeLists.txt from project(fp8rt VERSION ...)"
#endif

namespace fp8rt {

std::string VersionLine(std::string_view program) {
  return StrCat(program, " ", FP8RT_VERSION, " (fp8rt)");
}

}  // namespace fp8rt

// The one version every fp8rt program reports (`--version`): the project's, from CMake.
#pragma once

#include <string>
#include <string_view>

namespace fp8rt {

// "<program> <version> (fp8rt)", e.g. "fp8ctl 0.1.0 (fp8rt)".
std::string VersionLine(std::string_view program);

}  // namespace fp8rt

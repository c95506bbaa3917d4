// Real English text for training tests: the license texts every Debian/Ubuntu system ships in
// /usr/share/common-licenses (package base-files), concatenated in name order (~300 KB).
#pragma once

#include <string>

namespace fp8rt::test {
// Writes the corpus to `path` (once per process) and returns the path; "" if no text was found.
std::string EnglishCorpus(const std::string& path);
}  // namespace fp8rt::test

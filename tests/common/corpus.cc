// Builds the test corpus from /usr/share/common-licenses.
#include "tests/common/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

namespace fp8rt::test {

std::string EnglishCorpus(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path dir = "/usr/share/common-licenses";
  if (!fs::is_directory(dir)) return "";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path());  // symlinks to other licenses skipped
  }
  std::sort(files.begin(), files.end());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const auto& f : files) out << std::ifstream(f, std::ios::binary).rdbuf();
  out.close();
  return fs::file_size(path) > 10000 ? path : "";
}

}  // namespace fp8rt::test

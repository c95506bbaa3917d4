// A fresh directory under the system temp dir, removed with everything in it when the object
// goes: for tests that use a real file system or a real RocksDB.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace fp8rt::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "fp8rt_test") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace fp8rt::test

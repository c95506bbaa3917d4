// common/atomic_file: the one durable-write helper, on a real file system.
#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/common/temp_dir.h"

namespace fp8rt {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST(AtomicFile, ReplacesWholeWithTheModeAskedAndLeavesNoTemporary) {
  test::TempDir d;
  const std::string path = d.str() + "/token";
  ASSERT_TRUE(WriteFileAtomic(path, std::string("first\n"), 0600).ok());
  ASSERT_TRUE(WriteFileAtomic(path, std::string("second\n"), 0600).ok());
  EXPECT_EQ(Slurp(path), "second\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // A relative path (the directory to fsync is ".").
  const std::string cwd = std::filesystem::current_path().string();
  std::filesystem::current_path(d.str());
  const Status rel = WriteFileAtomic("port", std::string("8080\n"));
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(rel.ok()) << rel.ToString();
  EXPECT_EQ(Slurp(d.str() + "/port"), "8080\n");
}

TEST(AtomicFile, AnUnwritableDirectoryIsAnErrorNamingThePath) {
  const Status s = WriteFileAtomic("/nonexistent-dir/x", std::string("y"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/x.tmp"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fp8rt

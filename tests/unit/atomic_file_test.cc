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

// A link at the temporary name (planted, or left by someone else) is never written through: the
// temporary file is created afresh (O_EXCL | O_NOFOLLOW); and a synced write refuses a link.
TEST(AtomicFile, ALinkAtTheTemporaryNameOrThePathIsNeverFollowed) {
  test::TempDir d;
  const std::string victim = d.str() + "/victim", path = d.str() + "/node-token";
  std::ofstream(victim) << "untouched\n";
  std::filesystem::create_symlink(victim, path + ".tmp");
  ASSERT_TRUE(WriteFileAtomic(path, std::string("secret\n"), 0600).ok());
  EXPECT_EQ(Slurp(victim), "untouched\n");
  EXPECT_EQ(Slurp(path), "secret\n");
  EXPECT_FALSE(std::filesystem::is_symlink(path));
  std::filesystem::create_symlink(victim, d.str() + "/link");
  EXPECT_FALSE(WriteFileSynced(d.str() + "/link", "x", 1).ok());
  EXPECT_EQ(Slurp(victim), "untouched\n");
}

// fp8d's state directories: created 0700 (parents too), an existing looser one tightened and said.
TEST(AtomicFile, PrivateDirectoriesAreOwnerOnly) {
  test::TempDir d;
  const std::string fresh = d.str() + "/a/b/c";
  std::string note;
  ASSERT_TRUE(CreatePrivateDirectories(fresh, &note).ok());
  EXPECT_TRUE(note.empty());
  for (const std::string& p : {d.str() + "/a", d.str() + "/a/b", fresh}) {
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u) << p;
  }
  const std::string loose = d.str() + "/loose";
  std::filesystem::create_directory(loose);
  ::chmod(loose.c_str(), 0755);
  ASSERT_TRUE(CreatePrivateDirectories(loose, &note).ok());
  EXPECT_EQ(note, loose + " was mode 0755; now 0700 (it holds fp8d's state)");
  struct stat st {};
  ASSERT_EQ(::stat(loose.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::ofstream(d.str() + "/file") << "x";
  EXPECT_FALSE(CreatePrivateDirectories(d.str() + "/file").ok()) << "not a directory";
}

TEST(AtomicFile, AnUnwritableDirectoryIsAnErrorNamingThePath) {
  const Status s = WriteFileAtomic("/nonexistent-dir/x", std::string("y"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/x.tmp"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fp8rt

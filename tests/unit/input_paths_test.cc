// Which files a job may make fp8d read (common/input_paths.h) and text shown from elsewhere
// (common/text.h), on a real file system: every rule with the message it gives.
#include "common/input_paths.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/text.h"
#include "tests/common/temp_dir.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

class InputPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.str() + "/data";
    fs::create_directories(root_ + "/hf");
    fs::create_directories(dir_.str() + "/outside");
    fs::create_directories(root_ + "/state/checkpoints/1");
    for (const std::string& f : {root_ + "/corpus.txt", root_ + "/hf/model.safetensors",
                                 root_ + "/hf/config.json", dir_.str() + "/outside/secret",
                                 root_ + "/state/checkpoints/1/adam_v.bin"}) {
      std::ofstream(f) << "x";
      ::chmod(f.c_str(), 0644);
    }
    rules_.roots = {root_};
    rules_.private_paths = {root_ + "/state"};
  }
  std::string Refusal(const std::string& path, InputKind kind = InputKind::kFile) {
    auto r = ConfineInput("data.train", path, kind, rules_);
    EXPECT_FALSE(r.ok()) << path << " was allowed";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
    return r.ok() ? std::string() : r.status().message();
  }
  test::TempDir dir_;
  std::string root_;
  InputRules rules_;
};

TEST_F(InputPaths, FilesUnderARootAreAllowedByTheirRealPath) {
  auto ok = ConfineInput("data.train", root_ + "/./corpus.txt", InputKind::kFile, rules_);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, fs::canonical(root_ + "/corpus.txt").string());
  fs::create_symlink(root_ + "/corpus.txt", root_ + "/inside-link");
  EXPECT_EQ(*ConfineInput("data.train", root_ + "/inside-link", InputKind::kFile, rules_),
            fs::canonical(root_ + "/corpus.txt").string())
      << "a link that stays inside resolves to its target";
  EXPECT_TRUE(ConfineInput("train.init_from", root_ + "/hf", InputKind::kHfDirectory, rules_).ok());
  // A root given through a link of its own still holds its files.
  fs::create_symlink(root_, dir_.str() + "/data-link");
  InputRules linked = rules_;
  linked.roots = {dir_.str() + "/data-link"};
  EXPECT_TRUE(
      ConfineInput("data.train", dir_.str() + "/data-link/corpus.txt", InputKind::kFile, linked)
          .ok());
}

TEST_F(InputPaths, EachRuleIsRefusedByNameWithoutLookingOutside) {
  EXPECT_TRUE(Has(Refusal("corpus.txt"), "data.train = 'corpus.txt' is not an absolute path"));
  const std::string outside = Refusal(dir_.str() + "/outside/secret");
  EXPECT_TRUE(Has(outside, "is outside the data roots")) << outside;
  EXPECT_TRUE(Has(outside, root_)) << "the roots are named: " << outside;
  EXPECT_TRUE(Has(Refusal(root_ + "/../outside/secret"), "'..' is resolved before the check"));
  // (Outside: refused whether or not it exists, so the answer says nothing about what is there.)
  EXPECT_EQ(Refusal(dir_.str() + "/outside/secret"),
            Refusal(dir_.str() + "/outside/secret").c_str());
  EXPECT_TRUE(Has(Refusal(dir_.str() + "/outside/nothing"), "is outside the data roots"));
  fs::create_symlink(dir_.str() + "/outside/secret", root_ + "/link");
  EXPECT_TRUE(Has(Refusal(root_ + "/link"), "leaves the data roots"));
  EXPECT_TRUE(Has(Refusal(root_ + "/link"), "through a symbolic link"));
  EXPECT_TRUE(Has(Refusal(root_ + "/state/checkpoints/1/adam_v.bin"), "lies in fp8d's own state"));
  EXPECT_TRUE(Has(Refusal(root_ + "/missing"), "does not exist"));
  ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0644), 0);
  EXPECT_TRUE(Has(Refusal(root_ + "/fifo"), "is a FIFO; a regular file is required"));
  EXPECT_TRUE(Has(Refusal(root_ + "/hf"), "is a directory; a regular file is required"));
  EXPECT_TRUE(Has(Refusal(root_ + "/corpus.txt", InputKind::kHfDirectory),
                  "is a regular file; a directory is required"));
  // A file inside an init_from directory that leads out.
  fs::remove(root_ + "/hf/config.json");
  fs::create_symlink(dir_.str() + "/outside/secret", root_ + "/hf/config.json");
  const std::string hf = Refusal(root_ + "/hf", InputKind::kHfDirectory);
  EXPECT_TRUE(Has(hf, "data.train/config.json")) << hf;
  EXPECT_TRUE(Has(hf, "through a symbolic link")) << hf;
  rules_.roots.clear();
  EXPECT_TRUE(Has(Refusal(root_ + "/corpus.txt"), "is outside the data roots (fp8d --data-root; by "
                                                  "default the config roots): none declared"));
}

// A file only its owner may read: refused unless fp8d runs as that owner (then it is the user's
// own, a single-user fp8d --standalone).
TEST_F(InputPaths, AFileOthersMayNotReadIsRefusedUnlessItIsFp8dsOwn) {
  const std::string mine = root_ + "/mine";
  std::ofstream(mine) << "x";
  ::chmod(mine.c_str(), 0600);
  EXPECT_TRUE(ConfineInput("data.val", mine, InputKind::kFile, rules_).ok());
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the file to another user";
  ASSERT_EQ(::chown(mine.c_str(), 65534, 65534), 0);
  const std::string m = Refusal(mine);
  EXPECT_TRUE(Has(m, "is mode 0600, not readable by every user")) << m;
  EXPECT_TRUE(Has(m, "chmod o+r")) << m;
  ::chmod(mine.c_str(), 0604);
  EXPECT_TRUE(ConfineInput("data.val", mine, InputKind::kFile, rules_).ok());
}

TEST_F(InputPaths, ConfineInputsReplacesEveryInputByItsRealPath) {
  RunConfig c;
  c.data.train = {root_ + "/./corpus.txt"};
  c.train.init_from = root_ + "/hf";
  ASSERT_TRUE(ConfineInputs(&c, rules_).ok());
  EXPECT_EQ(c.data.train.at(0), fs::canonical(root_ + "/corpus.txt").string());
  EXPECT_TRUE(c.data.val.empty()) << "not given: not checked";
  c.data.val = {dir_.str() + "/outside/secret"};
  const Status s = ConfineInputs(&c, rules_);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "data.val = '")) << s.message();
}

// data.format megatron names a prefix: both files of the pair are confined, and must lie side by
// side under one name (what fp8train derives from the prefix is what was checked).
TEST_F(InputPaths, AMegatronPairIsConfinedFileByFile) {
  for (const char* f : {"/set_text_document.bin", "/set_text_document.idx"}) {
    std::ofstream(root_ + f) << "x";
    ::chmod((root_ + f).c_str(), 0644);
  }
  RunConfig c;
  c.data.format = "megatron";
  c.data.train = {root_ + "/./set_text_document"};
  ASSERT_TRUE(ConfineInputs(&c, rules_).ok());
  EXPECT_EQ(c.data.train.at(0), fs::canonical(root_).string() + "/set_text_document");
  // Its index through a link out of the roots; its index a link to another name.
  fs::create_symlink(dir_.str() + "/outside/secret", root_ + "/leak.idx");
  std::ofstream(root_ + "/leak.bin") << "x";
  ::chmod((root_ + "/leak.bin").c_str(), 0644);
  EXPECT_TRUE(Has(Refusal(root_ + "/leak", InputKind::kMegatronPrefix), "data.train (.idx)"));
  fs::create_symlink(root_ + "/set_text_document.idx", root_ + "/other.idx");
  std::ofstream(root_ + "/other.bin") << "x";
  ::chmod((root_ + "/other.bin").c_str(), 0644);
  EXPECT_TRUE(Has(Refusal(root_ + "/other", InputKind::kMegatronPrefix), "side by side"));
  EXPECT_TRUE(Has(Refusal(root_ + "/missing", InputKind::kMegatronPrefix), "does not exist"));
}

TEST(PathUnder, ComponentsNotPrefixes) {
  EXPECT_TRUE(PathUnder("/data/x", "/data"));
  EXPECT_TRUE(PathUnder("/data", "/data"));
  EXPECT_FALSE(PathUnder("/data2/x", "/data"));
  EXPECT_FALSE(PathUnder("/dat", "/data"));
  EXPECT_TRUE(PathUnder("/anything", "/"));
}

TEST(Text, ControlCharactersAreFoundAndMadeVisible) {
  EXPECT_FALSE(HasControlChars("NVIDIA H100 80GB HBM3 \xc3\xa9"));
  EXPECT_TRUE(HasControlChars("H100\x1b[2J"));
  EXPECT_TRUE(HasControlChars("a\x7f"));
  EXPECT_TRUE(HasControlChars("a\xc2\x9b" "31m"));  // U+009B, the 8-bit CSI
  EXPECT_TRUE(HasControlChars("a\x9b"));            // and as a lone byte
  EXPECT_TRUE(HasControlChars("line\n"));
  EXPECT_FALSE(HasControlChars("line\n\tx", "\n\t"));
  EXPECT_EQ(Printable("red \x1b[31mtext\x1b]0;title\x07 done"),
            "red \\x1b[31mtext\\x1b]0;title\\x07 done");
  EXPECT_EQ(Printable("a\nb\tc\r", "\n\t"), "a\nb\tc\\x0d");
  EXPECT_EQ(Printable("\xc2\x9b"), "\\u009b");
  EXPECT_EQ(Printable("bad \xff byte"), "bad \\xff byte");
  EXPECT_EQ(Printable("\xc3\xa9t\xc3\xa9"), "\xc3\xa9t\xc3\xa9") << "UTF-8 text passes";
  EXPECT_EQ(Printable("C:\\x1b"), "C:\\\\x1b") << "a literal backslash-x is not an escape";
}

TEST(Text, ClosestSuggestsANearWordOnly) {
  const std::vector<std::string> verbs = {"train-tokenizer", "tokenize", "verify"};
  EXPECT_EQ(Closest("tokenise", verbs), "tokenize");
  EXPECT_EQ(Closest("verfy", verbs), "verify");
  EXPECT_EQ(Closest("train-tokeniser", verbs), "train-tokenizer");
  EXPECT_EQ(Closest("submit", verbs), "") << "nothing that close";
  EXPECT_EQ(Closest("", verbs), "");
  // A swap of two neighbouring letters is one edit (fp8ctl's verbs).
  const std::vector<std::string> ctl = {"submit", "list", "status", "cancel", "logs", "events"};
  EXPECT_EQ(Closest("lsit", ctl), "list");
  EXPECT_EQ(Closest("stauts", ctl), "status");
  EXPECT_EQ(Closest("sbumit", ctl), "submit");
  EXPECT_EQ(Closest("frobnicate", ctl), "");
}

}  // namespace
}  // namespace fp8rt

// Corpus loading and the deterministic sampler.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <sys/stat.h>
#include <unistd.h>

#include "runtime/data.h"

namespace fp8rt {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "." + std::to_string(::getpid())))
      .string();
}

TEST(TokenDataset, ShardRoundTripAndCorruption) {
  const std::string p = TempPath("shard.bin");
  std::vector<int32_t> toks = {1, 2, 3, 50256, 7};
  ASSERT_TRUE(TokenDataset::WriteShard(p, toks).ok());
  auto d = TokenDataset::LoadShard(p);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->tokens(), toks);
  // Truncate: the header promises more tokens than the file holds.
  std::filesystem::resize_file(p, 1024 + 4);
  auto bad = TokenDataset::LoadShard(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fewer"), std::string::npos);
  {
    std::ofstream o(p, std::ios::binary | std::ios::trunc);
    o << "not a shard at all, just text";
  }
  EXPECT_FALSE(TokenDataset::LoadShard(p).ok());
  std::filesystem::remove(p);
}

// What a file holds is never echoed in a refusal (the message reaches the job's submitter), and a
// FIFO or a directory is refused at once, never waited on.
TEST(TokenDataset, RefusalsSayWhatAFileIsNotNeverWhatItHolds) {
  const std::string p = TempPath("secret.bin");
  {
    std::ofstream o(p, std::ios::binary | std::ios::trunc);
    o << "ABCD" << std::string(2000, 'x');  // "ABCD" read as the magic: 1145258561
  }
  auto bad = TokenDataset::LoadShard(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("is not an llm.c token shard"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(bad.status().message().find("1145258561"), std::string::npos)
      << "the file's first bytes are in the message: " << bad.status().message();
  std::filesystem::remove(p);
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const char* format : {"text", "tokens"}) {
    auto f = TokenDataset::Load(fifo, format);  // would block for a writer if it were opened so
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.status().message().find("is a FIFO; a regular file is required"),
              std::string::npos)
        << f.status().message();
  }
  std::filesystem::remove(fifo);
  auto dir = TokenDataset::Load(std::filesystem::temp_directory_path().string(), "text");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos);
}

TEST(TokenDataset, TextIsBytes) {
  const std::string p = TempPath("text.txt");
  {
    std::ofstream o(p, std::ios::binary);
    o << "Hi\xc3\xa9";
  }
  auto d = TokenDataset::LoadText(p);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens(), (std::vector<int32_t>{'H', 'i', 0xc3, 0xa9}));
  std::filesystem::remove(p);
}

TEST(DataLoader, DeterministicAndResumable) {
  std::vector<int32_t> toks(1000);
  for (int i = 0; i < 1000; ++i) toks[i] = i;
  auto ds = TokenDataset::FromTokens(toks);
  DataLoader a(&ds, 3, 8, 42), b(&ds, 3, 8, 42), c(&ds, 3, 8, 43);
  ASSERT_TRUE(a.Init().ok());
  ASSERT_TRUE(b.Init().ok());
  ASSERT_TRUE(c.Init().ok());
  std::vector<int32_t> xa(24), ya(24), xb(24), yb(24), xc(24), yc(24);
  // 124 windows: run past an epoch boundary.
  for (int step = 0; step < 50; ++step) {
    a.NextBatch(xa.data(), ya.data());
    b.NextBatch(xb.data(), yb.data());
    c.NextBatch(xc.data(), yc.data());
    ASSERT_EQ(xa, xb);
    for (int i = 0; i < 24; ++i) ASSERT_EQ(ya[i], xa[i] + 1);  // targets are inputs shifted
  }
  EXPECT_NE(xa, xc);
  // Resume from a cursor: the same batches follow.
  DataLoader r(&ds, 3, 8, 42);
  ASSERT_TRUE(r.Init().ok());
  r.set_cursor(a.cursor());
  for (int step = 0; step < 10; ++step) {
    a.NextBatch(xa.data(), ya.data());
    r.NextBatch(xb.data(), yb.data());
    ASSERT_EQ(xa, xb);
  }
}

TEST(DataLoader, RanksTakeDisjointWindows) {
  std::vector<int32_t> toks(81);
  for (int i = 0; i < 81; ++i) toks[i] = i;
  auto ds = TokenDataset::FromTokens(toks);
  DataLoader r0(&ds, 1, 8, 7, 0, 2), r1(&ds, 1, 8, 7, 1, 2);
  ASSERT_TRUE(r0.Init().ok());
  ASSERT_TRUE(r1.Init().ok());
  std::set<int32_t> seen;
  std::vector<int32_t> x(8), y(8);
  for (int i = 0; i < 5; ++i) {
    r0.NextBatch(x.data(), y.data());
    EXPECT_TRUE(seen.insert(x[0]).second);
    r1.NextBatch(x.data(), y.data());
    EXPECT_TRUE(seen.insert(x[0]).second);
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(DataLoader, TooShortCorpusIsRefused) {
  auto ds = TokenDataset::FromTokens({1, 2, 3});
  DataLoader l(&ds, 1, 8, 1);
  EXPECT_FALSE(l.Init().ok());
}

}  // namespace
}  // namespace fp8rt

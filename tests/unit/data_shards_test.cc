// Datasets of many shards (runtime/data.h, common/input_paths.h): files, directories, globs and
// lists read in a fixed order; windows within shards; exact resume across shard and epoch
// boundaries; the shard set recorded in checkpoints; ids past the vocabulary named where they lie.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/input_paths.h"
#include "runtime/data.h"
#include "runtime/trainer.h"
#include "tests/common/megatron_writer.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// Shard k holds ids 1000 k + i (i = 0 .. n - 1): where every token came from is in its value.
std::vector<int32_t> ShardIds(int k, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 1000 * k + i;
  return v;
}

class DataShards : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.str() + "/corpus";
    fs::create_directories(root_);
    // b, a, c by name; uint16, uint32 (wide ids) and uint16 again; and files a directory skips.
    Write("b.bin", ShardIds(2, 25));
    Write("a.bin", ShardIds(1, 10));
    auto wide = ShardIds(3, 9);
    wide[0] = 70000;  // uint32
    Write("c.bin", wide);
    Write(".hidden.bin", ShardIds(9, 50));
    std::ofstream(root_ + "/README.txt") << "not a shard";
  }
  void Write(const std::string& name, const std::vector<int32_t>& ids) {
    ASSERT_TRUE(TokenDataset::WriteShard(root_ + "/" + name, ids).ok());
    ::chmod((root_ + "/" + name).c_str(), 0644);
  }
  TokenDataset Load(const std::vector<std::string>& entries, const std::string& format = "tokens") {
    auto d = TokenDataset::Load(entries, format, "data.train");
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? std::move(d).value() : TokenDataset::FromTokens({});
  }
  std::string Refusal(const std::vector<std::string>& entries,
                      const std::string& format = "tokens") {
    auto d = TokenDataset::Load(entries, format, "data.train");
    EXPECT_FALSE(d.ok());
    return d.ok() ? std::string() : d.status().message();
  }
  test::TempDir dir_;
  std::string root_;
};

TEST_F(DataShards, ADirectoryAGlobAndAListEachReadTheirShardsInOrder) {
  TokenDataset dir = Load({root_});
  ASSERT_EQ(dir.num_shards(), 3u) << "a.bin, b.bin, c.bin; not .hidden.bin or README.txt";
  EXPECT_EQ(fs::path(dir.shard(0).path).filename(), "a.bin");
  EXPECT_EQ(fs::path(dir.shard(2).path).filename(), "c.bin");
  EXPECT_EQ(dir.size(), 44u);
  EXPECT_EQ(dir.shard(1).first, 10u);
  EXPECT_EQ(dir.owned_bytes(), 0u) << "mapped, never copied";
  std::vector<int32_t> all = dir.tokens();
  EXPECT_EQ(all[9], 1009);
  EXPECT_EQ(all[10], 2000) << "b.bin follows a.bin";
  EXPECT_EQ(all[35], 70000);
  // A range across a boundary.
  std::vector<int32_t> cut(4);
  ASSERT_TRUE(dir.Copy(33, 4, cut.data()).ok());
  EXPECT_EQ(cut, (std::vector<int32_t>{2023, 2024, 70000, 3001}));

  TokenDataset glob = Load({root_ + "/[bc].bin"});
  ASSERT_EQ(glob.num_shards(), 2u);
  EXPECT_EQ(glob.tokens().front(), 2000);
  // A list keeps its own order (and may name a shard twice).
  TokenDataset list = Load({root_ + "/c.bin", root_ + "/a.bin", root_ + "/a.bin"});
  ASSERT_EQ(list.num_shards(), 3u);
  EXPECT_EQ(list.tokens()[9], 1000) << "a.bin after c.bin's 9 tokens";
  EXPECT_EQ(list.ShardList(), R"([["c.bin",9],["a.bin",10],["a.bin",10]])");

  // Text: every regular file of a directory but dot files.
  const std::string text = dir_.str() + "/text";
  fs::create_directories(text);
  std::ofstream(text + "/1.txt") << "Hello";
  std::ofstream(text + "/2.md") << "World";
  EXPECT_EQ(Load({text}, "text").tokens(),
            (std::vector<int32_t>{'H', 'e', 'l', 'l', 'o', 'W', 'o', 'r', 'l', 'd'}));
}

TEST_F(DataShards, AMegatronDirectoryIsItsPairsByPrefix) {
  const std::string m = dir_.str() + "/megatron";
  fs::create_directories(m);
  for (int k : {2, 1}) {
    test::MegatronWriter w(8, 2);
    w.Sequence({k * 10, k * 10 + 1, k * 10 + 2});
    w.EndDocument();
    w.Write(StrCat(m, "/part_", k, "_text_document"));
  }
  TokenDataset d = Load({m}, "megatron");
  ASSERT_EQ(d.num_shards(), 2u);
  EXPECT_EQ(d.tokens(), (std::vector<int32_t>{10, 11, 12, 20, 21, 22}));
  EXPECT_EQ(Load({m + "/part_2*"}, "megatron").tokens(), (std::vector<int32_t>{20, 21, 22}))
      << "a glob takes the .idx files it matches, by prefix";
}

TEST_F(DataShards, WhatNamesNothingOrAnEmptyShardIsRefusedByName) {
  EXPECT_TRUE(Has(Refusal({root_ + "/*.tokens"}), "names no shards (a glob matching no regular"));
  const std::string empty = dir_.str() + "/empty";
  fs::create_directories(empty);
  std::ofstream(empty + "/x.txt") << "x";
  const std::string m = Refusal({empty});
  EXPECT_TRUE(Has(m, "data.train = '" + empty + "' names no shards (a directory with no *.bin"))
      << m;
  EXPECT_TRUE(Has(Refusal({root_, empty}), "data.train[1] = '")) << "the entry is named";
  std::ofstream(empty + "/y.txt");  // an empty text shard
  const std::string e = Refusal({empty + "/y.txt"}, "text");
  EXPECT_TRUE(Has(e, "is empty")) << e;
  // A truncated shard among good ones: named.
  Write("d.bin", ShardIds(4, 20));
  fs::resize_file(root_ + "/d.bin", 1024 + 10);
  const std::string t = Refusal({root_});
  EXPECT_TRUE(Has(t, root_ + "/d.bin")) << t;
}

// A window never spans two shards, every window is visited once an epoch, and each window's
// targets are its inputs shifted by one.
TEST_F(DataShards, WindowsLieWithinShardsAndEachEpochVisitsEveryOne) {
  TokenDataset d = Load({root_});
  DataLoader l(&d, 1, 8, 5);
  ASSERT_TRUE(l.Init().ok());
  ASSERT_EQ(l.num_windows(), 1u + 3u + 1u) << "(10-1)/8 + (25-1)/8 + (9-1)/8";
  std::set<int32_t> starts;
  std::vector<int32_t> x(8), y(8);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(l.NextBatch(x.data(), y.data()).ok());
    const int32_t shard = (x[0] == 70000 ? 3000 : x[0]) / 1000;
    for (int t = 0; t < 8; ++t) {
      const int32_t in = t == 0 && x[0] == 70000 ? 3000 : x[t];
      EXPECT_EQ(in / 1000, shard) << "window " << i << " crosses a shard boundary";
      EXPECT_EQ(y[t] / 1000, shard);
    }
    starts.insert(x[0]);
  }
  EXPECT_EQ(starts, (std::set<int32_t>{1000, 2000, 2008, 2016, 70000}));
  EXPECT_EQ(l.cursor().epoch, 0u);
  ASSERT_TRUE(l.NextBatch(x.data(), y.data()).ok());
  EXPECT_EQ(l.cursor().epoch, 1u);
}

// Resuming from any cursor continues exactly as the run that never stopped: across shard
// boundaries and epoch boundaries, with one rank and with two.
TEST_F(DataShards, ResumeFromAnyCursorIsExactAcrossShardsAndEpochs) {
  TokenDataset d = Load({root_});
  for (int world : {1, 2}) {
    for (int rank = 0; rank < world; ++rank) {
      DataLoader whole(&d, 2, 4, 11, rank, world);
      ASSERT_TRUE(whole.Init().ok());
      std::vector<std::vector<int32_t>> batches;
      std::vector<DataCursor> cursors;
      std::vector<int32_t> x(8), y(8);
      for (int b = 0; b < 12; ++b) {  // 2 + 6 + 2 windows: several epochs
        cursors.push_back(whole.cursor());
        ASSERT_TRUE(whole.NextBatch(x.data(), y.data()).ok());
        batches.push_back(x);
      }
      EXPECT_GE(whole.cursor().epoch, 2u);
      for (size_t from = 0; from < cursors.size(); ++from) {
        DataLoader again(&d, 2, 4, 11, rank, world);
        ASSERT_TRUE(again.Init().ok());
        again.set_cursor(cursors[from]);
        for (size_t b = from; b < batches.size(); ++b) {
          ASSERT_TRUE(again.NextBatch(x.data(), y.data()).ok());
          ASSERT_EQ(x, batches[b])
              << "world " << world << " rank " << rank << " resumed at " << from << ", batch " << b;
        }
      }
    }
  }
}

// An id at or above the vocabulary is an error naming the shard and the token's position in
// it, found where it is read (or by CheckIds, over the whole dataset).
TEST_F(DataShards, AnIdPastTheVocabularyIsNamedByShardAndOffset) {
  auto ids = ShardIds(5, 40);
  ids[27] = 60000;  // (in the 4th window: 40 tokens hold 4 windows of 8 + 1)
  Write("e.bin", ids);
  TokenDataset d = Load({root_ + "/e.bin"});
  d.set_vocab_size(50257);
  DataLoader l(&d, 4, 8, 1);
  ASSERT_TRUE(l.Init().ok());
  std::vector<int32_t> x(32), y(32);
  const Status s = l.NextBatch(x.data(), y.data());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "'" + root_ +
                                   "/e.bin' at token 27 is 60000, not below "
                                   "model.vocab_size 50257"))
      << s.message();
  const auto whole = d.CheckIds(50257);
  ASSERT_FALSE(whole.ok());
  EXPECT_TRUE(Has(whole.status().message(), "at token 27")) << whole.status().message();
  EXPECT_EQ(*d.CheckIds(60001), 60000);
  // Before the run starts when the dataset is small (OpenDataset), naming the key.
  RunConfig c = test::TinyRunConfig(root_ + "/e.bin", Precision::kFp32, 3);
  c.data.format = "tokens";
  c.model.vocab_size = 50257;
  const auto opened = OpenDataset(c, false);
  ASSERT_FALSE(opened.ok());
  EXPECT_TRUE(Has(opened.status().message(), "data.train: the id '")) << opened.status().message();
}

TEST_F(DataShards, AChangedShardSetIsNamed) {
  TokenDataset d = Load({root_});
  const std::string recorded = d.ShardList();
  EXPECT_EQ(d.CompareShardList(recorded), "");
  Write("d.bin", ShardIds(4, 20));
  EXPECT_EQ(Load({root_}).CompareShardList(recorded),
            "this run has 4 shards, the checkpoint's 3 (the first added: 'd.bin' (20 tokens))");
  fs::remove(root_ + "/d.bin");
  Write("b.bin", ShardIds(2, 26));
  EXPECT_EQ(Load({root_}).CompareShardList(recorded),
            "shard 1 is 'b.bin' (26 tokens); the checkpoint's was 'b.bin' (25 tokens)");
  Write("b.bin", ShardIds(2, 25));
  fs::remove(root_ + "/c.bin");
  EXPECT_TRUE(Has(Load({root_}).CompareShardList(recorded), "the first missing: 'c.bin'"));
}

// fp8train resumes over the same shards exactly; over a changed set it stops naming the change,
// unless data.on_change says to go on from a new epoch.
TEST_F(DataShards, AResumeOverOtherShardsIsRefusedUnlessANewEpochIsAsked) {
  const std::string text = dir_.str() + "/text";
  fs::create_directories(text);
  const std::string english = test::EnglishCorpus(dir_.str() + "/english.txt");
  ASSERT_FALSE(english.empty());
  std::ifstream in(english, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(text + "/part-0.txt", std::ios::binary) << all.substr(0, 20000);
  std::ofstream(text + "/part-1.txt", std::ios::binary) << all.substr(20000, 20000);
  auto options = [&](int steps) {
    TrainOptions o;
    o.config = test::TinyRunConfig(text, Precision::kFp32, 8);
    o.stop_step = steps;
    o.checkpoint_dir = dir_.str() + "/ckpt";
    o.config.train.checkpoint_every = 4;
    return o;
  };
  auto whole = RunTraining(options(8), DeviceInfo{});
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  fs::remove_all(dir_.str() + "/ckpt");
  ASSERT_TRUE(RunTraining(options(4), DeviceInfo{}).ok());
  TrainOptions resume = options(8);
  resume.resume = true;
  auto same = RunTraining(resume, DeviceInfo{});
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  ASSERT_EQ(same->first_step, 5);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(same->losses[i], whole->losses[4 + i]) << "step " << 5 + i;

  std::ofstream(text + "/part-2.txt", std::ios::binary) << all.substr(40000, 20000);
  auto refused = RunTraining(resume, DeviceInfo{});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(refused.status().message(),
                  "was written over other training data: this run has 3 shards, the "
                  "checkpoint's 2 (the first added: 'part-2.txt' (20000 tokens))"))
      << refused.status().message();
  EXPECT_TRUE(Has(refused.status().message(), "set data.on_change: new_epoch"));
  resume.config.data.on_change = "new_epoch";
  std::ostringstream progress;
  resume.progress = &progress;
  auto next = RunTraining(resume, DeviceInfo{});
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(Has(progress.str(), "warning: the training data changed since the checkpoint"))
      << progress.str();
}

// Directories and globs are confined shard by shard: a link out of the roots inside a directory,
// or a glob outside them, is refused by name; expanded, the config lists the shards' real paths.
TEST_F(DataShards, DirectoriesAndGlobsAreConfinedShardByShard) {
  InputRules rules;
  rules.roots = {root_};
  RunConfig c;
  c.data.format = "tokens";
  c.data.train = {root_, root_ + "/[ab].bin"};
  ASSERT_TRUE(ConfineInputs(&c, rules).ok());
  EXPECT_EQ(c.data.train.size(), 2u) << "kept as entries";
  RunConfig expanded = c;
  ASSERT_TRUE(ConfineInputs(&expanded, rules, true).ok());
  ASSERT_EQ(expanded.data.train.size(), 5u);
  EXPECT_EQ(expanded.data.train[4], fs::canonical(root_ + "/b.bin").string());

  const std::string outside = dir_.str() + "/outside";
  fs::create_directories(outside);
  ASSERT_TRUE(TokenDataset::WriteShard(outside + "/secret.bin", ShardIds(7, 10)).ok());
  auto glob =
      ConfineInput("data.train", outside + "/*.bin", InputKind::kDataShards, rules, "tokens");
  ASSERT_FALSE(glob.ok());
  EXPECT_TRUE(Has(glob.status().message(), "is outside the data roots")) << glob.status().message();
  fs::create_symlink(outside + "/secret.bin", root_ + "/z.bin");
  auto linked = ConfineInput("data.train", root_, InputKind::kDataShards, rules, "tokens");
  ASSERT_FALSE(linked.ok());
  EXPECT_TRUE(Has(linked.status().message(), "'" + root_ + "/z.bin' leaves the data roots"))
      << linked.status().message();
}

// A glob reads one directory: wildcards in the last component only, never matching "." or
// "..". fp8train under fp8d opens exactly the shards it checked: a checked path that holds
// glob characters is never expanded again (a file named "a*b.bin" is not "axb.bin" too).
TEST_F(DataShards, GlobsReadOneDirectoryAndCheckedShardsAreNeverExpandedAgain) {
  InputRules rules;
  rules.roots = {root_};
  for (const std::string& bad :
       {root_ + "/.[*]/.[*]/x.bin", root_ + "/*/a.bin", root_ + "/.*", root_ + "/sub/.?.bin"}) {
    auto r = ConfineInput("data.train", bad, InputKind::kDataShards, rules, "tokens");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(Has(r.status().message(), "wildcards (*, ? or [) in its last component only"))
        << r.status().message();
  }
  Write("a*b.bin", ShardIds(5, 10));
  Write("axb.bin", ShardIds(6, 10));
  RunConfig c;
  c.data.format = "tokens";
  c.model.vocab_size = 50257;
  c.data.train = {root_ + "/a\\*b.bin"};  // the one file, its '*' escaped
  ASSERT_TRUE(ConfineInputs(&c, rules, /*expand=*/true).ok());
  ASSERT_EQ(c.data.train.size(), 1u);
  EXPECT_EQ(c.data.train[0], fs::canonical(root_ + "/a*b.bin").string());
  auto exact = OpenDataset(c, false, /*exact=*/true);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  EXPECT_EQ(exact->num_shards(), 1u);
  EXPECT_EQ(exact->tokens().front(), 5000);
  auto again = OpenDataset(c, false, /*exact=*/false);  // what expanding it again would read
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->num_shards(), 2u);
}

TEST(DataConfig, TrainAndValTakeAStringOrAList) {
  auto one = ParseRunConfig("data: {train: a.bin, format: tokens}\n");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->data.train, std::vector<std::string>{"a.bin"});
  EXPECT_NE(RunConfigToJson(*one).find(R"("train":"a.bin")"), std::string::npos);
  auto many = ParseRunConfig("data:\n  train: [shards/, 'more/*.bin']\n  on_change: new_epoch\n");
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  EXPECT_EQ(many->data.train, (std::vector<std::string>{"shards/", "more/*.bin"}));
  auto back = ParseRunConfig(RunConfigToJson(*many));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == *many);
  many->ResolveInputs("/base");
  EXPECT_EQ(many->data.train[1], "/base/more/*.bin");
  const auto blank = ParseRunConfig("data: {train: [a, '']}\n");
  ASSERT_FALSE(blank.ok());
  EXPECT_TRUE(Has(blank.status().message(), "data.train[1] is empty")) << blank.status().message();
  const auto number = ParseRunConfig("data: {train: [a, {b: c}]}\n");
  ASSERT_FALSE(number.ok());
  EXPECT_TRUE(Has(number.status().message(), "data.train[1]")) << number.status().message();
  const auto bad = ParseRunConfig("data: {train: a, on_change: ignore}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Has(bad.status().message(),
                  "data.on_change = 'ignore' is not one of: refuse, "
                  "new_epoch"));
}

}  // namespace
}  // namespace fp8rt

// Checkpoint directories and the RocksDB scale store, on a real file system and a real RocksDB.
#include "runtime/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/checkpoint_fence.h"
#include "runtime/gpt_layout.h"
#include "runtime/scale_store.h"
#include "runtime/train_checkpoint.h"
#include "tests/common/temp_dir.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

Checkpoint Sample(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.fingerprint = {{"model.n_layer", "2"}, {"fp8.recipe", "hybrid"}};
  c.state = {{"rng", "12345"}, {"data.epoch", "0"}};
  c.blobs.push_back({"params.bin", std::vector<uint8_t>(1000, 7)});
  c.blobs.push_back({"adam_m.bin", std::vector<uint8_t>{1, 2, 3}});
  return c;
}

TEST(Checkpoint, WriteReadRoundTripAndLatest) {
  TempDir d;
  CheckpointWriter w(d.str());
  ASSERT_TRUE(w.Write(Sample(10)).ok());
  ASSERT_TRUE(w.Write(Sample(20)).ok());
  auto latest = LatestCheckpointStep(d.str());
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, 20);
  auto r = ReadCheckpoint(d.str(), -1, {{"model.n_layer", "2"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->step, 20);
  EXPECT_EQ(r->state.at("rng"), "12345");
  ASSERT_NE(r->Find("params.bin"), nullptr);
  EXPECT_EQ(r->Find("params.bin")->bytes.size(), 1000u);
  auto old = ReadCheckpoint(d.str(), 10, {});
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->step, 10);
  // No staging leftovers.
  for (const auto& e : fs::directory_iterator(d.str())) {
    EXPECT_EQ(e.path().string().find("staging"), std::string::npos) << e.path();
  }
}

// A blob of several read pieces (64 MiB each, the last short) reads back exactly, saying so
// after each piece; a FIFO in a blob's place is refused at once, not waited on.
TEST(Checkpoint, LargeBlobsReadInPiecesWithProgressAndAFifoIsRefused) {
  TempDir d;
  Checkpoint c = Sample(3);
  std::vector<uint8_t> big((size_t{150} << 20) + 3);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  c.blobs.push_back({"big.bin", big});
  ASSERT_TRUE(CheckpointWriter(d.str()).Write(c).ok());
  int calls = 0;
  auto r = ReadCheckpoint(d.str(), -1, {}, [&calls] { ++calls; });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_NE(r->Find("big.bin"), nullptr);
  EXPECT_TRUE(r->Find("big.bin")->bytes == big);
  EXPECT_GE(calls, 3 + 2) << "three pieces of big.bin, one each for the small blobs";

  const std::string adam = CheckpointStepDir(d.str(), 3) + "/adam_m.bin";
  fs::remove(adam);
  ASSERT_EQ(::mkfifo(adam.c_str(), 0600), 0);
  auto fifo = ReadCheckpoint(d.str(), -1, {});
  ASSERT_FALSE(fifo.ok());
  EXPECT_NE(fifo.status().message().find("not a regular file"), std::string::npos)
      << fifo.status().message();
}

// A ZeRO-1 part the reader was told to skip reads as zeros; a part the manifest never listed is
// an error naming it, whoever reads.
TEST(Checkpoint, OnlyASkippedPartReadsAsZeros) {
  RunConfig c = test::TinyRunConfig("corpus.txt", Precision::kFp8, 1);
  Checkpoint ck;
  ck.step = 7;
  ck.fingerprint = Fingerprint(c, Precision::kFp8);
  ck.state = {{"shards.dp", "2"}, {"shards.tp", "1"}, {"shards.zero", "1"}};
  const gpt_detail::Layout part(c.model, 1);
  const size_t n = static_cast<size_t>(gpt_detail::ZeroShards(c.model, part, 2).total);
  std::vector<uint8_t> ones(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float one = 1.0f;
    std::memcpy(ones.data() + 4 * i, &one, 4);
  }
  ck.blobs.push_back({ShardFileName("adam_m", 0, 0), ones});
  auto missing = CheckpointArray(ck, "adam_m");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("adam_m.dp1.tp0.bin"), std::string::npos)
      << missing.status().message();
  ck.skipped.insert(ShardFileName("adam_m", 1, 0));
  auto whole = CheckpointArray(ck, "adam_m");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->size(), static_cast<size_t>(part.total));
  const auto ones_read = std::count(whole->begin(), whole->end(), 1.0f);
  EXPECT_GT(ones_read, 0);
  EXPECT_EQ(ones_read + std::count(whole->begin(), whole->end(), 0.0f),
            static_cast<std::ptrdiff_t>(whole->size()))
      << "rank 0's part as written, rank 1's as zeros";
}

// The phases several ranks use: files staged by others are listed in the manifest with the size
// and checksum they reported; nothing is visible before the commit, and a commit that names a
// file the staging directory lacks (or of another size) is refused, leaving LATEST as it was.
TEST(Checkpoint, StagedFilesFromSeveralWritersAreCommittedByOne) {
  TempDir d;
  const CheckpointWriter w(d.str());
  ASSERT_TRUE(w.Write(Sample(1)).ok());
  ASSERT_TRUE(w.PrepareStaging(2).ok());
  const std::vector<uint8_t> a(300, 1), b(200, 2);
  auto fa = w.StageFile(2, "part.0.bin", a.data(), a.size());
  auto fb = w.StageFile(2, "part.1.bin", b.data(), b.size());
  ASSERT_TRUE(fa.ok() && fb.ok());
  EXPECT_EQ(*LatestCheckpointStep(d.str()), 1) << "staged files are not a checkpoint yet";
  Checkpoint c = Sample(2);
  CheckpointFile wrong = *fb;
  wrong.bytes = 201;
  const Status refused = w.Commit(c, {*fa, wrong});
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("part.1.bin"), std::string::npos) << refused.message();
  EXPECT_EQ(*LatestCheckpointStep(d.str()), 1);
  ASSERT_TRUE(w.Commit(c, {*fa, *fb}).ok());
  auto r = ReadCheckpoint(d.str(), -1, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->step, 2);
  ASSERT_NE(r->Find("part.1.bin"), nullptr);
  EXPECT_EQ(r->Find("part.1.bin")->bytes, b);
  ASSERT_NE(r->Find("params.bin"), nullptr);  // the committer's own blobs too
  // A staged file whose bytes changed after it was reported fails the reader's checksum.
  std::ofstream(CheckpointStepDir(d.str(), 2) + "/part.0.bin", std::ios::binary | std::ios::trunc)
      << std::string(300, '\x09');
  auto bad = ReadCheckpoint(d.str(), -1, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fails its checksum"), std::string::npos);
}

TEST(Checkpoint, RefusesMissingTruncatedCorruptedAndMismatched) {
  TempDir d;
  ASSERT_TRUE(CheckpointWriter(d.str()).Write(Sample(5)).ok());
  const std::string params = CheckpointStepDir(d.str(), 5) + "/params.bin";

  auto mismatch = ReadCheckpoint(d.str(), -1, {{"model.n_layer", "12"}});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("model.n_layer is 2"), std::string::npos)
      << mismatch.status().message();

  {  // flip one byte
    std::fstream f(params, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put(8);
  }
  auto corrupt = ReadCheckpoint(d.str(), -1, {});
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.status().message().find("checksum"), std::string::npos);

  fs::resize_file(params, 999);
  auto truncated = ReadCheckpoint(d.str(), -1, {});
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);

  fs::remove(params);
  EXPECT_FALSE(ReadCheckpoint(d.str(), -1, {}).ok());
  EXPECT_FALSE(ReadCheckpoint(d.str(), 99, {}).ok());

  TempDir empty;
  auto none = ReadCheckpoint(empty.str(), -1, {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
}

TEST(Checkpoint, IncompleteStagingIsIgnoredAndOldCheckpointSurvives) {
  TempDir d;
  ASSERT_TRUE(CheckpointWriter(d.str()).Write(Sample(5)).ok());
  // A crash mid-write leaves a staging dir; LATEST still names the complete checkpoint.
  fs::create_directories(CheckpointStepDir(d.str(), 6) + ".staging");
  std::ofstream(CheckpointStepDir(d.str(), 6) + ".staging/params.bin") << "partial";
  auto r = ReadCheckpoint(d.str(), -1, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->step, 5);
}

// The fence (common/checkpoint_fence.h): once a later attempt of the job has raised it, an earlier
// attempt's writer is refused at every phase and LATEST keeps naming the last good checkpoint; the
// current attempt and an unfenced writer go on.
TEST(Checkpoint, AStaleAttemptsCommitIsRefusedAndTheLastGoodCheckpointStays) {
  TempDir dir;
  const std::string d = dir.str() + "/ckpt";
  ASSERT_TRUE(RaiseCheckpointFence(d.empty() ? "." : (fs::create_directories(d), d), 1).ok());
  ASSERT_TRUE(CheckpointWriter(d, 1).Write(Sample(10)).ok());
  const CheckpointWriter stale(d, 1);
  ASSERT_TRUE(stale.PrepareStaging(20).ok());
  ASSERT_TRUE(RaiseCheckpointFence(d, 2).ok());  // attempt 2 starts elsewhere
  const Status commit = stale.Commit(Sample(20), {});
  ASSERT_FALSE(commit.ok());
  EXPECT_EQ(commit.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(commit.message().find("this run is attempt 1 of the job, and attempt 2 has started"),
            std::string::npos)
      << commit.message();
  EXPECT_FALSE(stale.PrepareStaging(30).ok());
  EXPECT_FALSE(stale.Write(Sample(10)).ok()) << "not even the same step is replaced";
  EXPECT_EQ(*LatestCheckpointStep(d), 10);
  EXPECT_FALSE(fs::exists(CheckpointStepDir(d, 20)));
  // The current attempt writes; its staging is its own (a stale one emptying its staging
  // directory cannot touch it).
  EXPECT_TRUE(CheckpointWriter(d, 2).Write(Sample(20)).ok());
  EXPECT_EQ(*LatestCheckpointStep(d), 20);
  EXPECT_TRUE(fs::exists(CheckpointStepDir(d, 20) + ".staging.a1")) << "attempt 1's, left as it was";
  EXPECT_TRUE(CheckpointWriter(d).Write(Sample(30)).ok()) << "fp8train by hand: not fenced";
  // A fence never goes back: a start older than it is itself stale.
  const Status back = RaiseCheckpointFence(d, 1);
  EXPECT_EQ(back.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(back.message().find("belongs to attempt 2"), std::string::npos) << back.message();
}

TEST(ScaleStore, PutGetStepsAndReopen) {
  TempDir d;
  const std::string path = d.str() + "/scales";
  std::vector<TensorScaleRecord> recs(2);
  recs[0].name = "h0.fc.weight";
  recs[0].scale = 3.5f;
  recs[0].scale_inv = 1 / 3.5f;
  recs[0].pos = 2;
  recs[0].amax_history = {1.f, 2.f, 0.5f};
  recs[1].name = "h0.fc.grad_output";
  recs[1].format = Fp8Format::kE5M2;
  recs[1].amax_history = std::vector<float>(1024, 0.25f);
  {
    auto s = ScaleStore::Open(path, true);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->Put(10, recs).ok());
    recs[0].scale = 4.f;
    ASSERT_TRUE((*s)->Put(20, recs).ok());
  }
  auto s = ScaleStore::Open(path, false);
  ASSERT_TRUE(s.ok());
  auto steps = (*s)->Steps();
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<int64_t>{10, 20}));
  auto at10 = (*s)->Get(10);
  ASSERT_TRUE(at10.ok());
  ASSERT_EQ(at10->size(), 2u);
  // Name order: grad_output < weight.
  EXPECT_EQ((*at10)[1].name, "h0.fc.weight");
  EXPECT_EQ((*at10)[1].scale, 3.5f);
  EXPECT_EQ((*at10)[1].pos, 2);
  EXPECT_EQ((*at10)[1].amax_history, (std::vector<float>{1.f, 2.f, 0.5f}));
  EXPECT_EQ((*at10)[0].format, Fp8Format::kE5M2);
  EXPECT_EQ((*at10)[0].amax_history.size(), 1024u);
  EXPECT_EQ((*(*s)->Get(20))[1].scale, 4.f);
  EXPECT_EQ((*s)->Get(15).status().code(), StatusCode::kNotFound);
  EXPECT_NE(FormatScaleRecords(10, *at10).find("h0.fc.weight"), std::string::npos);
  // Retention removes steps' records in one batch; the others stay.
  ASSERT_TRUE((*s)->Delete({10, 15}).ok());
  EXPECT_EQ(*(*s)->Steps(), (std::vector<int64_t>{20}));
  EXPECT_EQ((*s)->Get(10).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*(*s)->Get(20))[1].scale, 4.f);
}

TEST(ScaleStore, MissingStoreIsRefused) {
  TempDir d;
  EXPECT_FALSE(ScaleStore::Open(d.str() + "/nope", false).ok());
}

std::vector<int64_t> StepsIn(const std::string& dir) {
  std::vector<int64_t> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos && !e.is_symlink()) {
      out.push_back(std::stoll(n.substr(5)));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Retention keeps the newest N and every Mth, never the one LATEST names nor any newer, touches
// nothing that is not a committed checkpoint directory, and a stale attempt removes nothing.
TEST(CheckpointRetention, KeepsWhatItPromises) {
  TempDir d;
  const CheckpointWriter w(d.str());
  for (int64_t step = 1; step <= 10; ++step) ASSERT_TRUE(w.Write(Sample(step)).ok());
  // Each one's bytes, counted here file by file.
  std::map<int64_t, uint64_t> bytes;
  for (int64_t step = 1; step <= 10; ++step) {
    for (const auto& e : fs::directory_iterator(CheckpointStepDir(d.str(), step))) {
      bytes[step] += fs::file_size(e.path());
    }
  }
  EXPECT_GT(bytes[1], 1000u);
  uint64_t all = 0;
  for (const auto& [step, b] : bytes) all += b;
  EXPECT_EQ(CheckpointDiskBytes(d.str()), all);
  // keep 0: everything stays.
  EXPECT_TRUE(PruneCheckpoints(d.str(), 0, 0, -1)->empty());
  EXPECT_EQ(StepsIn(d.str()).size(), 10u);
  // What is not a committed checkpoint is left alone: a staging directory, a file, a link to
  // a directory elsewhere (its target untouched).
  TempDir elsewhere;
  std::ofstream(elsewhere.str() + "/precious") << "x";
  fs::create_directories(d.str() + "/step_00000002.staging");
  std::ofstream(d.str() + "/notes.txt") << "mine";
  fs::create_symlink(elsewhere.str(), d.str() + "/step_00000000");
  auto removed = PruneCheckpoints(d.str(), 3, 4, -1);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(StepsIn(d.str()), (std::vector<int64_t>{4, 8, 9, 10}));
  EXPECT_TRUE(fs::exists(d.str() + "/step_00000002.staging"));
  EXPECT_TRUE(fs::exists(d.str() + "/notes.txt"));
  EXPECT_TRUE(fs::exists(elsewhere.str() + "/precious"));
  EXPECT_FALSE(fs::exists(d.str() + "/step_00000005.removing"));
  EXPECT_EQ(CheckpointDiskBytes(d.str()), bytes[4] + bytes[8] + bytes[9] + bytes[10]);
  EXPECT_TRUE(ReadCheckpoint(d.str(), -1, {}).ok());
  EXPECT_TRUE(ReadCheckpoint(d.str(), 4, {}).ok());
  // LATEST behind newer directories (a job resumed from an earlier checkpoint): the newer ones
  // and LATEST's stay; keep 1 removes only what is older than LATEST.
  std::ofstream(d.str() + "/LATEST") << "step_00000008\n";
  removed = PruneCheckpoints(d.str(), 1, 0, -1);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, (std::vector<int64_t>{4}));
  EXPECT_EQ(StepsIn(d.str()), (std::vector<int64_t>{8, 9, 10}));
  // No LATEST: nothing is known to be safe to remove.
  TempDir none;
  ASSERT_TRUE(CheckpointWriter(none.str()).PrepareStaging(1).ok());
  EXPECT_FALSE(PruneCheckpoints(none.str(), 1, 0, -1).ok());
}

TEST(CheckpointRetention, AStaleAttemptRemovesNothing) {
  TempDir d;
  const CheckpointWriter w(d.str(), 1);
  ASSERT_TRUE(RaiseCheckpointFence(d.str(), 1).ok());
  for (int64_t step = 1; step <= 4; ++step) ASSERT_TRUE(w.Write(Sample(step)).ok());
  ASSERT_TRUE(RaiseCheckpointFence(d.str(), 2).ok());
  const auto removed = PruneCheckpoints(d.str(), 1, 0, 1);
  EXPECT_EQ(removed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(StepsIn(d.str()), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(*PruneCheckpoints(d.str(), 1, 0, 2), (std::vector<int64_t>{1, 2, 3}));
}

}  // namespace
}  // namespace fp8rt

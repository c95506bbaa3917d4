// Asynchronous checkpoints (runtime/checkpoint_saver.h) in real CPU runs: the same bytes as a
// synchronous save and an exact resume; training goes on while the writer is held; a stop waits
// for the commit; a disk that fills up mid-write is reported naming the file and the last good
// checkpoint still resumes exactly.
#include "runtime/checkpoint_saver.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/crc32c.h"
#include "common/exit_codes.h"
#include "runtime/scale_store.h"
#include "tests/common/subprocess.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

class CheckpointSaverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = test::EnglishCorpus(dir_.str() + "/corpus.txt");
    ASSERT_FALSE(corpus_.empty());
  }
  TrainOptions Options(const std::string& ckpt, int steps, bool async,
                       Precision p = Precision::kFp8) {
    TrainOptions o;
    o.config = test::TinyRunConfig(corpus_, p, 40);
    o.config.train.checkpoint_every = 4;
    o.config.train.async_checkpoint = async;
    o.stop_step = steps;
    o.checkpoint_dir = ckpt;
    return o;
  }
  // Every file of a checkpoint directory, by its path below it.
  static std::map<std::string, std::string> Files(const std::string& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = Slurp(e.path().string());
    }
    return out;
  }
  test::TempDir dir_;
  std::string corpus_;
};

// The async writer writes what the synchronous one does, byte for byte, and a resume from it
// continues exactly as the run that never stopped.
TEST_F(CheckpointSaverTest, AnAsyncCheckpointIsASynchronousOneByteForByteAndResumesExactly) {
  const std::string a = dir_.str() + "/async", s = dir_.str() + "/sync";
  auto ra = RunTraining(Options(a, 10, true), DeviceInfo{});
  ASSERT_TRUE(ra.ok()) << ra.status().ToString();
  auto rs = RunTraining(Options(s, 10, false), DeviceInfo{});
  ASSERT_TRUE(rs.ok()) << rs.status().ToString();
  for (const char* step : {"step_00000004", "step_00000008", "step_00000010"}) {
    const auto fa = Files(StrCat(a, "/", step)), fs_ = Files(StrCat(s, "/", step));
    ASSERT_EQ(fa.size(), 4u) << step << ": master, adam_m, adam_v, manifest";
    EXPECT_TRUE(fa == fs_) << step;
  }
  EXPECT_EQ(Slurp(a + "/LATEST"), "step_00000010\n");
  // Resume at step 8 (the async run's checkpoint) and run to 16: the losses of steps 9-16 are the
  // uninterrupted run's.
  auto whole = RunTraining(Options(dir_.str() + "/whole", 16, true), DeviceInfo{});
  ASSERT_TRUE(whole.ok());
  fs::remove_all(a + "/step_00000010");
  std::ofstream(a + "/LATEST") << "step_00000008\n";
  TrainOptions resume = Options(a, 16, true);
  resume.resume = true;
  auto rr = RunTraining(resume, DeviceInfo{});
  ASSERT_TRUE(rr.ok()) << rr.status().ToString();
  ASSERT_EQ(rr->first_step, 9);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(rr->losses[i], whole->losses[8 + i]) << "step " << 9 + i;
}

// While the writer is held, training steps go on; the checkpoint commits once it is let go.
TEST_F(CheckpointSaverTest, StepsAdvanceWhileTheWriterIsHeldAndAStopWaitsForTheCommit) {
  const std::string ckpt = dir_.str() + "/held", metrics = dir_.str() + "/metrics.jsonl";
  std::ofstream out(metrics);
  TrainOptions o = Options(ckpt, 1000, true);
  o.config.train.total_steps = 1000;
  o.metrics = &out;
  std::atomic<bool> stop{false};
  o.stop_flag = &stop;
  CheckpointSaver::HoldWriterForTest() = true;
  Result<TrainResult> r = Status::Internal("not run");
  std::atomic<bool> returned{false};
  std::thread run([&] {
    r = RunTraining(o, DeviceInfo{});
    returned = true;
  });
  // Steps 5 and 6 are trained after the checkpoint of step 4 began, while its writer waits.
  auto count_steps = [&] {
    int n = 0;
    std::ifstream in(metrics);
    for (std::string l; std::getline(in, l);) n += Has(l, "\"loss\"");
    return n;
  };
  for (int i = 0; i < 3000 && count_steps() < 6; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(count_steps(), 6) << "training did not go on while the checkpoint was written";
  EXPECT_FALSE(fs::exists(ckpt + "/LATEST")) << "nothing committed while the writer is held";
  // A stop (SIGTERM) now: the run's last checkpoint waits for the held one and its own commit.
  // While it waits on a writer that writes nothing, it says so once (busy checkpointing) and no
  // more: liveness lines come from progress, not from a clock.
  stop = true;
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(returned.load()) << "the run returned before its checkpoints were committed";
  {
    const std::string held = Slurp(metrics);
    size_t n = 0;
    for (size_t at = 0; (at = held.find("\"busy\":\"checkpointing\"", at)) != std::string::npos;
         ++at) {
      ++n;
    }
    EXPECT_EQ(n, 1u) << held;
  }
  CheckpointSaver::HoldWriterForTest() = false;
  run.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->stopped_by_signal);
  EXPECT_EQ(Slurp(ckpt + "/LATEST"),
            fs::path(CheckpointStepDir(ckpt, r->last_step)).filename().string() + "\n");
  EXPECT_TRUE(fs::exists(ckpt + "/step_00000004/manifest.json"));
  out.flush();
  const std::string m = Slurp(metrics);
  EXPECT_TRUE(Has(m, "\"checkpoint_blocked_s\"")) << m;
  EXPECT_TRUE(Has(m, "\"snapshot_on_device\":false")) << "on the CPU the snapshot is host memory";
}

// A disk that fills up during a write (a tmpfs of a few hundred KiB): the run stops within
// seconds with exit code 6, naming the file; LATEST still names the last good checkpoint, which
// resumes exactly. With train.on_checkpoint_error: continue the run goes on with a warning.
TEST_F(CheckpointSaverTest, ADiskThatFillsUpIsReportedAndTheLastCheckpointResumesExactly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  const std::string mnt = dir_.str() + "/small";
  fs::create_directories(mnt);
  // One checkpoint of this model is ~265 KiB (3 x 22k FP32 parameters and a manifest): the
  // first fits, the second runs out of room.
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=400k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string config = dir_.str() + "/tiny.yaml";
  std::ofstream(config) << "model: {n_layer: 1, n_embd: 32, n_head: 2, block_size: 32}\n"
                        << "data: {train: " << corpus_ << "}\n"
                        << "train: {batch_size: 2, seq_len: 32, total_steps: 40, "
                        << "checkpoint_every: 4}\nprecision: fp32\n";
  const test::ProcessResult full =
      test::RunProcess({FP8TRAIN_PATH, "--config", config, "--device", "cpu", "--steps", "20",
                        "--checkpoint-dir", mnt + "/ckpt"},
                       {}, dir_.str() + "/full.log", 60s);
  EXPECT_EQ(full.code, kExitCheckpointFailed) << full.output;
  EXPECT_LT(full.seconds, 30) << "reported within seconds";
  EXPECT_TRUE(Has(full.output, "the checkpoint of step 8 failed: writing '" + mnt +
                                   "/ckpt/step_00000008.staging/"))
      << full.output;
  EXPECT_TRUE(Has(full.output, "No space left on device")) << full.output;
  EXPECT_EQ(Slurp(mnt + "/ckpt/LATEST"), "step_00000004\n");
  EXPECT_FALSE(fs::exists(mnt + "/ckpt/step_00000008.staging")) << "the failed write is removed";
  // The good checkpoint resumes exactly (copied off the full disk): steps 5-8 as a run that never
  // stopped.
  fs::copy(mnt + "/ckpt", dir_.str() + "/good", fs::copy_options::recursive);
  const test::ProcessResult whole = test::RunProcess(
      {FP8TRAIN_PATH, "--config", config, "--device", "cpu", "--steps", "8", "--metrics", "-"}, {},
      dir_.str() + "/whole.log", 60s);
  const test::ProcessResult resumed =
      test::RunProcess({FP8TRAIN_PATH, "--config", config, "--device", "cpu", "--steps", "8",
                        "--resume", "--checkpoint-dir", dir_.str() + "/good", "--metrics", "-"},
                       {}, dir_.str() + "/resumed.log", 60s);
  ASSERT_EQ(whole.code, 0) << whole.output;
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  auto losses = [](const std::string& output) {
    std::map<int64_t, double> out;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("loss") && j.contains("step")) {
        out[j["step"].get<int64_t>()] = j["loss"].get<double>();
      }
    }
    return out;
  };
  const auto w = losses(whole.output), r = losses(resumed.output);
  for (int64_t step = 5; step <= 8; ++step) {
    ASSERT_TRUE(w.count(step) && r.count(step)) << step << "\n" << resumed.output;
    EXPECT_EQ(w.at(step), r.at(step)) << "step " << step;
  }
  // Going on instead: the run finishes, each failed checkpoint warned about.
  fs::remove_all(mnt + "/ckpt");
  std::ofstream(config) << "model: {n_layer: 1, n_embd: 32, n_head: 2, block_size: 32}\n"
                        << "data: {train: " << corpus_ << "}\n"
                        << "train: {batch_size: 2, seq_len: 32, total_steps: 40, "
                        << "checkpoint_every: 4, on_checkpoint_error: continue}\n"
                        << "precision: fp32\n";
  const test::ProcessResult go_on =
      test::RunProcess({FP8TRAIN_PATH, "--config", config, "--device", "cpu", "--steps", "12",
                        "--checkpoint-dir", mnt + "/ckpt", "--metrics", "-"},
                       {}, dir_.str() + "/on.log", 60s);
  EXPECT_EQ(go_on.code, 0) << go_on.output;
  EXPECT_TRUE(Has(go_on.output, "\"checkpoint_error\":")) << go_on.output;
  EXPECT_EQ(losses(go_on.output).count(12), 1u) << "the run went on: " << go_on.output;
  EXPECT_EQ(Slurp(mnt + "/ckpt/LATEST"), "step_00000004\n");
}

// train.keep_checkpoints: a run that checkpoints every 2 steps keeps the newest 2 and every 8th,
// their scale state with them; the metrics say what was removed and what the rest take; the run
// resumes from what is left.
TEST_F(CheckpointSaverTest, RetentionKeepsTheNewestAndEveryMthAndTheRunResumes) {
  for (const std::string bad : {"keep_checkpoints: -1", "keep_checkpoints_every: x",
                                "keep_checkpoints: 2.5"}) {
    auto c = ParseRunConfig(StrCat("data: {train: t.txt}\ntrain: {", bad, "}\n"));
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_TRUE(Has(c.status().message(), "train." + bad.substr(0, bad.find(':'))))
        << c.status().message();
  }
  const std::string ckpt = dir_.str() + "/kept";
  std::ostringstream metrics;
  TrainOptions o = Options(ckpt, 13, true);
  o.config.train.checkpoint_every = 2;
  o.config.train.keep_checkpoints = 2;
  o.config.train.keep_checkpoints_every = 8;
  o.metrics = &metrics;
  auto r = RunTraining(o, DeviceInfo{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(ckpt)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0) left.push_back(n);
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step_00000008", "step_00000012", "step_00000013"}));
  {
    auto store = ScaleStore::Open(ScaleStorePath(ckpt), false);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(*(*store)->Steps(), (std::vector<int64_t>{8, 12, 13}));
  }
  const std::string m = metrics.str();
  EXPECT_TRUE(Has(m, "\"checkpoints_removed\":[2]")) << m;
  EXPECT_TRUE(Has(m, "\"checkpoints_removed\":[10]")) << m;
  // The last line's disk use is what the three left take.
  uint64_t on_disk = 0;
  for (const auto& e : fs::recursive_directory_iterator(ckpt)) {
    const std::string rel = fs::relative(e.path(), ckpt).string();
    if (rel.rfind("step_", 0) == 0 && e.is_regular_file()) on_disk += e.file_size();
  }
  EXPECT_TRUE(Has(m, StrCat("\"checkpoint_disk_bytes\":", on_disk))) << m;
  TrainOptions again = Options(ckpt, 15, true);
  again.resume = true;
  auto resumed = RunTraining(again, DeviceInfo{});
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->first_step, 14);
}

// Between steps the trainer says what it is busy with, for the node's hang detector: starting
// before the first step, evaluating around an evaluation, checkpointing while it waits for a
// (here synchronous) save; each line before the phase's own result.
TEST_F(CheckpointSaverTest, BusyLinesSayWhatTheTrainerDoesBetweenSteps) {
  std::ostringstream metrics;
  TrainOptions o = Options(dir_.str() + "/busy", 6, false);
  o.config.data.val = {corpus_};
  o.config.train.eval_every = 3;
  o.config.train.eval_tokens = 4096;
  o.metrics = &metrics;
  ASSERT_TRUE(RunTraining(o, DeviceInfo{}).ok());
  std::vector<nlohmann::json> lines;
  std::istringstream in(metrics.str());
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front(), nlohmann::json({{"busy", "starting"}, {"step", 0}}));
  // The index of the first line with `key` (and `value`, when given) at `step`.
  auto find = [&](const char* key, int step, const char* value = nullptr) {
    for (size_t i = 0; i < lines.size(); ++i) {
      const auto& j = lines[i];
      if (j.contains(key) && j.value("step", -1) == step && (!value || j[key] == value)) {
        return static_cast<int>(i);
      }
    }
    return -1;
  };
  EXPECT_LT(find("busy", 0, "starting"), find("loss", 1));
  for (int step : {3, 6}) {
    EXPECT_GE(find("busy", step, "evaluating"), 0) << metrics.str();
    EXPECT_LT(find("busy", step, "evaluating"), find("val_loss", step)) << metrics.str();
  }
  for (int step : {4, 6}) {
    EXPECT_GE(find("busy", step, "checkpointing"), 0) << metrics.str();
    EXPECT_LT(find("busy", step, "checkpointing"), find("checkpoint_s", step)) << metrics.str();
  }
}

// After each start's first step the trainer says how the start went (for the node, which times a
// recovery with it): once per start, at that step, the checkpoint load 0 on a fresh start and
// measured on a resume, `at` the wall clock when the step ended.
TEST_F(CheckpointSaverTest, EachStartSaysOnceHowItWentAfterItsFirstStep) {
  const std::string ckpt = dir_.str() + "/start";
  auto startups = [](const std::string& text) {
    std::vector<nlohmann::json> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) {
      auto j = nlohmann::json::parse(l);
      if (j.contains("startup")) out.push_back(j);
    }
    return out;
  };
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::ostringstream m1, p1;
  TrainOptions o = Options(ckpt, 4, true);
  o.metrics = &m1;
  o.progress = &p1;
  ASSERT_TRUE(RunTraining(o, DeviceInfo{}).ok());
  auto s1 = startups(m1.str());
  ASSERT_EQ(s1.size(), 1u) << m1.str();
  EXPECT_EQ(s1[0]["step"], 1);
  EXPECT_EQ(s1[0]["startup"]["load_s"].get<double>(), 0.0);
  EXPECT_GT(s1[0]["startup"]["first_step_s"].get<double>(), 0.0);
  EXPECT_GE(s1[0]["startup"]["init_s"].get<double>(), 0.0);
  EXPECT_GE(s1[0]["at"].get<double>(), before);
  EXPECT_TRUE(Has(p1.str(), "started: step 1 after ")) << p1.str();

  std::ostringstream m2;
  TrainOptions again = Options(ckpt, 6, true);
  again.resume = true;
  again.metrics = &m2;
  ASSERT_TRUE(RunTraining(again, DeviceInfo{}).ok());
  auto s2 = startups(m2.str());
  ASSERT_EQ(s2.size(), 1u) << m2.str();
  EXPECT_EQ(s2[0]["step"], 5) << "the first step this start trained";
  EXPECT_GT(s2[0]["startup"]["load_s"].get<double>(), 0.0) << "a resume loads the checkpoint";
  EXPECT_GE(s2[0]["at"].get<double>(), s1[0]["at"].get<double>());
}

// --memory-report says what the snapshot will take before the first checkpoint, and where it
// went once taken (the metrics carry the same).
TEST_F(CheckpointSaverTest, TheMemoryReportShowsTheSnapshot) {
  std::ostringstream progress, metrics;
  TrainOptions o = Options(dir_.str() + "/mem", 5, true);
  o.memory_report = true;
  o.progress = &progress;
  o.metrics = &metrics;
  auto r = RunTraining(o, DeviceInfo{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string p = progress.str();
  EXPECT_TRUE(Has(p, "checkpoint snapshot")) << p;
  EXPECT_TRUE(Has(p, "from the first checkpoint on")) << p;
  EXPECT_TRUE(Has(p, "memory at the first checkpoint (step 4)")) << p;
  EXPECT_TRUE(Has(p, "beside the model (counted above); pinned host memory 0.000 GiB")) << p;
  EXPECT_TRUE(Has(metrics.str(), "\"checkpoint_snapshot\":{\"bytes\":")) << metrics.str();
  // Without checkpoints there is nothing to show.
  std::ostringstream quiet;
  TrainOptions q = Options("", 2, true);
  q.memory_report = true;
  q.progress = &quiet;
  ASSERT_TRUE(RunTraining(q, DeviceInfo{}).ok());
  EXPECT_TRUE(Has(quiet.str(), "total (model)")) << quiet.str();
  EXPECT_FALSE(Has(quiet.str(), "checkpoint snapshot")) << quiet.str();
}

// A snapshot held in host memory that hands out its pieces through two slot buffers, as the
// device snapshot does; `skew` bytes off a 4 KiB boundary (a buffer O_DIRECT cannot take), and
// `fail_piece`, when >= 0, the piece whose read fails.
class FakeSnapshot final : public StateSnapshot {
 public:
  FakeSnapshot(int64_t n, int64_t chunk, size_t skew, int64_t fail_piece)
      : n_(n), chunk_(chunk), skew_(skew), fail_piece_(fail_piece) {
    for (int64_t i = 0; i < 3 * n; ++i) data_.push_back(static_cast<float>(i % 1009) * 0.25f - i);
    for (auto& slot : slots_) {
      slot.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, Round(chunk * 4 + skew))));
    }
  }
  int64_t elements() const override { return n_; }
  bool on_device() const override { return true; }
  int64_t chunk_elements() const override { return chunk_; }
  Result<const float*> Read(int which, int64_t offset, int64_t n, int slot) override {
    if (fail_piece_ >= 0 && offset / chunk_ == fail_piece_) {
      return Status::IOError("the device copy failed");
    }
    if (slot < 0 || slot > 1 || n > chunk_ || offset + n > n_) {
      return Status::InvalidArgument("a read outside the snapshot");
    }
    // Piece p goes where piece p - 2 was: that one must be in the file by now.
    const int64_t piece = offset / chunk_;
    if (piece >= 2 && !path.empty()) {
      std::error_code ec;
      EXPECT_GE(fs::file_size(path, ec), static_cast<uintmax_t>((piece - 1) * chunk_ * 4))
          << "piece " << piece << " read into a slot still being written";
    }
    std::memcpy(slots_[slot].get() + skew_, data_.data() + which * n_ + offset, n * 4);
    return reinterpret_cast<const float*>(slots_[slot].get() + skew_);
  }
  std::string path;  // the file being written, when the test wants the slots' order checked
  std::string Bytes(int which) const {
    return std::string(reinterpret_cast<const char*>(data_.data() + which * n_), n_ * 4);
  }

 private:
  static size_t Round(size_t n) { return (n + 4095) / 4096 * 4096; }
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  int64_t n_, chunk_;
  size_t skew_;
  int64_t fail_piece_;
  std::vector<float> data_;
  std::unique_ptr<uint8_t, Free> slots_[2];
};

// The writer's pipeline writes every array whole and checksums it right whatever the sizes: pieces
// of 4 KiB multiples (O_DIRECT) and not, a short tail, a single piece, buffers O_DIRECT refuses.
TEST(CheckpointArrayWriterTest, WritesEveryByteAndItsChecksumOnAwkwardSizes) {
  test::TempDir dir;  // on the disk the tests run on (ext4 here: O_DIRECT is taken)
  struct Case {
    int64_t n, chunk;
    size_t skew;
  };
  for (const Case c : {Case{5 * 1024 + 7, 1024, 0}, Case{4096 * 3, 4096, 0}, Case{3000, 777, 0},
                       Case{10, 4096, 0}, Case{9 * 1024 + 1, 2048, 4}, Case{1, 1, 0}}) {
    SCOPED_TRACE(StrCat("n ", c.n, " chunk ", c.chunk, " skew ", c.skew));
    FakeSnapshot snap(c.n, c.chunk, c.skew, -1);
    for (int which = 0; which < 3; ++which) {
      const std::string path = dir.str() + "/a" + std::to_string(which) + ".bin";
      uint32_t crc = 0;
      double fsync_s = 0;
      snap.path = path;
      ASSERT_TRUE(WriteSnapshotArray(&snap, which, path, &crc, &fsync_s).ok());
      const std::string want = snap.Bytes(which);
      EXPECT_EQ(Slurp(path), want);
      EXPECT_EQ(crc, Crc32c(want.data(), want.size()));
      EXPECT_GE(fsync_s, 0.0);
    }
  }
  // A file that was there (longer) is replaced, not overwritten in place.
  const std::string path = dir.str() + "/long.bin";
  std::ofstream(path) << std::string(1 << 20, 'x');
  FakeSnapshot snap(3000, 1024, 0, -1);
  uint32_t crc = 0;
  double fsync_s = 0;
  ASSERT_TRUE(WriteSnapshotArray(&snap, 1, path, &crc, &fsync_s).ok());
  EXPECT_EQ(Slurp(path), snap.Bytes(1));
}

TEST(CheckpointArrayWriterTest, AReadThatFailsMidwayIsTheWritersErrorAndNothingHangs) {
  test::TempDir dir;
  FakeSnapshot snap(8 * 1024, 1024, 0, 5);
  uint32_t crc = 0;
  double fsync_s = 0;
  const Status s = WriteSnapshotArray(&snap, 2, dir.str() + "/v.bin", &crc, &fsync_s);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "the device copy failed")) << s.message();
  // A file that cannot be created names itself.
  const std::string bad = dir.str() + "/no/such/dir/m.bin";
  const Status t = WriteSnapshotArray(&snap, 0, bad, &crc, &fsync_s);
  EXPECT_FALSE(t.ok());
  EXPECT_TRUE(Has(t.message(), bad)) << t.message();
}

}  // namespace
}  // namespace fp8rt

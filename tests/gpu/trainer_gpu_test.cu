// fp8train on the GPU: a run stopped and resumed from its checkpoint continues with the same
// losses as an uninterrupted run (FP8 scale state restored from RocksDB, grad accumulation on);
// a checkpoint written while training goes on (its snapshot on the device) is the synchronous
// one byte for byte.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "runtime/trainer.h"
#include "tests/common/corpus.h"
#include "tests/common/gpu_util.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

// A temporary directory with the test corpus, and the first GPU.
class TrainerGpu : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    dir = fs::temp_directory_path() / ("fp8rt_trainer_gpu_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    corpus = test::EnglishCorpus((dir / "corpus.txt").string());
    ASSERT_FALSE(corpus.empty());
    auto d = QueryDevice("cuda:0");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dev = *d;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
  fs::path dir;
  std::string corpus;
  DeviceInfo dev;
};

TEST_F(TrainerGpu, ResumeContinuesExactlyInFp8AndBf16) {
  for (Precision p : {Precision::kFp8, Precision::kBf16}) {
    if (p == Precision::kFp8 && test::ComputeCapability() < 89) continue;
    RunConfig c;
    c.model = {2, 128, 4, 128, 256};
    c.data.train = {corpus};
    c.train.batch_size = 4, c.train.seq_len = 128, c.train.grad_accum = 2;
    c.train.total_steps = 12, c.train.lr = 2e-3f, c.train.warmup_steps = 3;
    c.precision = p;
    c.fp8.scaling.history_len = 4;
    ASSERT_TRUE(c.Validate().ok());
    TrainOptions whole;
    whole.config = c;
    auto w = RunTraining(whole, dev);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    TrainOptions first = whole;
    first.stop_step = 5;
    first.checkpoint_dir = (dir / PrecisionName(p)).string();
    ASSERT_TRUE(RunTraining(first, dev).ok());
    TrainOptions second = first;
    second.stop_step = 12;
    second.resume = true;
    auto r = RunTraining(second, dev);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->losses.size(), 7u);
    for (size_t i = 0; i < 7; ++i) {
      EXPECT_EQ(r->losses[i], w->losses[5 + i]) << PrecisionName(p) << " step " << 6 + i;
    }
  }
}

TEST_F(TrainerGpu, AnAsyncCheckpointFromADeviceSnapshotIsTheSynchronousOne) {
  const Precision p = test::ComputeCapability() >= 89 ? Precision::kFp8 : Precision::kBf16;
  auto files = [](const fs::path& d) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::directory_iterator(d)) {
      std::ifstream in(e.path(), std::ios::binary);
      out[e.path().filename().string()] = std::string((std::istreambuf_iterator<char>(in)), {});
    }
    return out;
  };
  std::map<std::string, std::string> written[2];
  for (bool async : {true, false}) {
    TrainOptions o;
    o.config.model = {2, 128, 4, 128, 256};
    o.config.data.train = {corpus};
    o.config.train.batch_size = 4, o.config.train.seq_len = 128, o.config.train.total_steps = 12;
    o.config.train.checkpoint_every = 3;
    o.config.train.async_checkpoint = async;
    o.config.precision = p;
    o.stop_step = 8;
    o.checkpoint_dir = (dir / (async ? "async" : "sync")).string();
    std::ostringstream metrics;
    o.metrics = &metrics;
    auto r = RunTraining(o, dev);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    written[async] = files(fs::path(o.checkpoint_dir) / "step_00000006");
    EXPECT_NE(metrics.str().find("\"snapshot_on_device\":true"), std::string::npos)
        << "the device has room for the snapshot: " << metrics.str();
  }
  ASSERT_EQ(written[1].size(), 4u);
  EXPECT_TRUE(written[0] == written[1]);
}

}  // namespace
}  // namespace fp8rt

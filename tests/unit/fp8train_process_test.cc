// fp8train as a real process: usage errors, and SIGTERM -> checkpoint at the step boundary ->
// exit code 3 -> resumable.
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "runtime/checkpoint.h"
#include "tests/common/corpus.h"
#include "tests/common/train_helpers.h"

extern char** environ;

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

struct Proc {
  pid_t pid = -1;
};

Proc Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  Proc p;
  EXPECT_EQ(posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return p;
}

int Wait(const Proc& p) {
  int status = 0;
  waitpid(p.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class Fp8TrainProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fp8rt_proc_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string corpus = test::EnglishCorpus((dir_ / "corpus.txt").string());
    ASSERT_FALSE(corpus.empty());
    std::ofstream(dir_ / "run.yaml")
        << "name: proc\nmodel: {n_layer: 1, n_embd: 32, n_head: 2, block_size: 32}\n"
           "data: {train: corpus.txt}\n"
           "train: {batch_size: 2, seq_len: 32, total_steps: 1000000, log_every: 1}\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string P(const char* name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(Fp8TrainProcess, UsageErrorsExitTwoWithTheReason) {
  Proc a = Spawn({FP8TRAIN_PATH, "--config", P("run.yaml"), "--bogus-flag"}, P("a.log"));
  EXPECT_EQ(Wait(a), 2);
  EXPECT_NE(Slurp(P("a.log")).find("bogus-flag"), std::string::npos) << Slurp(P("a.log"));

  std::ofstream(dir_ / "bad.yaml") << "data: {train: corpus.txt}\ntrain: {batch_sise: 3}\n";
  Proc b = Spawn({FP8TRAIN_PATH, "--config", P("bad.yaml")}, P("b.log"));
  EXPECT_EQ(Wait(b), 2);
  EXPECT_NE(Slurp(P("b.log")).find("train.batch_sise"), std::string::npos) << Slurp(P("b.log"));

  Proc c = Spawn({FP8TRAIN_PATH, "--config", P("run.yaml"), "--device", "tpu:0"}, P("c.log"));
  EXPECT_EQ(Wait(c), 2);
  EXPECT_NE(Slurp(P("c.log")).find("tpu:0"), std::string::npos) << Slurp(P("c.log"));
}

TEST_F(Fp8TrainProcess, SigtermCheckpointsAtTheStepBoundaryAndExitsThree) {
  Proc p = Spawn({FP8TRAIN_PATH, "--config", P("run.yaml"), "--device", "cpu",
                  "--checkpoint-dir", P("ckpt"), "--metrics", P("m.jsonl")},
                 P("run.log"));
  // Wait for a few steps, then ask it to stop.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string m = Slurp(P("m.jsonl"));
    if (test::MetricsLinesWith(m, "loss").size() >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(kill(p.pid, SIGTERM), 0);
  EXPECT_EQ(Wait(p), 3) << Slurp(P("run.log"));
  auto latest = LatestCheckpointStep(P("ckpt"));
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  const std::string metrics = Slurp(P("m.jsonl"));
  // (step lines only: the metrics also hold the memory report after step 1)
  const int64_t lines = static_cast<int64_t>(test::MetricsLinesWith(metrics, "loss").size());
  EXPECT_EQ(*latest, lines) << "the checkpoint is not at the last completed step";

  Proc r = Spawn({FP8TRAIN_PATH, "--config", P("run.yaml"), "--device", "cpu", "--checkpoint-dir",
                  P("ckpt"), "--resume", "--steps", std::to_string(*latest + 2)},
                 P("resume.log"));
  EXPECT_EQ(Wait(r), 0) << Slurp(P("resume.log"));
  EXPECT_EQ(*LatestCheckpointStep(P("ckpt")), *latest + 2);
}

}  // namespace
}  // namespace fp8rt

// The node daemon's rank supervisor with real processes: fp8train gangs on the CPU started with
// the FP8RT_* contract, a crashed rank ending its gang, an orderly stop that checkpoints, a rank
// that ignores SIGTERM killed with its process group after the grace period.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/exit_codes.h"
#include "node/supervisor.h"
#include "tests/common/corpus.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"

namespace fp8rt::node {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST(GangProcesses, EachRankGetsTheContractAndItsGpu) {
  GangLaunch g;
  g.fp8train = "/opt/fp8rt/bin/fp8train", g.job_id = "job-7", g.config_path = "/d/job.yaml";
  g.checkpoint_dir = "/d/ckpt", g.resume = true, g.log_dir = "/d/logs", g.attempt = 4;
  g.inputs.roots = {"/data", "/srv/corpora"}, g.inputs.private_paths = {"/d"};
  g.metrics_path = "/d/metrics.jsonl", g.gpus = {5, 2}, g.node_rank = 1, g.nodes = 3;
  g.master_addr = "10.0.0.1", g.master_port = 29500;
  const auto ranks = GangProcesses(g);
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1].rank, 3);
  EXPECT_EQ(ranks[1].log_path, "/d/logs/rank-3.log");
  // The precision is in the config the daemon wrote; the attempt fences the checkpoints; the
  // node's roots confine the inputs again where fp8train opens them.
  const std::vector<std::string> argv = {"/opt/fp8rt/bin/fp8train",
                                         "--config",
                                         "/d/job.yaml",
                                         "--device",
                                         "auto",
                                         "--checkpoint-dir",
                                         "/d/ckpt",
                                         "--metrics",
                                         "/d/metrics.jsonl",
                                         "--attempt",
                                         "4",
                                         "--data-root",
                                         "/data",
                                         "--data-root",
                                         "/srv/corpora",
                                         "--private-dir",
                                         "/d",
                                         "--resume"};
  EXPECT_EQ(ranks[1].argv, argv);
  const std::vector<std::string> env = {"FP8RT_RANK=3",          "FP8RT_WORLD_SIZE=6",
                                        "FP8RT_LOCAL_RANK=0",    "FP8RT_MASTER_ADDR=10.0.0.1",
                                        "FP8RT_MASTER_PORT=29500", "FP8RT_JOB_ID=job-7",
                                        "CUDA_VISIBLE_DEVICES=2"};
  EXPECT_EQ(ranks[1].env, env);
  g.gpus.clear(), g.cpu_ranks = 2, g.node_rank = 0, g.nodes = 1, g.resume = false;
  const auto cpu = GangProcesses(g);
  ASSERT_EQ(cpu.size(), 2u);
  EXPECT_EQ(cpu[1].argv[4], "cpu");
  EXPECT_EQ(cpu[1].env[2], "FP8RT_LOCAL_RANK=1");
  EXPECT_EQ(cpu[1].argv.back(), "/d");
}

class Supervisor : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(test::EnglishCorpus(dir_.str() + "/corpus.txt").empty());
    config_ = dir_.str() + "/job.yaml";
    std::ofstream(config_) << "name: job\nmodel: {n_layer: 1, n_embd: 32, n_head: 2, "
                              "block_size: 32}\ndata: {train: "
                           << dir_.str() << "/corpus.txt}\n"
                           << "train: {batch_size: 2, seq_len: 32, total_steps: 1000000, "
                              "lr: 0.001, checkpoint_every: 0}\nprecision: fp32\n"
                              "parallel: {collective_timeout_s: 30}\n";
  }
  GangLaunch Launch(int ranks) {
    GangLaunch g;
    g.fp8train = FP8TRAIN_PATH, g.job_id = "sup-test", g.config_path = config_;
    g.checkpoint_dir = dir_.str() + "/ckpt", g.log_dir = dir_.str();
    g.metrics_path = dir_.str() + "/metrics.jsonl", g.cpu_ranks = ranks;
    g.master_addr = "127.0.0.1", g.master_port = test::FreePort();
    return g;
  }
  // Waits until rank 0 has logged `steps` metrics lines.
  void WaitForSteps(int steps) {
    const auto until = std::chrono::steady_clock::now() + 120s;
    while (std::chrono::steady_clock::now() < until) {
      std::ifstream in(dir_.str() + "/metrics.jsonl");
      int n = 0;
      for (std::string l; std::getline(in, l);) n += Has(l, "\"loss\"");
      if (n >= steps) return;
      std::this_thread::sleep_for(20ms);
    }
    FAIL() << "no progress";
  }
  static void WaitDone(Gang& g, std::chrono::seconds limit = 120s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!g.Done() && std::chrono::steady_clock::now() < until) {
      g.Poll(5s);
      std::this_thread::sleep_for(20ms);
    }
  }
  test::TempDir dir_;
  std::string config_;
};

TEST_F(Supervisor, ATwoRankGangRunsToTheEnd) {
  GangLaunch g = Launch(2);
  std::vector<RankProcess> ranks = GangProcesses(g);
  for (auto& r : ranks) {
    r.argv.push_back("--steps");
    r.argv.push_back("3");
  }
  auto gang = Gang::Start(ranks);
  ASSERT_TRUE(gang.ok()) << gang.status().ToString();
  WaitDone(**gang);
  ASSERT_TRUE((*gang)->Done());
  for (const RankOutcome& r : (*gang)->Poll(1s)) EXPECT_EQ(r.code, 0) << "rank " << r.rank;
  EXPECT_EQ((*gang)->first_failed_rank(), -1);
  EXPECT_TRUE(Has(Slurp(dir_.str() + "/rank-0.log"), "via env, collectives on gloo"));
  EXPECT_TRUE(fs::exists(dir_.str() + "/rank-1.log"));
  EXPECT_TRUE(fs::exists(dir_.str() + "/ckpt/LATEST"));
}

TEST_F(Supervisor, ACrashedRankEndsItsGang) {
  auto gang = Gang::Start(GangProcesses(Launch(3)));
  ASSERT_TRUE(gang.ok()) << gang.status().ToString();
  WaitForSteps(2);
  const auto before = (*gang)->Poll(5s);
  ASSERT_EQ(before.size(), 3u);
  ::kill(before[1].pid, SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  WaitDone(**gang, 60s);
  ASSERT_TRUE((*gang)->Done());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 40s);
  EXPECT_EQ((*gang)->first_failed_rank(), 1);
  const auto after = (*gang)->Poll(1s);
  EXPECT_EQ(after[1].code, 128 + SIGKILL);
  for (int k : {0, 2}) EXPECT_NE(after[k].code, 0) << "rank " << k << " outlived its gang";
  for (const RankOutcome& r : after) EXPECT_NE(::kill(r.pid, 0), 0) << "pid " << r.pid << " lives";
}

TEST_F(Supervisor, StopAsksForACheckpointThenTheRanksExitThree) {
  auto gang = Gang::Start(GangProcesses(Launch(2)));
  ASSERT_TRUE(gang.ok()) << gang.status().ToString();
  WaitForSteps(2);
  const auto out = (*gang)->Stop(60s);
  for (const RankOutcome& r : out) EXPECT_EQ(r.code, kExitPreempted) << "rank " << r.rank;
  EXPECT_TRUE(fs::exists(dir_.str() + "/ckpt/LATEST"));
}

TEST_F(Supervisor, RanksSeeSigtermEvenWhenTheDaemonBlocksIt) {
  // fp8d blocks SIGTERM in every thread (it sigwaits for it); a blocked mask survives exec, so
  // the supervisor must clear it or Terminate's SIGTERM never reaches the trainer.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  auto gang = Gang::Start(GangProcesses(Launch(2)));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(gang.ok()) << gang.status().ToString();
  WaitForSteps(2);
  (*gang)->Terminate(60s);
  WaitDone(**gang, 60s);
  for (const RankOutcome& r : (*gang)->Tick(60s)) {
    EXPECT_EQ(r.code, kExitPreempted) << "rank " << r.rank;
  }
}

TEST_F(Supervisor, ARankThatIgnoresSigtermIsKilledWithItsGroupAfterTheGrace) {
  // bash ignores SIGTERM and waits on a child of its own group: both must go.
  const std::string pidfile = dir_.str() + "/child.pid";
  RankProcess r;
  r.rank = 0;
  r.argv = {"/bin/bash", "-c", "trap '' TERM; sleep 300 & echo $! > " + pidfile + "; wait"};
  r.log_path = dir_.str() + "/stubborn.log";
  auto gang = Gang::Start({r});
  ASSERT_TRUE(gang.ok()) << gang.status().ToString();
  for (int i = 0; i < 500 && Slurp(pidfile).empty(); ++i) std::this_thread::sleep_for(10ms);
  const pid_t child = std::stoi(Slurp(pidfile));
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = (*gang)->Stop(300ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(out[0].code, 128 + SIGKILL);
  for (int i = 0; i < 200 && ::kill(child, 0) == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_NE(::kill(child, 0), 0) << "the rank's child survived";
}

// A daemon killed with SIGKILL takes its ranks with it (the parent-death signal): nothing runs on
// to write into the job's directories after the scheduler has requeued it elsewhere.
TEST_F(Supervisor, RanksDieWithTheDaemonThatStartedThem) {
  const std::string pidfile = dir_.str() + "/rank.pid";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t daemon = ::fork();
  ASSERT_GE(daemon, 0);
  if (daemon == 0) {  // the "daemon": starts a rank that would sleep for five minutes, then waits
    RankProcess r;
    r.argv = {"/bin/sh", "-c", "echo $$ > " + pidfile + "; exec sleep 300"};
    r.log_path = dir_.str() + "/orphan.log";
    auto gang = Gang::Start({r});
    const char ok = gang.ok() ? 1 : 0;
    (void)!::write(ready[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(ok, 1);
  for (int i = 0; i < 500 && Slurp(pidfile).empty(); ++i) std::this_thread::sleep_for(10ms);
  const pid_t rank = std::stoi(Slurp(pidfile));
  ASSERT_EQ(::kill(rank, 0), 0) << "the rank runs";
  ::kill(daemon, SIGKILL);
  ::waitpid(daemon, nullptr, 0);
  // The rank is the daemon's child: once the daemon is gone, init reaps it after the signal.
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    const std::string stat = Slurp(StrCat("/proc/", rank, "/stat"));
    const size_t close = stat.rfind(')');
    gone = stat.empty() || (close != std::string::npos && stat[close + 2] == 'Z');
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "rank " << rank << " outlived the daemon that started it";
}

TEST_F(Supervisor, AProgramThatCannotRunIsNamed) {
  RankProcess r;
  r.rank = 4;
  r.argv = {dir_.str() + "/no-such-fp8train"};
  r.log_path = dir_.str() + "/x.log";
  auto gang = Gang::Start({r});
  ASSERT_FALSE(gang.ok());
  EXPECT_TRUE(Has(gang.status().message(), "rank 4: cannot run '" + r.argv[0] + "'"))
      << gang.status().message();
}

}  // namespace
}  // namespace fp8rt::node

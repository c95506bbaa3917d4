// comm/: launch detection for each launcher, Slurm host lists, the rendezvous (in-process
// ranks on loopback), and real multi-process runs of fp8rt_comm_check: mpirun with 2 and 4
// ranks (MPI, and Gloo under mpirun), the FP8RT_* environment with 2 ranks (Gloo), and a rank
// that is killed or hangs: the others must end with an error naming it within the timeout.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/rendezvous.h"
#include "common/exit_codes.h"
#include "tests/common/subprocess.h"
#include "tests/common/temp_dir.h"

namespace fp8rt::comm {
namespace {

bool Has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

TEST(CommLaunch, AWorldOfOneWithoutALauncher) {
  auto l = DetectLaunch({"PATH=/usr/bin"});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->launcher, Launcher::kSingle);
  EXPECT_EQ(l->world_size, 1);
}

TEST(CommLaunch, TheEnvironmentContract) {
  auto l = DetectLaunch({"FP8RT_RANK=3", "FP8RT_WORLD_SIZE=4", "FP8RT_LOCAL_RANK=1",
                         "FP8RT_MASTER_ADDR=10.0.0.1", "FP8RT_MASTER_PORT=29500",
                         "FP8RT_JOB_ID=job-7", "OMPI_COMM_WORLD_SIZE=9"});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->launcher, Launcher::kEnv);  // explicit wins over mpirun's variables
  EXPECT_EQ(l->rank, 3);
  EXPECT_EQ(l->world_size, 4);
  EXPECT_EQ(l->local_rank, 1);
  EXPECT_EQ(l->master_addr, "10.0.0.1");
  EXPECT_EQ(l->master_port, 29500);
  EXPECT_EQ(l->job, "job-7");
  struct Bad {
    std::vector<std::string> env;
    const char* says;
  };
  for (const Bad& b : std::vector<Bad>{
           {{"FP8RT_RANK=4", "FP8RT_WORLD_SIZE=4", "FP8RT_MASTER_ADDR=a", "FP8RT_MASTER_PORT=1"},
            "FP8RT_RANK=4 is outside the world"},
           {{"FP8RT_RANK=0", "FP8RT_WORLD_SIZE=2"}, "FP8RT_MASTER_ADDR and FP8RT_MASTER_PORT"},
           {{"FP8RT_RANK=x", "FP8RT_WORLD_SIZE=2"}, "FP8RT_RANK='x'"},
           {{"FP8RT_RANK=0", "FP8RT_WORLD_SIZE=2", "FP8RT_MASTER_ADDR=a",
             "FP8RT_MASTER_PORT=70000"},
            "FP8RT_MASTER_PORT='70000'"},
           {{"FP8RT_RANK=0"}, "FP8RT_WORLD_SIZE is not set"},
       }) {
    auto r = DetectLaunch(b.env);
    ASSERT_FALSE(r.ok()) << b.says;
    EXPECT_TRUE(Has(r.status().message(), b.says)) << r.status().message();
  }
  // A world of one needs no master.
  EXPECT_TRUE(DetectLaunch({"FP8RT_RANK=0", "FP8RT_WORLD_SIZE=1"}).ok());
}

TEST(CommLaunch, MpirunAndSrun) {
  auto m = DetectLaunch({"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                         "OMPI_COMM_WORLD_LOCAL_RANK=1"});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->launcher, Launcher::kMpirun);
  EXPECT_EQ(m->rank, 1);
  EXPECT_EQ(m->local_rank, 1);

  auto s = DetectLaunch({"SLURM_PROCID=5", "SLURM_STEP_NUM_TASKS=8", "SLURM_LOCALID=1",
                         "SLURM_STEP_NODELIST=gpu[07-08,10]", "SLURM_JOB_ID=1234",
                         "SLURM_STEP_ID=0", "SLURM_NTASKS=8"});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->launcher, Launcher::kSrun);
  EXPECT_EQ(s->rank, 5);
  EXPECT_EQ(s->world_size, 8);
  EXPECT_EQ(s->local_rank, 1);
  EXPECT_EQ(s->master_addr, "gpu07");
  EXPECT_EQ(s->master_port, SlurmDefaultPort(1234, 0));
  // Every derived port is below Linux's ephemeral range (32768-60999 by default), where an
  // outgoing connection could hold it (job 3353 once got 33648, taken, under the old base).
  for (long job = 0; job < 5000; ++job) {
    for (long step = 0; step < 3; ++step) {
      const int port = SlurmDefaultPort(job, step);
      ASSERT_GE(port, 12000) << job << "." << step;
      ASSERT_LT(port, 32768) << job << "." << step;
    }
  }
  EXPECT_EQ(s->job, "slurm-1234.0");
  // The batch script itself (no SLURM_STEP_NUM_TASKS) is not a rank of a step.
  auto batch = DetectLaunch({"SLURM_PROCID=0", "SLURM_NTASKS=8", "SLURM_JOB_ID=1"});
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->launcher, Launcher::kSingle);
}

TEST(CommLaunch, SlurmHostLists) {
  auto h = ExpandSlurmHostList("node[01-03,7],gpu5,rack[1-2]-n[1-2]");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, (std::vector<std::string>{"node01", "node02", "node03", "node7", "gpu5",
                                          "rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}));
  EXPECT_FALSE(ExpandSlurmHostList("node[1-").ok());
  EXPECT_FALSE(ExpandSlurmHostList("node[3-1]").ok());
  EXPECT_FALSE(ExpandSlurmHostList("node[a]").ok());
}

// ---- the rendezvous, ranks as threads on loopback ----

// Options for a world of `n` on a free loopback port (the rank is each thread's to set).
Rendezvous::Options Loopback(int n, const std::string& job, int timeout_ms) {
  Rendezvous::Options o;
  o.master_addr = "127.0.0.1";
  o.master_port = test::FreePort();
  o.world_size = n;
  o.job = job;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

TEST(CommRendezvous, ConnectsSharesKeysAndFinishes) {
  constexpr int kWorld = 3;
  Rendezvous::Options o = Loopback(kWorld, "t", 20'000);
  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.push_back(std::async(std::launch::async, [o, r]() mutable -> std::string {
      o.rank = r;
      auto rv = Rendezvous::Start(o, nullptr);
      if (!rv.ok()) return "start: " + rv.status().ToString();
      if ((*rv)->peers().size() != kWorld) return "peers";
      if (const Status s = (*rv)->Set(StrCat("k", r), StrCat("v", r)); !s.ok()) return s.ToString();
      std::string got;
      for (int k = 0; k < kWorld; ++k) {
        auto v = (*rv)->Get(StrCat("k", k));
        if (!v.ok()) return v.status().ToString();
        got += *v;
      }
      if (const Status s = (*rv)->Finish(); !s.ok()) return "finish: " + s.ToString();
      return got;
    }));
  }
  for (auto& f : ranks) EXPECT_EQ(f.get(), "v0v1v2");
}

// A rank that fell back to the CPU among GPU ranks must be refused at the start, by name, on
// every rank that can tell (not left waiting in a collective the others never join).
TEST(CommRendezvous, RanksThatDisagreeOnTheBackendAreNamed) {
  constexpr int kWorld = 3;
  Rendezvous::Options o = Loopback(kWorld, "t", 20'000);
  std::vector<std::future<std::pair<Status, Status>>> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.push_back(std::async(std::launch::async, [o, r]() mutable -> std::pair<Status, Status> {
      o.rank = r;
      auto rv = Rendezvous::Start(o, nullptr);
      if (!rv.ok()) return {rv.status(), rv.status()};
      const Status same = (*rv)->Agree("color", "blue");
      const Status differ = (*rv)->Agree("backend", r == 2 ? "CPU buffers" : "GPU buffers (NCCL)");
      (void)(*rv)->Finish();
      return {same, differ};
    }));
  }
  std::vector<std::pair<Status, Status>> got;
  for (auto& f : ranks) got.push_back(f.get());
  for (const auto& [same, differ] : got) EXPECT_TRUE(same.ok()) << same.ToString();
  // Rank 0 sees every rank; rank 1 agrees with rank 0; rank 2 learns that it differs.
  EXPECT_EQ(got[0].second.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(got[0].second.message(),
                  "every rank must use the same backend: rank 0 (")) << got[0].second.ToString();
  EXPECT_TRUE(Has(got[0].second.message(), ") uses GPU buffers (NCCL), rank 2 (")) << got[0].second.ToString();
  EXPECT_TRUE(Has(got[0].second.message(), ") CPU buffers")) << got[0].second.ToString();
  EXPECT_FALSE(Has(got[0].second.message(), "rank 1")) << got[0].second.ToString();
  EXPECT_TRUE(got[1].second.ok()) << got[1].second.ToString();
  EXPECT_EQ(got[2].second.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(got[2].second.message(), "uses CPU buffers, rank 0 (")) << got[2].second.ToString();
}

TEST(CommRendezvous, RefusesAnotherJobAndNamesMissingRanks) {
  Rendezvous::Options o = Loopback(2, "mine", 2'000);
  auto server = std::async(std::launch::async, [o]() mutable {
    o.rank = 0;
    return Rendezvous::Start(o, nullptr).status();
  });
  Rendezvous::Options stray = o;
  stray.rank = 1;
  stray.job = "theirs";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const Status refused = Rendezvous::Start(stray, nullptr).status();
  EXPECT_TRUE(Has(refused.message(), "job 'theirs'")) << refused.ToString();
  const Status s = server.get();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Has(s.message(), "rank(s) 1 of 2 never connected")) << s.ToString();
}

// ---- real processes ----

class CommProcessTest : public ::testing::Test {
 protected:
  std::string Log(const std::string& name) { return dir_.str() + "/" + name + ".log"; }

  // N ranks of fp8rt_comm_check with the FP8RT_* environment; their results in rank order.
  std::vector<test::ProcessResult> RunEnv(int n, const std::vector<std::string>& args,
                                          std::chrono::seconds timeout) {
    const int port = test::FreePort();
    std::vector<test::Process> procs;
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> argv = {COMM_CHECK_PATH};
      argv.insert(argv.end(), args.begin(), args.end());
      procs.emplace_back(argv,
                         std::vector<std::string>{
                             StrCat("FP8RT_RANK=", r), StrCat("FP8RT_WORLD_SIZE=", n),
                             StrCat("FP8RT_LOCAL_RANK=", r), "FP8RT_MASTER_ADDR=127.0.0.1",
                             StrCat("FP8RT_MASTER_PORT=", port), "FP8RT_JOB_ID=comm-test"},
                         Log(StrCat("env", r)));
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<test::ProcessResult> out;
    for (auto& p : procs) out.push_back(p.Wait(deadline));
    return out;
  }

  test::TempDir dir_;
};

TEST_F(CommProcessTest, MpirunTwoAndFourRanksEveryCollectiveMpiAndGloo) {
  for (const int n : {2, 4}) {
    for (const char* backend : {"mpi", "gloo"}) {
      auto argv = test::MpirunArgs(n);
      argv.insert(argv.end(), {COMM_CHECK_PATH, "--backend", backend});
      const auto r = test::RunProcess(argv, {}, Log("mpirun"), std::chrono::seconds(180));
      EXPECT_EQ(r.code, 0) << n << " ranks, " << backend << ":\n" << r.output;
      for (int k = 0; k < n; ++k) {
        EXPECT_TRUE(Has(r.output, StrCat("rank ", k, " of ", n, " (", backend, ", mpirun) OK")))
            << r.output;
      }
    }
  }
}

TEST_F(CommProcessTest, EnvironmentLauncherTwoRanksGloo) {
  const auto rs = RunEnv(2, {}, std::chrono::seconds(120));
  for (size_t r = 0; r < rs.size(); ++r) {
    EXPECT_EQ(rs[r].code, 0) << "rank " << r << ":\n" << rs[r].output;
    EXPECT_TRUE(Has(rs[r].output, StrCat("rank ", r, " of 2 (gloo, env) OK"))) << rs[r].output;
  }
}

TEST_F(CommProcessTest, AKilledRankEndsTheOthersNamingIt) {
  const auto rs = RunEnv(3, {"--fail", "kill", "--fail-rank", "1", "--timeout-ms", "60000"},
                         std::chrono::seconds(60));
  EXPECT_EQ(rs[1].code, 128 + SIGKILL) << rs[1].output;
  for (int r : {0, 2}) {
    EXPECT_FALSE(rs[r].timed_out) << "rank " << r << " hung:\n" << rs[r].output;
    EXPECT_EQ(rs[r].code, kExitPeerFailure) << "rank " << r << ":\n" << rs[r].output;
    EXPECT_TRUE(Has(rs[r].output, "rank 1 (")) << rs[r].output;
    EXPECT_TRUE(Has(rs[r].output, "exited or lost its connection")) << rs[r].output;
    EXPECT_TRUE(Has(rs[r].output, "loop all-reduce")) << rs[r].output;
    // Long before the 60 s collective timeout: the rendezvous noticed the death.
    EXPECT_LT(rs[r].seconds, 40) << rs[r].output;
  }
}

TEST_F(CommProcessTest, AHungRankEndsTheOthersAtTheCollectiveTimeout) {
  const auto rs = RunEnv(2, {"--fail", "hang", "--fail-rank", "1", "--timeout-ms", "3000"},
                         std::chrono::seconds(60));
  EXPECT_FALSE(rs[0].timed_out) << rs[0].output;
  EXPECT_EQ(rs[0].code, kExitPeerFailure) << rs[0].output;
  EXPECT_TRUE(Has(rs[0].output, "loop all-reduce")) << rs[0].output;
  EXPECT_TRUE(Has(rs[0].output, "did not complete within the collective timeout of 3 s"))
      << rs[0].output;
  // The hung rank is then told that rank 0 is gone, and ends too.
  EXPECT_FALSE(rs[1].timed_out) << rs[1].output;
  EXPECT_EQ(rs[1].code, kExitPeerFailure) << rs[1].output;
  EXPECT_TRUE(Has(rs[1].output, "rank 0 (")) << rs[1].output;
}

TEST_F(CommProcessTest, UnderMpirunAKilledRankEndsTheJob) {
  auto argv = test::MpirunArgs(2);
  argv.insert(argv.end(), {COMM_CHECK_PATH, "--fail", "kill", "--timeout-ms", "60000"});
  const auto r = test::RunProcess(argv, {}, Log("mpirun-kill"), std::chrono::seconds(90));
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.code, 0) << r.output;
  // Rank 0 names rank 1 (the rendezvous), or mpirun does (its own report of the death).
  EXPECT_TRUE(Has(r.output, "rank 1 (") || Has(r.output, "rank 1 with PID")) << r.output;
  EXPECT_LT(r.seconds, 60) << r.output;
}

}  // namespace
}  // namespace fp8rt::comm

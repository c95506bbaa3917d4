// The product end to end, as real processes on loopback (issue [5 of 9]'s acceptance): a
// scheduler (fp8d --scheduler) and two node daemons (fp8d --node, one CPU slot each) running real
// fp8train ranks, driven through the HTTP API and fp8ctl. A 2-rank data-parallel job spans both
// nodes; preemption, a killed rank, a hung rank, a killed daemon, priorities, cancel, the
// capability fallback and fp8d --standalone with fp8ctl's own discovery of its token.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cli/fp8ctl.h"
#include "tests/common/corpus.h"
#include "tests/common/fp8d_process.h"
#include "tests/common/subprocess.h"

namespace fp8rt::test {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }
size_t Count(const std::string& s, const std::string& sub) {
  size_t n = 0;
  for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + 1)) ++n;
  return n;
}
// A process that exists and is not a zombie (one nobody reaped yet has ended all the same).
bool Running(pid_t pid) {
  const std::string stat = Slurp(StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

class ClusterTest : public SchedProcessTest {
 protected:
  void SetUp() override {
    SchedProcessTest::SetUp();
    corpus_ = EnglishCorpus(dir_.str() + "/corpus.txt");
    ASSERT_FALSE(corpus_.empty());
    // The gangs' rendezvous ports (base + job id % 1000) below Linux's ephemeral range (32768 on),
    // where a concurrent test's client connections could hold them ("Address already in use").
    std::mt19937 rng(std::random_device{}());
    Start({"--heartbeat-interval", "1", "--heartbeat-timeout", "4", "--preemption-grace", "30",
           "--rendezvous-port-base", std::to_string(20000 + rng() % 11000)});
    url_ = StrCat("http://127.0.0.1:", port_);
    std::ofstream(dir_.str() + "/node-token") << kNode << "\n";
    ::chmod((dir_.str() + "/node-token").c_str(), 0600);  // fp8d refuses a looser token file
  }
  void TearDown() override {
    for (auto& n : nodes_) n.Kill(SIGKILL);
    // The ranks of killed daemons are in their own process groups: the next daemon on a data
    // dir kills them, and so does this.
    for (int i = 0; i < 2; ++i) {
      const json ranks =
          json::parse(Slurp(StrCat(dir_.str(), "/node", i, "/node/ranks.json")), nullptr, false);
      if (!ranks.is_array()) continue;
      for (const auto& r : ranks) ::kill(-r.value("pid", 0), SIGKILL);
    }
  }

  std::string NodeLog(int i) const { return StrCat(dir_.str(), "/node", i, ".log"); }
  // The daemons' hang detector's floor (--hang-floor, seconds) for the nodes started next; "":
  // fp8d's default floor and --hang-k.
  std::string hang_floor_ = "4";

  // Starts node daemon i (one CPU slot, unless `extra` says otherwise) and waits until it has
  // registered.
  void StartNode(int i, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--node",
                                     "--scheduler",
                                     url_,
                                     "--token-file",
                                     dir_.str() + "/node-token",
                                     "--data-dir",
                                     StrCat(dir_.str(), "/node", i),
                                     "--node-id",
                                     StrCat("n", i),
                                     "--address",
                                     "127.0.0.1",
                                     "--fp8train",
                                     FP8TRAIN_PATH,
                                     "--checkpoint-root",
                                     dir_.str() + "/ckpt",
                                     "--stop-grace",
                                     "20",
                                     "--data-root",
                                     dir_.str()};
    if (!hang_floor_.empty()) args.insert(args.end(), {"--hang-k", "5", "--hang-floor", hang_floor_});
    if (extra.empty()) extra = {"--cpu-slots", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    const size_t before = Count(Slurp(NodeLog(i)), "registered as");
    nodes_[i].Spawn(args, NodeLog(i));
    for (int k = 0; k < 500; ++k) {
      if (Count(Slurp(NodeLog(i)), "registered as") > before) return;
      ASSERT_TRUE(nodes_[i].Alive()) << Slurp(NodeLog(i));
      std::this_thread::sleep_for(20ms);
    }
    FAIL() << "node " << i << " did not register: " << Slurp(NodeLog(i));
  }

  // A small byte-level GPT: ~0.1 s a step on a CPU rank.
  json Config(int steps) const {
    return json::parse(StrCat(
        R"({"name": "e2e", "model": {"n_layer": 2, "n_embd": 64, "n_head": 4, "block_size": 64,
            "vocab_size": 256}, "data": {"train": ")", corpus_, R"(", "format": "text"},
            "train": {"batch_size": 4, "seq_len": 64, "total_steps": )", steps,
        R"(, "lr": 0.003, "warmup_steps": 5, "log_every": 1, "checkpoint_every": 10},
            "precision": "fp8"})"));
  }
  int64_t Submit(const json& spec, const std::string& token = kAlice) {
    const Reply r = Req("POST", "/v1/jobs", token, spec.dump());
    EXPECT_EQ(r.status, 201) << r.body;
    return r.Json().value("id", int64_t{-1});
  }
  json SpecOf(int nodes, int steps, int priority = 0) const {
    return {{"name", "e2e"}, {"config", Config(steps)},  {"nodes", nodes},
            {"gpus_per_node", 1}, {"priority", priority}, {"max_restarts", 3}};
  }
  json Job(int64_t id) { return Req("GET", StrCat("/v1/jobs/", id), kAdmin).Json(); }
  std::string Events(int64_t id) { return Req("GET", StrCat("/v1/jobs/", id, "/events"), kAdmin).body; }
  // Polls the job until `pred` holds; false after `timeout`.
  bool WaitFor(int64_t id, const std::function<bool(const json&)>& pred,
               std::chrono::seconds timeout = 120s) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (pred(Job(id))) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  bool WaitState(int64_t id, const std::string& state, std::chrono::seconds timeout = 120s) {
    return WaitFor(id, [&](const json& j) { return j.value("state", "") == state; }, timeout);
  }
  // Attempt `attempt` of the job has trained its first step (the scheduler timed its start).
  static bool TrainedAgain(const json& j, int attempt) {
    return j.contains("timing") && j["timing"].value("attempt", 0) == attempt &&
           j["timing"]["trained_at"].is_number();
  }
  static int64_t Step(const json& j) {
    return j.contains("progress") && j["progress"]["step"].is_number()
               ? j["progress"]["step"].get<int64_t>()
               : -1;
  }
  // Rank 0's losses by step, from whichever node ran rank 0 (the metrics of the last attempt).
  std::map<int64_t, double> Losses(int64_t id) {
    std::map<int64_t, double> out;
    for (int i = 0; i < 2; ++i) {
      std::istringstream in(Slurp(StrCat(dir_.str(), "/node", i, "/node/jobs/", id, "/metrics.jsonl")));
      for (std::string line; std::getline(in, line);) {
        const json j = json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("loss") && j["loss"].is_number()) {
          out[j["step"].get<int64_t>()] = j["loss"].get<double>();
        }
      }
    }
    return out;
  }
  // The pids of job `id`'s ranks on node i (from the daemon's record).
  std::vector<pid_t> Ranks(int i, int64_t id) {
    std::vector<pid_t> out;
    const json ranks =
        json::parse(Slurp(StrCat(dir_.str(), "/node", i, "/node/ranks.json")), nullptr, false);
    if (!ranks.is_array()) return out;
    for (const auto& r : ranks) {
      if (r.value("job", int64_t{0}) == id) out.push_back(r.value("pid", 0));
    }
    return out;
  }
  std::string Diag(int64_t id) {
    return StrCat("job: ", Job(id).dump(), "\nevents: ", Events(id), "\nnode0: ", Slurp(NodeLog(0)),
                  "\nnode1: ", Slurp(NodeLog(1)));
  }

  std::string corpus_, url_;
  Fp8dProcess nodes_[2];
};

TEST_F(ClusterTest, ATwoNodeJobCompletesAndAPreemptedRunResumesToTheSameFinalLoss) {
  StartNode(0);
  StartNode(1);
  const int64_t plain = Submit(SpecOf(2, 100));
  ASSERT_TRUE(WaitState(plain, "COMPLETED")) << Diag(plain);
  const json done = Job(plain);
  ASSERT_EQ(done["placement"].size(), 2u) << "one rank on each node";
  EXPECT_EQ(Step(done), 100);
  EXPECT_EQ(done["progress"]["total_steps"], 100);
  EXPECT_EQ(done["checkpoint_step"], 100);
  ASSERT_TRUE(done["progress"]["save_s"].is_number()) << done.dump();
  EXPECT_GT(done["progress"]["save_s"].get<double>(), 0) << "the measured save time";
  EXPECT_GT(done["progress"]["step_s"].get<double>(), 0);
  const auto reference = Losses(plain);
  ASSERT_EQ(reference.size(), 100u);
  // The ranks' output came up with the heartbeats: fp8ctl logs shows rank 0's last lines.
  const ProcessResult logs =
      RunProcess({FP8CTL_PATH, "--server", url_, "logs", std::to_string(plain), "--tail", "2"},
                 {StrCat("FP8CTL_TOKEN=", kAlice)}, dir_.str() + "/ctl.log", 30s);
  EXPECT_EQ(logs.code, fp8ctl::kOk) << logs.output;
  EXPECT_TRUE(Has(logs.output, "step 100/100")) << logs.output;
  EXPECT_EQ(Count(logs.output, "\n"), 2u) << logs.output;

  // The same job, preempted through fp8ctl once it is past its step-20 checkpoint.
  const int64_t id = Submit(SpecOf(2, 100));
  ASSERT_TRUE(WaitFor(id, [](const json& j) {
    return j.value("state", "") == "RUNNING" && j.value("checkpoint_step", -1) >= 20;
  })) << Diag(id);
  const ProcessResult pre =
      RunProcess({FP8CTL_PATH, "--server", url_, "--token", kAlice, "preempt", std::to_string(id)},
                 {}, dir_.str() + "/ctl.log", 30s);
  ASSERT_EQ(pre.code, fp8ctl::kOk) << pre.output;
  EXPECT_TRUE(Has(pre.output, "PREEMPTING")) << pre.output;
  ASSERT_TRUE(WaitState(id, "COMPLETED")) << Diag(id);
  const std::string events = Events(id);
  EXPECT_TRUE(Has(events, "\"to\":\"PREEMPTED\"")) << Diag(id);
  EXPECT_TRUE(Has(events, "requeued after preemption; resumes from checkpoint step")) << events;
  EXPECT_EQ(Job(id)["restarts"], 0) << "a preemption is not a restart";
  const auto resumed = Losses(id);
  ASSERT_FALSE(resumed.empty());
  EXPECT_GT(resumed.begin()->first, 20) << "the last attempt started from a checkpoint";
  for (const auto& [step, loss] : resumed) {
    ASSERT_TRUE(reference.count(step));
    EXPECT_EQ(loss, reference.at(step)) << "step " << step << ": bit-identical on the CPU";
  }
}

TEST_F(ClusterTest, AKilledRankAndAHungRankRestartTheGangFromItsCheckpoint) {
  StartNode(0);
  StartNode(1);
  const int64_t id = Submit(SpecOf(2, 60));
  ASSERT_TRUE(WaitFor(id, [](const json& j) { return j.value("checkpoint_step", -1) >= 10; }))
      << Diag(id);
  // kill -9 of one rank: the gang ends and restarts from its checkpoint.
  std::vector<pid_t> ranks = Ranks(1, id);
  ASSERT_EQ(ranks.size(), 1u) << Slurp(dir_.str() + "/node1/node/ranks.json");
  ::kill(ranks[0], SIGKILL);
  ASSERT_TRUE(WaitFor(id, [](const json& j) {
    return j.value("restarts", 0) == 1 && j.value("state", "") == "RUNNING";
  })) << Diag(id);
  // Whichever node reports first, the reason names the killed rank (its own code, or its peer's
  // message about it).
  EXPECT_TRUE(Has(Events(id), "rank 1")) << Events(id);
  EXPECT_TRUE(Has(Events(id), "resumes from checkpoint step")) << Events(id);
  // The recovery, timed: the node reports the failed gang at once (not at its next heartbeat).
  ASSERT_TRUE(WaitFor(id, [](const json& j) { return TrainedAgain(j, 2); })) << Diag(id);
  json phases = Job(id)["timing"]["phases"];
  EXPECT_LT(phases["detection_s"].get<double>(), 2.0) << phases.dump();
  EXPECT_LT(phases["from_detection_s"].get<double>(), 15.0) << phases.dump();
  EXPECT_TRUE(Has(Events(id), "training again at step")) << Events(id);
  std::cout << "killed rank, trained again: " << phases.dump() << "\n";
  ASSERT_TRUE(WaitState(id, "COMPLETED")) << Diag(id);
  EXPECT_EQ(Step(Job(id)), 60);

  // SIGSTOP of a lone rank (no peer whose collective timeout would notice): alive but stuck; the
  // daemon's hang detector (floor 4 s) kills the gang and it restarts from its checkpoint.
  const int64_t lone = Submit(SpecOf(1, 400));
  ASSERT_TRUE(WaitFor(lone, [](const json& j) { return Step(j) >= 5; })) << Diag(lone);
  std::this_thread::sleep_for(1s);  // a few steps, so the detector has a pace
  int node = Ranks(0, lone).empty() ? 1 : 0;
  ranks = Ranks(node, lone);
  ASSERT_EQ(ranks.size(), 1u);
  const auto stopped = std::chrono::steady_clock::now();
  ::kill(ranks[0], SIGSTOP);
  ASSERT_TRUE(WaitFor(lone, [](const json& j) { return j.value("restarts", 0) == 1; }, 60s))
      << Diag(lone);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  EXPECT_LT(took, 15) << "detected within the floor plus a heartbeat";
  EXPECT_TRUE(Has(Events(lone), "no progress since step")) << Events(lone);
  EXPECT_FALSE(Running(ranks[0])) << "the hung rank was killed";
  ASSERT_TRUE(WaitState(lone, "RUNNING", 30s)) << Diag(lone);
  // Its detection counts from the trainer's last progress: the floor at least.
  ASSERT_TRUE(WaitFor(
      lone, [](const json& j) { return TrainedAgain(j, 2); }, 30s))
      << Diag(lone);
  phases = Job(lone)["timing"]["phases"];
  EXPECT_GE(phases["detection_s"].get<double>(), 3.5) << phases.dump();
  EXPECT_LT(phases["detection_s"].get<double>(), 15.0) << phases.dump();
  std::cout << "hung rank, trained again: " << phases.dump() << "\n";
  ASSERT_EQ(Req("POST", StrCat("/v1/jobs/", lone, "/cancel"), kAlice).status, 200);
}

// Under fp8d's default hang settings (no --hang-floor, no --hang-k) a SIGSTOPped rank is found
// and its gang restarted from its checkpoint within 2 minutes.
TEST_F(ClusterTest, UnderDefaultSettingsAStoppedRankIsFoundAndRestartedWithinTwoMinutes) {
  hang_floor_ = "";
  StartNode(0);
  const int64_t id = Submit(SpecOf(1, 100000));
  ASSERT_TRUE(WaitFor(id, [](const json& j) { return j.value("checkpoint_step", -1) >= 10; }))
      << Diag(id);
  const std::vector<pid_t> ranks = Ranks(0, id);
  ASSERT_EQ(ranks.size(), 1u);
  const auto stopped = std::chrono::steady_clock::now();
  ::kill(ranks[0], SIGSTOP);
  ASSERT_TRUE(WaitFor(id, [](const json& j) {
    return j.value("restarts", 0) == 1 && j.value("state", "") == "RUNNING";
  }, 150s)) << Diag(id);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  std::cout << "SIGSTOP to the gang running again: " << took << " s\n";
  EXPECT_LT(took, 120) << Events(id);
  EXPECT_TRUE(Has(Events(id), "no progress since step")) << Events(id);
  EXPECT_FALSE(Running(ranks[0])) << "the stopped rank was killed";
  ASSERT_EQ(Req("POST", StrCat("/v1/jobs/", id, "/cancel"), kAlice).status, 200);
}

// A floor far below an evaluation's length (3 s against ~10 s): the trainer reports progress
// through it (busy evaluating), so it is not taken for a hang; the job completes, never
// restarted.
TEST_F(ClusterTest, ALongEvaluationThatMakesProgressIsNotAHang) {
  hang_floor_ = "3";
  StartNode(0);
  json spec = SpecOf(1, 30);
  spec["config"]["data"]["val"] = corpus_;
  spec["config"]["train"]["eval_every"] = 15;
  spec["config"]["train"]["eval_tokens"] = 80000;
  const int64_t id = Submit(spec);
  ASSERT_TRUE(WaitState(id, "COMPLETED", 300s)) << Diag(id);
  EXPECT_EQ(Job(id)["restarts"], 0) << Events(id);
  EXPECT_FALSE(Has(Events(id), "no progress")) << Events(id);
  // The evaluations did outlast the floor.
  double longest = 0;
  std::istringstream metrics(Slurp(StrCat(dir_.str(), "/node0/node/jobs/", id, "/metrics.jsonl")));
  for (std::string l; std::getline(metrics, l);) {
    const json j = json::parse(l, nullptr, false);
    if (j.is_object() && j.contains("eval_s")) longest = std::max(longest, j["eval_s"].get<double>());
  }
  std::cout << "longest evaluation: " << longest << " s\n";
  EXPECT_GT(longest, 3.0) << "the evaluation was shorter than the floor: nothing was tested";
}

TEST_F(ClusterTest, AKilledDaemonLosesItsNodeAndARestartedOneLeavesNoOrphans) {
  // n1's rank dies with its daemon, so n0's rank stops making progress too: with the usual 4 s
  // floor n0's hang detector raced the scheduler's 4 s heartbeat timeout for the requeue (and won
  // once under CI load). A floor far above the timeout leaves the node loss to be what is seen.
  hang_floor_ = "30";
  StartNode(0);
  StartNode(1);
  const int64_t id = Submit(SpecOf(2, 60));
  ASSERT_TRUE(WaitFor(id, [](const json& j) { return j.value("checkpoint_step", -1) >= 10; }))
      << Diag(id);
  const std::vector<pid_t> ranks = Ranks(1, id);
  ASSERT_EQ(ranks.size(), 1u);
  nodes_[1].Kill(SIGKILL);
  // The rank dies with its daemon (its parent-death signal), well within the heartbeat timeout:
  // nothing runs on to write into the job's directories once it is requeued.
  for (int i = 0; i < 40 && Running(ranks[0]); ++i) std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(Running(ranks[0])) << "the killed daemon's rank is gone";
  ASSERT_TRUE(WaitFor(id, [](const json& j) { return j.value("restarts", 0) >= 1; }, 30s))
      << Diag(id);
  // Requeued when n1 was lost, or, first, when n0's rank lost its peer (exit 4).
  EXPECT_TRUE(Has(Events(id), "node n1 lost") || Has(Events(id), "exited with code 4"))
      << Events(id);
  // The restarted daemon finds nothing left to kill (ranks.json names only dead processes), then
  // takes work again.
  StartNode(1);
  EXPECT_FALSE(Has(Slurp(NodeLog(1)), "left by a previous fp8d")) << Slurp(NodeLog(1));
  ASSERT_TRUE(WaitState(id, "COMPLETED")) << Diag(id);
}

TEST_F(ClusterTest, TheDaemonsRideOutASchedulerRestartAndRegisterAgainWithAFreshOne) {
  StartNode(0);
  const int64_t id = Submit(SpecOf(1, 100));
  ASSERT_TRUE(WaitFor(id, [](const json& j) { return Step(j) >= 5; })) << Diag(id);
  // kill -9 of the scheduler; the ranks train on. It comes back on the same port and data dir.
  auto restart = [&](const std::string& data) {
    proc_.Kill(SIGKILL);
    fs::remove(port_file_);
    proc_.Spawn({"--scheduler", "--port", std::to_string(port_), "--data-dir", data, "--tokens",
                 tokens_, "--port-file", port_file_, "--rate-limit", "100000", "--rate-burst",
                 "100000", "--heartbeat-interval", "1", "--heartbeat-timeout", "4"},
                log_);
    for (int i = 0; i < 1000 && !fs::exists(port_file_) && proc_.Alive(); ++i) {
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(fs::exists(port_file_)) << Slurp(log_);
  };
  restart(data_);
  ASSERT_TRUE(WaitState(id, "COMPLETED")) << Diag(id);
  EXPECT_EQ(Job(id)["restarts"], 0) << "the job never stopped";
  // A scheduler with an empty store does not know the node: the daemon registers again.
  restart(dir_.str() + "/fresh");
  for (int k = 0; k < 200 && Req("GET", "/v1/nodes/n0", kAdmin).status != 200; ++k) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(Req("GET", "/v1/nodes/n0", kAdmin).status, 200) << Slurp(NodeLog(0));
  EXPECT_TRUE(Has(Slurp(NodeLog(0)), "registering again")) << Slurp(NodeLog(0));
}

TEST_F(ClusterTest, PriorityPreemptsByItselfCancelFreesTheSlotsAndTheFallbackIsShown) {
  StartNode(0);
  StartNode(1, {"--fake-gpus", "1xA100:8.0"});
  // A low-priority 1-node job on the CPU slot, then a high-priority one that needs that slot.
  json low = SpecOf(1, 400);
  low["gpu_types"] = {"cpu"};
  const int64_t a = Submit(low);
  ASSERT_TRUE(WaitFor(a, [](const json& j) { return j.value("checkpoint_step", -1) >= 10; }))
      << Diag(a);
  json high = SpecOf(1, 400, 50);
  high["gpu_types"] = {"cpu"};
  const int64_t b = Submit(high);
  ASSERT_TRUE(WaitState(b, "RUNNING", 60s)) << Diag(b);
  EXPECT_EQ(Job(a)["state"], "PENDING") << Diag(a);
  EXPECT_TRUE(Has(Events(a), "PREEMPTED")) << Events(a);
  // cancel frees the slot: a runs again, from its checkpoint.
  ASSERT_EQ(Req("POST", StrCat("/v1/jobs/", b, "/cancel"), kAlice).status, 200);
  ASSERT_TRUE(WaitState(a, "RUNNING", 60s)) << Diag(a);
  ASSERT_EQ(Req("POST", StrCat("/v1/jobs/", a, "/cancel"), kAlice).status, 200);

  // fp8 asked on a node that reports compute capability 8.0: bf16, and status says why.
  json fp8 = SpecOf(1, 20);
  fp8["gpu_types"] = {"A100"};
  const int64_t c = Submit(fp8);
  ASSERT_TRUE(WaitState(c, "COMPLETED")) << Diag(c);
  EXPECT_EQ(Job(c)["precision"], "bf16");
  const ProcessResult st =
      RunProcess({FP8CTL_PATH, "--server", url_, "status", std::to_string(c)},
                 {StrCat("FP8CTL_TOKEN=", kAlice)}, dir_.str() + "/ctl.log", 30s);
  EXPECT_TRUE(Has(st.output, "precision: bf16 (placed on 1 x A100: FP8 needs compute capability 8.9"))
      << st.output;
  // A GPU type no registered node has: refused at submit, saying which (it would wait forever).
  json h200 = SpecOf(1, 20);
  h200["gpu_types"] = {"H200"};
  const Reply refused = Req("POST", "/v1/jobs", kAlice, h200.dump());
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_TRUE(Has(refused.body, "gpu_types = [H200]: no gang of 1 x 1 such GPUs exists")) << refused.body;
  // One that only waits for a busy node: pending, saying why.
  json busy = SpecOf(1, 400);
  busy["gpu_types"] = {"A100"};
  const int64_t first = Submit(busy);
  const int64_t d = Submit(busy);
  std::this_thread::sleep_for(2s);
  const json pending = Job(d);
  EXPECT_EQ(pending.value("state", ""), "PENDING") << pending.dump();
  EXPECT_TRUE(Has(pending.value("reason", ""), "A100")) << pending.dump();
  ASSERT_EQ(Req("POST", StrCat("/v1/jobs/", first, "/cancel"), kAlice).status, 200);
  ASSERT_EQ(Req("POST", StrCat("/v1/jobs/", d, "/cancel"), kAlice).status, 200);
}

// fp8ctl drain (what ansible/rolling-upgrade.yml runs): the job on the drained node checkpoints
// and moves to the other node without a restart counted and ends with the losses of an
// uninterrupted run; the node takes no jobs until fp8ctl undrain.
TEST_F(ClusterTest, DrainMovesAJobToTheOtherNodeAndUndrainTakesJobsAgain) {
  StartNode(0);
  StartNode(1);
  const int64_t id = Submit(SpecOf(1, 80));
  ASSERT_TRUE(WaitFor(id, [](const json& j) {
    return j.value("state", "") == "RUNNING" && j.value("checkpoint_step", -1) >= 20;
  })) << Diag(id);
  const std::string from = Job(id)["placement"][0]["node"];
  const std::string to = from == "n0" ? "n1" : "n0";
  auto ctl = [&](std::vector<std::string> args, const char* token = kAdmin) {
    std::vector<std::string> argv = {FP8CTL_PATH, "--server", url_, "--token", token};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, {}, dir_.str() + "/ctl.log", 30s);
  };
  const ProcessResult refused = ctl({"drain", from}, kAlice);
  EXPECT_NE(refused.code, fp8ctl::kOk);
  EXPECT_TRUE(Has(refused.output, "only admin tokens may drain")) << refused.output;
  const ProcessResult drained = ctl({"drain", from, "--reason", "kernel upgrade"});
  ASSERT_EQ(drained.code, fp8ctl::kOk) << drained.output;
  EXPECT_TRUE(Has(drained.output, StrCat("node ", from, ": DRAINING (1 job(s) checkpointing")))
      << drained.output;
  // Running on the other node, or already done there: the drain can land late in the run, and
  // its last steps then take less than one poll (CI saw it resume at step 66 of 80 and finish
  // within the second).
  ASSERT_TRUE(WaitFor(id, [&](const json& j) {
    const std::string state = j.value("state", "");
    return (state == "RUNNING" || state == "COMPLETED") && !j["placement"].empty() &&
           j["placement"][0]["node"] == to;
  })) << Diag(id);
  const ProcessResult nodes = ctl({"nodes"});
  EXPECT_TRUE(Has(nodes.output, "DRAINING")) << nodes.output;
  EXPECT_TRUE(Has(nodes.output, "(drained: kernel upgrade)")) << nodes.output;
  ASSERT_TRUE(WaitState(id, "COMPLETED")) << Diag(id);
  EXPECT_EQ(Job(id)["restarts"], 0) << "a drain is not a restart";
  EXPECT_TRUE(Has(Events(id), "drained by ops (kernel upgrade); checkpointing to move")) << Events(id);
  const auto losses = Losses(id);
  ASSERT_EQ(losses.size(), 80u) << "every step once, from the two attempts' metrics";

  // Still drained: a new job waits for the other node; undrained, the node takes one again.
  const int64_t two = Submit(SpecOf(2, 20));
  std::this_thread::sleep_for(3s);
  EXPECT_EQ(Job(two)["state"], "PENDING") << Diag(two);
  const ProcessResult back = ctl({"undrain", from});
  ASSERT_EQ(back.code, fp8ctl::kOk) << back.output;
  EXPECT_TRUE(Has(back.output, StrCat("node ", from, ": READY"))) << back.output;
  ASSERT_TRUE(WaitState(two, "COMPLETED")) << Diag(two);
}

TEST_F(ClusterTest, StandaloneTrainsThroughFp8ctlWithTheTokenItWrote) {
  // fp8d --standalone on its own data dir, found by fp8ctl through FP8D_DATA_DIR alone.
  const std::string data = dir_.str() + "/standalone";
  const std::string config = dir_.str() + "/job.yaml";
  json with_val = Config(20);  // held-out evaluations at steps 10 and 20 (the training text)
  with_val["data"]["val"] = corpus_;
  with_val["train"]["eval_every"] = 10, with_val["train"]["eval_tokens"] = 1024;
  std::ofstream(config) << with_val.dump();
  Fp8dProcess alone;
  ::setenv("FP8D_DATA_DIR", data.c_str(), 1);
  alone.Spawn({"--standalone", "--port", "0", "--cpu-slots", "1", "--fp8train", FP8TRAIN_PATH,
               "--data-root", dir_.str()},
              dir_.str() + "/standalone.log");
  ::unsetenv("FP8D_DATA_DIR");
  for (int k = 0; k < 500 && !fs::exists(data + "/server"); ++k) std::this_thread::sleep_for(20ms);
  struct stat st {};
  ASSERT_EQ(::stat((data + "/token").c_str(), &st), 0) << Slurp(dir_.str() + "/standalone.log");
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const ProcessResult run = RunProcess({FP8CTL_PATH, "submit", config, "--wait", "--poll-ms", "200"},
                                       {"FP8D_DATA_DIR=" + data, "XDG_CONFIG_HOME=" + dir_.str()},
                                       dir_.str() + "/ctl.log", 120s);
  EXPECT_EQ(run.code, fp8ctl::kOk) << run.output << Slurp(dir_.str() + "/standalone.log");
  EXPECT_TRUE(Has(run.output, "RUNNING")) << run.output;
  EXPECT_TRUE(Has(run.output, "20/20 (100%)")) << "progress is visible: " << run.output;
  EXPECT_TRUE(Has(run.output, "COMPLETED")) << run.output;
  // The last evaluation came from rank 0's metrics through the node's heartbeat and the store.
  const std::vector<std::string> env = {"FP8D_DATA_DIR=" + data, "XDG_CONFIG_HOME=" + dir_.str()};
  const ProcessResult status =
      RunProcess({FP8CTL_PATH, "status", "1"}, env, dir_.str() + "/ctl.log", 30s);
  EXPECT_EQ(status.code, fp8ctl::kOk) << status.output;
  EXPECT_TRUE(Has(status.output, "val_loss ")) << status.output;
  EXPECT_TRUE(Has(status.output, "(step 20)")) << status.output;
  const ProcessResult js =
      RunProcess({FP8CTL_PATH, "--json", "status", "1"}, env, dir_.str() + "/ctl.log", 30s);
  ASSERT_EQ(js.code, fp8ctl::kOk) << js.output;
  const json progress = json::parse(js.output, nullptr, false).value("progress", json::object());
  EXPECT_EQ(progress.value("val_step", json()), 20) << js.output;
  const json val_loss = progress.value("val_loss", json());
  ASSERT_TRUE(val_loss.is_number()) << js.output;
  EXPECT_GT(val_loss.get<double>(), 0) << js.output;

  // Continued pretraining through the product: the job's checkpoint exported for Hugging Face,
  // then a job whose config names it relative to the config's own directory (train.init_from:
  // hf): fp8ctl makes it absolute before the config travels into the job's directory.
  const ProcessResult exp = RunProcess(
      {FP8TRAIN_PATH, "--export-hf", data + "/checkpoints/1", dir_.str() + "/hf"}, {},
      dir_.str() + "/export.log", 60s);
  ASSERT_EQ(exp.code, 0) << exp.output;
  json from_hf = Config(5);
  from_hf["train"]["init_from"] = "hf";
  std::ofstream(dir_.str() + "/job2.yaml") << from_hf.dump();
  const ProcessResult run2 = RunProcess(
      {FP8CTL_PATH, "submit", dir_.str() + "/job2.yaml", "--wait", "--poll-ms", "200"}, env,
      dir_.str() + "/ctl2.log", 120s);
  EXPECT_EQ(run2.code, fp8ctl::kOk) << run2.output << Slurp(dir_.str() + "/standalone.log");
  EXPECT_TRUE(Has(run2.output, "COMPLETED")) << run2.output;
  alone.Signal(SIGTERM);
  EXPECT_EQ(alone.Wait(), 0) << Slurp(dir_.str() + "/standalone.log");
}

}  // namespace
}  // namespace fp8rt::test

// The trust boundary (issue 33), tried as a hostile and a careless user would, against real
// processes on loopback: fp8d --standalone (scheduler and node daemon in one) running real
// fp8train ranks, driven over HTTP and through fp8ctl. Each test names the defect it shows
// mended. FP8RT_TEST_BIN_DIR=DIR runs them against another build's fp8d, fp8ctl and fp8train
// (they fail against the commit before the mends, afda0fe).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/fp8ctl.h"
#include "common/checkpoint_fence.h"
#include "scheduler/auth.h"
#include "tests/common/fp8d_process.h"
#include "tests/common/subprocess.h"

namespace fp8rt::test {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// The pids in a node daemon's ranks.json.
std::vector<pid_t> RecordedRanks(const std::string& path) {
  std::vector<pid_t> out;
  const json j = json::parse(Slurp(path), nullptr, false);
  if (!j.is_array()) return out;
  for (const auto& r : j) out.push_back(r.value("pid", 0));
  return out;
}

// A process that exists and is not a zombie.
bool Alive(pid_t pid) {
  const std::string stat = Slurp(StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// fp8d --standalone with two users (alice, bob), a node token, a config directory (the one data
// root: fp8d's default) holding a corpus, and one CPU slot, unless told otherwise.
class TrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = dir_.str() + "/cfg";
    outside_ = dir_.str() + "/outside";
    // fp8d's state lies under the data root, as the quickstart's runs/fp8d under the repository.
    data_ = cfg_ + "/runs/fp8d";
    fs::create_directories(cfg_);
    fs::create_directories(outside_);
    {
      std::ofstream corpus(cfg_ + "/corpus.txt");
      for (int i = 0; i < 300; ++i) corpus << "Every input a job names is checked first. ";
    }
    tokens_ = dir_.str() + "/tokens.yaml";
    std::ofstream(tokens_) << "admin: [{name: ops, sha256: " << sched::HashToken(kAdmin) << "}]\n"
                           << "node: [{name: daemons, sha256: " << sched::HashToken(kNode) << "}]\n"
                           << "user:\n  - {name: alice, sha256: " << sched::HashToken(kAlice)
                           << "}\n  - {name: bob, sha256: " << sched::HashToken(kBob) << "}\n";
    node_token_ = dir_.str() + "/node-token";
    std::ofstream(node_token_) << kNode << "\n";
    ::chmod(node_token_.c_str(), 0600);
  }
  void TearDown() override {
    proc_.Kill(SIGKILL);
    for (pid_t p : RecordedRanks(data_ + "/node/ranks.json")) ::kill(-p, SIGKILL);
  }

  // Starts it and waits until its node has registered.
  void Start(std::vector<std::string> extra = {}) {
    const std::string port_file = dir_.str() + "/port";
    fs::remove(port_file);
    std::vector<std::string> args = {"--standalone",
                                     "--port",
                                     "0",
                                     "--port-file",
                                     port_file,
                                     "--data-dir",
                                     data_,
                                     "--tokens",
                                     tokens_,
                                     "--token-file",
                                     node_token_,
                                     "--config-dir",
                                     cfg_,
                                     "--fp8train",
                                     TestBinary("fp8train", FP8TRAIN_PATH),
                                     "--heartbeat-timeout",
                                     "4",
                                     "--stop-grace",
                                     "5",
                                     "--rate-limit",
                                     "100000",
                                     "--rate-burst",
                                     "100000"};
    if (std::find(extra.begin(), extra.end(), "--fake-gpus") == extra.end()) {
      args.insert(args.end(), {"--cpu-slots", "1"});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    proc_.Spawn(args, log_);
    for (int i = 0; i < 1000 && !fs::exists(port_file) && proc_.Alive(); ++i) {
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(fs::exists(port_file)) << Slurp(log_);
    port_ = static_cast<uint16_t>(std::stoi(Slurp(port_file)));
    url_ = StrCat("http://127.0.0.1:", port_);
    for (int i = 0; i < 500; ++i) {
      const json nodes = Call(port_, "GET", "/v1/nodes", kAdmin).Json();
      if (nodes.is_object() && !nodes.value("nodes", json::array()).empty()) return;
      std::this_thread::sleep_for(20ms);
    }
    FAIL() << "the node did not register: " << Slurp(log_);
  }
  Reply Post(const json& spec, const std::string& token = kAlice) {
    return Call(port_, "POST", "/v1/jobs", token, spec.dump());
  }
  json Job(int64_t id) { return Call(port_, "GET", StrCat("/v1/jobs/", id), kAdmin).Json(); }
  bool WaitFor(int64_t id, const std::function<bool(const json&)>& pred,
               std::chrono::seconds timeout = 90s) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (pred(Job(id))) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  bool WaitState(int64_t id, const std::string& state, std::chrono::seconds timeout = 90s) {
    return WaitFor(
        id, [&](const json& j) { return j.value("state", "") == state; }, timeout);
  }
  size_t JobCount() { return Call(port_, "GET", "/v1/jobs", kAdmin).Json()["jobs"].size(); }
  // A small byte-level GPT on the config directory's corpus: ~0.05 s a step on a CPU slot.
  json Config(int steps = 4) const {
    return {{"name", "t"},
            {"model", {{"n_layer", 1}, {"n_embd", 32}, {"n_head", 2}, {"block_size", 32}}},
            {"data", {{"train", cfg_ + "/corpus.txt"}}},
            {"train",
             {{"batch_size", 2},
              {"seq_len", 32},
              {"total_steps", steps},
              {"lr", 0.001},
              {"checkpoint_every", 1}}}};
  }
  json Spec(const json& config, const std::string& name = "t") const {
    return {{"name", name}, {"config", config}};
  }
  // fp8ctl with the token in the environment (as its --token warning asks).
  ProcessResult Ctl(std::vector<std::string> args, const std::string& token = kAlice,
                    std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {TestBinary("fp8ctl", FP8CTL_PATH)};
    if (!url_.empty()) argv.insert(argv.end(), {"--server", url_});
    argv.insert(argv.end(), args.begin(), args.end());
    env.push_back(StrCat("FP8CTL_TOKEN=", token));
    env.push_back("XDG_CONFIG_HOME=" + dir_.str() + "/xdg");
    return RunProcess(argv, env, dir_.str() + "/ctl.log", 90s);
  }

  TempDir dir_;
  std::string cfg_, outside_, data_, tokens_, node_token_, url_;
  std::string log_ = dir_.str() + "/fp8d.log";
  Fp8dProcess proc_;
  uint16_t port_ = 0;
};

// ---- A user can read files that are not theirs ----

// Another user's checkpoint, a 0600 file outside the roots, a `..` path, a symlink out of the
// root and a FIFO: each refused with a 400 naming the key and the rule, nothing stored, nothing
// outside the roots opened (an inotify watch on it sees no open), no content echoed.
TEST_F(TrustTest, InputsOutsideTheRootsAreRefusedAtSubmitAndNeverOpened) {
  Start();
  // Bob's job writes checkpoints (under fp8d's data dir).
  const Reply bob = Post(Spec(Config(3), "bobs"), kBob);
  ASSERT_EQ(bob.status, 201) << bob.body;
  ASSERT_TRUE(WaitState(1, "COMPLETED")) << Job(1).dump() << Slurp(log_);
  std::string bobs_ckpt;
  for (const auto& e : fs::recursive_directory_iterator(data_ + "/checkpoints/1")) {
    if (e.path().filename() == "adam_v.bin") bobs_ckpt = e.path().string();
  }
  ASSERT_FALSE(bobs_ckpt.empty());

  const std::string secret = outside_ + "/secret.txt";
  std::ofstream(secret) << "TOPSECRET TOPSECRET TOPSECRET";
  ::chmod(secret.c_str(), 0600);
  ASSERT_EQ(::mkfifo((outside_ + "/fifo").c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo((cfg_ + "/fifo").c_str(), 0644), 0);
  fs::create_symlink(secret, cfg_ + "/link.txt");
  const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(::inotify_add_watch(watch, outside_.c_str(), IN_OPEN | IN_ACCESS), 0);

  struct Case {
    const char* key;
    std::string path;
    json config;
    const char* rule;
  };
  auto with = [&](const char* section, const char* key, const std::string& value,
                  json extra = json::object()) {
    json c = Config();
    c[section][key] = value;
    for (auto& [k, v] : extra.items()) c["data"][k] = v;
    return c;
  };
  const std::vector<Case> cases = {
      {"data.train", bobs_ckpt, with("data", "train", bobs_ckpt, {{"format", "tokens"}}),
       "lies in fp8d's own state"},
      {"data.train", secret, with("data", "train", secret), "is outside the data roots"},
      {"data.val", cfg_ + "/../outside/secret.txt",
       with("data", "val", cfg_ + "/../outside/secret.txt"), "is outside the data roots"},
      {"data.train", cfg_ + "/link.txt", with("data", "train", cfg_ + "/link.txt"),
       "through a symbolic link"},
      {"data.val", outside_ + "/fifo", with("data", "val", outside_ + "/fifo"),
       "is outside the data roots"},
      {"data.val", cfg_ + "/fifo", with("data", "val", cfg_ + "/fifo"), "is a FIFO"},
      {"train.init_from", outside_, with("train", "init_from", outside_),
       "is outside the data roots"},
  };
  for (const Case& c : cases) {
    const Reply r = Post(Spec(c.config));
    EXPECT_EQ(r.status, 400) << c.key << " = " << c.path << ": " << r.body;
    const std::string error = r.Json().value("error", "");
    EXPECT_TRUE(Has(error, c.key)) << error;
    EXPECT_TRUE(Has(error, c.rule)) << error << "\nshould say: " << c.rule;
    EXPECT_FALSE(Has(r.body, "TOPSECRET")) << r.body;
  }
  EXPECT_EQ(JobCount(), 1u) << "nothing was stored";
  // Had any job been placed, its ranks would have opened the files by now.
  std::this_thread::sleep_for(2s);
  char events[4096];
  const ssize_t n = ::read(watch, events, sizeof events);
  ::close(watch);
  EXPECT_LE(n, 0) << "something opened a file outside the roots";
  for (const auto& j : Call(port_, "GET", "/v1/jobs", kAdmin).Json()["jobs"]) {
    EXPECT_FALSE(Has(j.dump(), "TOPSECRET")) << j.dump();
  }
}

// config_path through a symlink inside the config directory that leads out of it: refused (the
// real path is checked), and the file is read once, at submit, from its real path.
TEST_F(TrustTest, ConfigPathThroughASymlinkOutOfTheConfigDirectoryIsRefused) {
  Start();
  std::ofstream(outside_ + "/job.yaml") << Config().dump();
  fs::create_symlink(outside_ + "/job.yaml", cfg_ + "/evil.yaml");
  const Reply r = Post({{"name", "e"}, {"config_path", "evil.yaml"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(Has(r.Json().value("error", ""),
                  "config_path = '" + cfg_ + "/evil.yaml' leaves the config roots"))
      << r.body;
  EXPECT_TRUE(Has(r.Json().value("error", ""), "through a symbolic link")) << r.body;
  EXPECT_EQ(JobCount(), 0u);
  // A config file inside the directory is read at submit: the job holds it as an object.
  std::ofstream(cfg_ + "/good.yaml")
      << "model: {n_layer: 1, n_embd: 32, n_head: 2, block_size: 32}\n"
      << "data: {train: corpus.txt}\n"
      << "train: {batch_size: 2, seq_len: 32, total_steps: 2}\n";
  const Reply good = Post({{"name", "g"}, {"config_path", "good.yaml"}});
  ASSERT_EQ(good.status, 201) << good.body;
  const json spec = good.Json()["spec"];
  EXPECT_TRUE(spec["config"].is_object()) << spec.dump();
  EXPECT_EQ(spec["config"]["data"]["train"], cfg_ + "/corpus.txt") << "relative to the file";
}

// ---- The config the user wrote is the config that runs ----

// precision: bf16 in a config submitted without --precision runs BF16; the same with --precision
// fp8 runs FP8 on an FP8 GPU; on a cc 8.0 GPU it falls back and the job says so. (Fake GPUs: the
// ranks run on the CPU, in the precision the scheduler decided.)
TEST_F(TrustTest, TheConfigsPrecisionRunsUnlessOverriddenAndAFallbackSaysSo) {
  Start({"--fake-gpus", "1xH100:9.0"});
  json c = Config(2);
  c["precision"] = "bf16";
  std::ofstream(cfg_ + "/bf16.yaml") << c.dump();
  auto metrics_precision = [&](int64_t id) {
    std::ifstream in(StrCat(data_, "/node/jobs/", id, "/metrics.jsonl"));
    std::string last;
    for (std::string l; std::getline(in, l);) {
      const json j = json::parse(l, nullptr, false);
      if (j.is_object() && j.contains("precision")) last = j["precision"].get<std::string>();
    }
    return last;
  };
  const ProcessResult plain = Ctl({"submit", cfg_ + "/bf16.yaml", "--wait", "--poll-ms", "100"});
  ASSERT_EQ(plain.code, 0) << plain.output << Slurp(log_);
  EXPECT_EQ(Job(1)["precision"], "bf16") << Job(1).dump();
  EXPECT_EQ(Job(1)["precision_source"], "config");
  EXPECT_EQ(metrics_precision(1), "bf16");
  const ProcessResult fp8 =
      Ctl({"submit", cfg_ + "/bf16.yaml", "--precision", "fp8", "--wait", "--poll-ms", "100"});
  ASSERT_EQ(fp8.code, 0) << fp8.output;
  EXPECT_EQ(Job(2)["precision"], "fp8") << Job(2).dump();
  EXPECT_EQ(Job(2)["precision_source"], "override");
  EXPECT_EQ(metrics_precision(2), "fp8");

  proc_.Kill(SIGTERM);
  fs::remove_all(data_);
  Start({"--fake-gpus", "1xA100:8.0"});
  const ProcessResult ampere =
      Ctl({"submit", cfg_ + "/bf16.yaml", "--precision", "fp8", "--wait", "--poll-ms", "100"});
  ASSERT_EQ(ampere.code, 0) << ampere.output;
  EXPECT_EQ(Job(1)["precision"], "bf16");
  EXPECT_EQ(Job(1)["precision_source"], "fallback");
  EXPECT_TRUE(Has(Job(1)["precision_reason"].get<std::string>(),
                  "FP8 needs compute capability 8.9 (A100: 8.0); running bf16 (fallback)"))
      << Job(1).dump();
  const ProcessResult status = Ctl({"status", "1"});
  EXPECT_TRUE(Has(status.output,
                  "precision: bf16 (placed on 1 x A100: FP8 needs compute "
                  "capability 8.9"))
      << status.output;
  EXPECT_EQ(metrics_precision(1), "bf16");
}

// A typo'd key: refused by fp8ctl before any request (exit 2, the user's file and line; the
// server given is not even there) and by POST /v1/jobs with a 400 naming the field and line.
TEST_F(TrustTest, ATypoIsRefusedByFp8ctlWithTheFileAndLineAndByTheApi) {
  Start();
  const std::string typo = cfg_ + "/t.yaml";
  std::ofstream(typo) << "model: {n_layer: 1, n_embd: 32, n_head: 2, block_size: 32}\n"
                      << "data: {train: corpus.txt}\n"
                      << "train:\n"
                      << "  batch_sise: 8\n";
  const ProcessResult local = RunProcess(
      {TestBinary("fp8ctl", FP8CTL_PATH), "--server", "http://127.0.0.1:1", "submit", typo},
      {StrCat("FP8CTL_TOKEN=", kAlice)}, dir_.str() + "/ctl.log", 30s);
  EXPECT_EQ(local.code, fp8ctl::kBadInput) << local.output;
  EXPECT_TRUE(Has(local.output, typo + ": unknown field 'train.batch_sise' at line 4"))
      << local.output;
  const Reply api = Call(
      port_, "POST", "/v1/jobs", kAlice,
      "name: t\nconfig:\n  data: {train: " + cfg_ + "/corpus.txt}\n  train:\n    batch_sise: 8\n");
  EXPECT_EQ(api.status, 400) << api.body;
  EXPECT_TRUE(
      Has(api.Json().value("error", ""), "config: unknown field 'train.batch_sise' at line 5"))
      << api.body;
  EXPECT_EQ(JobCount(), 0u) << "nothing stored";
}

// A request no node could ever satisfy is refused at submit, naming the resource, instead of
// waiting forever.
TEST_F(TrustTest, AnImpossibleRequestIsRefusedNamingTheResource) {
  Start();
  json spec = Spec(Config());
  spec["gpus_per_node"] = 4;
  const Reply r = Post(spec);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_TRUE(Has(r.Json().value("error", ""), "gpus_per_node = 4")) << r.body;
  EXPECT_TRUE(Has(r.Json().value("error", ""), "the most on a node is 1")) << r.body;
  spec["gpus_per_node"] = 1;
  spec["gpu_types"] = {"H100"};
  const Reply t = Post(spec);
  EXPECT_EQ(t.status, 400) << t.body;
  EXPECT_TRUE(Has(t.Json().value("error", ""), "gpu_types = [H100]")) << t.body;
  EXPECT_EQ(JobCount(), 0u);
}

// ---- A node or a stale rank can write where it should not ----

// A daemon killed with SIGKILL: its ranks are gone within the heartbeat timeout (they die with
// it), and a rank of an older attempt that is still alive cannot commit a checkpoint once a newer
// attempt has started: the last good checkpoint stays.
TEST_F(TrustTest, RanksDieWithTheirDaemonAndAStaleAttemptsCommitIsRefused) {
  Start();
  const Reply r = Post(Spec(Config(1'000'000)));
  ASSERT_EQ(r.status, 201) << r.body;
  ASSERT_TRUE(WaitFor(1, [](const json& j) { return j.value("checkpoint_step", -1) >= 2; }))
      << Job(1).dump() << Slurp(log_);
  const std::vector<pid_t> ranks = RecordedRanks(data_ + "/node/ranks.json");
  ASSERT_EQ(ranks.size(), 1u);
  ASSERT_TRUE(Alive(ranks[0]));
  proc_.Kill(SIGKILL);
  bool gone = false;
  for (int i = 0; i < 40 && !gone; ++i) {  // the heartbeat timeout is 4 s
    gone = !Alive(ranks[0]);
    if (!gone) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(gone) << "rank " << ranks[0] << " outlived its daemon";

  // A rank kept alive on purpose: fp8train as attempt 1 of the job, writing its checkpoint
  // directory after the job's attempt 2 has started (raised the fence).
  const std::string ckpt = data_ + "/checkpoints/1";
  const std::string latest = Slurp(ckpt + "/LATEST");
  ASSERT_FALSE(latest.empty());
  std::ofstream(dir_.str() + "/stale.yaml") << Config(1'000'000).dump();
  Process stale({TestBinary("fp8train", FP8TRAIN_PATH), "--config", dir_.str() + "/stale.yaml",
                 "--device", "cpu", "--checkpoint-dir", ckpt, "--resume", "--attempt", "1"},
                {}, dir_.str() + "/stale.log");
  // The fence as the node daemon raises it when it starts attempt 2.
  ASSERT_TRUE(RaiseCheckpointFence(ckpt, 2).ok());
  const ProcessResult out = stale.Wait(std::chrono::steady_clock::now() + 60s);
  EXPECT_NE(out.code, 0) << out.output;
  EXPECT_TRUE(Has(out.output,
                  "checkpoint refused: this run is attempt 1 of the job, and attempt 2 "
                  "has started since"))
      << out.output;
  EXPECT_EQ(Slurp(ckpt + "/LATEST"), latest) << "the last good checkpoint was replaced";
}

// Registration fields with control characters are refused; a node cannot store output for a job
// that is not placed on it, for ranks outside the gang, or for a job not yet submitted.
TEST_F(TrustTest, NodeMessagesAreConfinedToTheirOwnJobsAndRanks) {
  Start();
  const Reply esc = Call(port_, "POST", "/v1/nodes/register", kNode,
                         R"({"id": "n9", "address": "10.0.0.9\u001b]0;pwned\u0007",
                             "gpus": [{"name": "L4", "compute_capability": "8.9",
                                       "memory_gib": 24}]})");
  EXPECT_EQ(esc.status, 400) << esc.body;
  EXPECT_TRUE(Has(esc.Json().value("error", ""), "address")) << esc.body;
  const Reply gpu = Call(port_, "POST", "/v1/nodes/register", kNode,
                         R"({"id": "n9", "gpus": [{"name": "L4\u001b[2J", "memory_gib": 24,
                             "compute_capability": "8.9"}]})");
  EXPECT_EQ(gpu.status, 400) << gpu.body;
  EXPECT_TRUE(Has(gpu.Json().value("error", ""), "gpus[0].name")) << gpu.body;
  // Another node (a node token's holder) that does not run the job.
  ASSERT_EQ(Call(port_, "POST", "/v1/nodes/register", kNode,
                 R"({"id": "n9", "gpus": [{"name": "L4", "compute_capability": "8.9",
                     "memory_gib": 24}]})")
                .status,
            200);
  json spec = Spec(Config(1'000'000));
  spec["gpu_types"] = {"cpu"};  // the standalone node's slot, not n9's GPU
  ASSERT_EQ(Post(spec).status, 201);
  ASSERT_TRUE(WaitState(1, "RUNNING")) << Job(1).dump();
  const Reply hb = Call(port_, "POST", "/v1/nodes/n9/heartbeat", kNode,
                        R"({"jobs": [{"job_id": 1, "status": "running", "attempt": 1,
                            "logs": {"0": "PLANTED\n"}},
                           {"job_id": 2, "status": "running", "logs": {"0": "NEXT\n"}}]})");
  EXPECT_EQ(hb.status, 200) << hb.body;
  // The job's own node, for a rank outside the gang (rank 9,999,999: unbounded keys before).
  const std::string node = Job(1)["placement"][0]["node"].get<std::string>();
  const Reply far = Call(port_, "POST", StrCat("/v1/nodes/", node, "/heartbeat"), kNode,
                         R"({"jobs": [{"job_id": 1, "status": "running", "attempt": 1,
                             "logs": {"9999999": "FAR\n"}}]})");
  EXPECT_EQ(far.status, 200) << far.body;
  const Reply logs = Call(port_, "GET", "/v1/jobs/1/logs", kAlice);
  ASSERT_EQ(logs.status, 200);
  EXPECT_FALSE(Has(logs.body, "PLANTED")) << logs.body;
  EXPECT_EQ(logs.Json()["ranks"], json::array({0})) << logs.body;
  ASSERT_EQ(Call(port_, "POST", "/v1/jobs/1/cancel", kAlice).status, 200);
  ASSERT_EQ(Post(spec).status, 201);
  EXPECT_FALSE(Has(Call(port_, "GET", "/v1/jobs/2/logs", kAlice).body, "NEXT"))
      << "the next user's job shows output a node planted before it existed";
}

// fp8ctl logs and fp8ctl nodes print what a node sent with its control characters visible.
TEST_F(TrustTest, Fp8ctlShowsEscapeSequencesAsText) {
  Start();
  const Reply job = Post(Spec(Config(1'000'000)));
  ASSERT_EQ(job.status, 201);
  ASSERT_TRUE(WaitState(1, "RUNNING")) << Job(1).dump();
  const std::string node = Job(1)["placement"][0]["node"].get<std::string>();
  // The standalone node's own heartbeat does not carry this, so the job's node is impersonated
  // once with its own token: what a hostile node daemon (or a rank's output) could send.
  const Reply hb = Call(port_, "POST", StrCat("/v1/nodes/", node, "/heartbeat"), kNode,
                        R"({"jobs": [{"job_id": 1, "status": "running", "attempt": 1,
                            "logs": {"0": "red \u001b[31mtext\u001b]0;title\u0007 done\n"}}]})");
  ASSERT_EQ(hb.status, 200) << hb.body;
  const ProcessResult logs = Ctl({"logs", "1"});
  ASSERT_EQ(logs.code, 0) << logs.output;
  EXPECT_EQ(logs.output.find('\x1b'), std::string::npos) << "a raw escape reached the terminal";
  EXPECT_TRUE(Has(logs.output, "red \\x1b[31mtext\\x1b]0;title\\x07 done")) << logs.output;
}

// ---- Local files and the CLI ----

// fp8d --standalone's data dir is 0700; a token file anyone else may read is refused naming the
// file and the fix; a link at node-token.tmp is not followed when the token is written.
TEST_F(TrustTest, StandaloneFilesArePrivateAndTokenFilesAreNotReusedWhenLoose) {
  const std::string victim = dir_.str() + "/victim";
  std::ofstream(victim) << "untouched\n";
  fs::create_directories(data_);
  ::chmod(data_.c_str(), 0755);
  fs::create_symlink(victim, data_ + "/node-token.tmp");
  Fp8dProcess alone;
  const std::string port_file = dir_.str() + "/port-alone";
  alone.Spawn({"--standalone", "--port", "0", "--port-file", port_file, "--data-dir", data_,
               "--cpu-slots", "1", "--config-dir", cfg_},
              dir_.str() + "/alone.log");
  for (int i = 0; i < 1000 && !fs::exists(port_file) && alone.Alive(); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(fs::exists(port_file)) << Slurp(dir_.str() + "/alone.log");
  struct stat st {};
  ASSERT_EQ(::stat(data_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "the data dir holds the store, logs and checkpoints";
  EXPECT_EQ(Slurp(victim), "untouched\n") << "the token was written through the link";
  ASSERT_EQ(::stat((data_ + "/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  alone.Kill(SIGTERM);
  ::chmod((data_ + "/token").c_str(), 0644);
  const ProcessResult loose = RunProcess({TestBinary("fp8d", FP8D_PATH), "--standalone", "--port",
                                          "0", "--data-dir", data_, "--cpu-slots", "1"},
                                         {}, dir_.str() + "/loose.log", 30s);
  EXPECT_EQ(loose.code, 2) << loose.output;
  EXPECT_TRUE(Has(loose.output, data_ + "/token is mode 0644")) << loose.output;
  EXPECT_TRUE(Has(loose.output, "chmod 600 " + data_ + "/token")) << loose.output;
}

// fp8ctl never aborts: a directory, a file over the server's limit, a token with CR LF, and
// answers of shapes it does not know each give a documented exit code and a message; --token on
// the command line is warned about.
TEST_F(TrustTest, Fp8ctlNeverAbortsAndWarnsAboutATokenOnTheCommandLine) {
  const ProcessResult dir = Ctl({"--server", "http://127.0.0.1:1", "submit", "/tmp"});
  EXPECT_EQ(dir.code, fp8ctl::kBadInput) << dir.output;
  EXPECT_TRUE(Has(dir.output, "/tmp is a directory")) << dir.output;
  const std::string big = dir_.str() + "/big.yaml";
  {
    std::ofstream out(big);
    out << "name: big\ndata: {train: x}\n# ";
    out << std::string(16 << 20, 'x') << "\n";
  }
  const ProcessResult large = Ctl({"--server", "http://127.0.0.1:1", "submit", big});
  EXPECT_EQ(large.code, fp8ctl::kBadInput) << large.output.substr(0, 300);
  EXPECT_TRUE(Has(large.output, "too large: the scheduler takes at most 1048576 bytes (1 MiB)"))
      << large.output.substr(0, 300);
  const ProcessResult crlf =
      Ctl({"--server", "http://127.0.0.1:1", "list"}, "abc\r\nX-Injected: 1");
  EXPECT_EQ(crlf.code, fp8ctl::kBadInput) << crlf.output;
  EXPECT_TRUE(Has(crlf.output, "the token holds control characters")) << crlf.output;
  const ProcessResult flag =
      RunProcess({TestBinary("fp8ctl", FP8CTL_PATH), "--server", "http://127.0.0.1:1", "--token",
                  kAlice, "list"},
                 {"XDG_CONFIG_HOME=" + dir_.str() + "/xdg"}, dir_.str() + "/ctl.log", 30s);
  EXPECT_TRUE(Has(flag.output, "warning: --token shows the token to every user of this machine"))
      << flag.output;

  // A "server" whose answers have shapes fp8ctl does not know.
  for (const std::string& answer :
       {std::string("{}"), std::string(R"({"jobs": 5, "nodes": "x", "events": 3, "text": 7})"),
        std::string(R"({"error": {"nested": true}})"), std::string("[1, 2]")}) {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(listener, 16), 0);
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    const int status = answer.find("error") != std::string::npos ? 400 : 200;
    std::atomic<bool> stop{false};
    std::thread server([&] {
      while (!stop) {
        const int c = ::accept(listener, nullptr, nullptr);
        if (c < 0) return;
        char buf[8192];
        (void)!::read(c, buf, sizeof buf);
        const std::string reply =
            StrCat("HTTP/1.1 ", status, " X\r\nContent-Type: application/json\r\n",
                   "Content-Length: ", answer.size(), "\r\nConnection: close\r\n\r\n", answer);
        (void)!::write(c, reply.data(), reply.size());
        ::close(c);
      }
    });
    const std::string server_url = StrCat("http://127.0.0.1:", ntohs(a.sin_port));
    for (const std::vector<std::string>& verb :
         std::vector<std::vector<std::string>>{{"list"},
                                               {"status", "1"},
                                               {"cancel", "1"},
                                               {"events", "1"},
                                               {"logs", "1"},
                                               {"nodes"},
                                               {"submit", cfg_ + "/corpus.yaml"}}) {
      if (verb[0] == "submit") std::ofstream(cfg_ + "/corpus.yaml") << Config().dump();
      std::vector<std::string> args = {"--server", server_url};
      args.insert(args.end(), verb.begin(), verb.end());
      const ProcessResult r = Ctl(args);
      EXPECT_TRUE(r.code == fp8ctl::kServerError || r.code == fp8ctl::kBadInput)
          << answer << " " << verb[0] << ": exit " << r.code << "\n"
          << r.output;
      EXPECT_TRUE(Has(r.output, "fp8ctl: ")) << r.output;
    }
    stop = true;
    ::shutdown(listener, SHUT_RDWR);
    ::close(listener);
    server.join();
  }
}

// The documented limits, with the field named: a 10 KB name says 128; nodes: 2^63 says nodes.
TEST_F(TrustTest, SpecLimitsAreTheDocumentedOnesAndNameTheField) {
  Start();
  json spec = Spec(Config());
  spec["name"] = std::string(10'000, 'a');
  const Reply name = Post(spec);
  EXPECT_EQ(name.status, 400);
  EXPECT_TRUE(Has(name.Json().value("error", ""), "at most 128 are allowed")) << name.body;
  const Reply nodes =
      Call(port_, "POST", "/v1/jobs", kAlice,
           StrCat("name: n\nconfig: ", Config().dump(), "\nnodes: 9223372036854775808\n"));
  EXPECT_EQ(nodes.status, 400);
  EXPECT_TRUE(Has(nodes.Json().value("error", ""),
                  "nodes = 9223372036854775808 is out of range [1, 4096] at line 3"))
      << nodes.body;
}

}  // namespace
}  // namespace fp8rt::test

// fp8ctl against the real fp8d --scheduler on loopback, as real processes: submit a training
// config, list, status, events, cancel, --wait; and the documented exit codes for a wrong token,
// another user's job, a malformed spec, an unknown flag and a server that is not there.
#include <gtest/gtest.h>

#include <filesystem>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "cli/fp8ctl.h"
#include "cli/fp8ctl_view.h"
#include "tests/common/fp8d_process.h"
#include "tests/common/subprocess.h"

namespace fp8rt::test {
namespace {

using json = nlohmann::json;

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

class Fp8ctl : public SchedProcessTest {
 protected:
  void SetUp() override {
    SchedProcessTest::SetUp();
    Start();
    url_ = StrCat("http://127.0.0.1:", port_);
  }
  // Runs fp8ctl with `args` (after --server URL unless `server` is false); `env` added.
  ProcessResult Ctl(std::vector<std::string> args, const std::string& token = kAlice,
                    std::vector<std::string> env = {}, bool server = true) {
    std::vector<std::string> argv = {FP8CTL_PATH};
    if (server) argv.insert(argv.end(), {"--server", url_});
    // The token from the environment: --token would add its warning to the output.
    if (!token.empty()) env.push_back(StrCat("FP8CTL_TOKEN=", token));
    argv.insert(argv.end(), args.begin(), args.end());
    // No config file of the machine's own.
    env.push_back("XDG_CONFIG_HOME=" + dir_.str() + "/xdg");
    return RunProcess(argv, env, dir_.str() + "/ctl.log", std::chrono::seconds(60));
  }
  std::string url_;
};

TEST(Fp8ctlView, TheProgressBarAndTheFallbackReason) {
  const json job = json::parse(R"({"id": 3, "owner": "alice", "state": "RUNNING",
      "spec": {"name": "gpt", "precision": "fp8"}, "precision": "bf16",
      "precision_source": "fallback",
      "precision_reason": "placed on 1 x A100: FP8 needs compute capability 8.9; running bf16",
      "reason": "running", "progress": {"step": 1200, "total_steps": 5000, "loss": 3.41234,
      "tokens_per_s": 52100, "mfu": 0.41, "eta_s": 723, "val_loss": 3.56789, "val_step": 1000,
      "at": 5}})");
  const json v = fp8ctl::View(job);
  EXPECT_EQ(v["name"], "gpt");
  EXPECT_EQ(v["user"], "alice");
  EXPECT_EQ(v["fallback_reason"], job["precision_reason"]);
  EXPECT_EQ(v["progress"]["total"], 5000);
  EXPECT_EQ(v["progress"]["val_loss"], 3.56789);
  EXPECT_EQ(v["progress"]["val_step"], 1000);
  EXPECT_EQ(fp8ctl::ProgressLine(v),
            "[####----------------] 1200/5000 (24%)  loss 3.4123  val_loss 3.5679 (step 1000)  "
            "52.1K tok/s  MFU 41.0%  ETA 12m3s");
  // No evaluation yet (null, or a record from before val_loss existed): nothing shown.
  json no_val = job;
  no_val["progress"]["val_loss"] = nullptr, no_val["progress"]["val_step"] = nullptr;
  json older = job;
  older["progress"].erase("val_loss"), older["progress"].erase("val_step");
  for (const json& j : {no_val, older}) {
    const json w = fp8ctl::View(j);
    EXPECT_TRUE(w["progress"]["val_loss"].is_null());
    EXPECT_EQ(fp8ctl::ProgressLine(w),
              "[####----------------] 1200/5000 (24%)  loss 3.4123  52.1K tok/s  MFU 41.0%  "
              "ETA 12m3s");
  }
  json none = job;
  none["progress"] = {{"step", -1}, {"total_steps", -1}, {"loss", nullptr}, {"at", 0}};
  EXPECT_EQ(fp8ctl::ProgressLine(fp8ctl::View(none)), "no progress reported yet");
  json fp8 = job;
  fp8["precision"] = "fp8";
  fp8["precision_source"] = "config";
  EXPECT_EQ(fp8ctl::View(fp8)["fallback_reason"], "") << "no fallback, nothing to explain";
}

// fp8ctl status's checkpoint line: the last one, what a save takes, what they take on disk, and
// the warning of one that failed and was gone on from.
TEST(Fp8ctlView, TheCheckpointLine) {
  json job = json::parse(R"({"id": 3, "owner": "alice", "state": "RUNNING",
      "spec": {"name": "gpt"}, "precision": "fp8", "reason": "running", "restarts": 0,
      "checkpoint_step": 4000, "placement": [],
      "progress": {"step": 4100, "total_steps": 5000, "save_s": 7.81,
                   "checkpoint_disk_bytes": 47368000000, "at": 5}})");
  std::ostringstream out;
  fp8ctl::PrintStatus(fp8ctl::View(job), out);
  EXPECT_TRUE(Has(out.str(), "last checkpoint: step 4000; a save takes 7.8 s to commit (what a "
                             "preemption waits for); checkpoints on disk: 47.37 GB"))
      << out.str();
  EXPECT_FALSE(Has(out.str(), "warning")) << out.str();
  job["progress"]["checkpoint_error"] = "the checkpoint of step 4050 failed: EIO";
  job["progress"].erase("checkpoint_disk_bytes");
  std::ostringstream warned;
  fp8ctl::PrintStatus(fp8ctl::View(job), warned);
  EXPECT_TRUE(Has(warned.str(), "warning: the checkpoint of step 4050 failed: EIO")) << warned.str();
  EXPECT_FALSE(Has(warned.str(), "on disk")) << warned.str();
}

TEST_F(Fp8ctl, SubmitListStatusEventsCancel) {
  const ProcessResult sub = Ctl({"submit", files_ + "/c.yaml", "--gpus", "2"});
  ASSERT_EQ(sub.code, fp8ctl::kOk) << sub.output;
  EXPECT_EQ(sub.output, "1\n") << "submit prints the job id";
  const ProcessResult list = Ctl({"--json", "list"});
  ASSERT_EQ(list.code, 0) << list.output;
  const json jobs = json::parse(list.output);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["id"], 1);
  EXPECT_EQ(jobs[0]["name"], "tiny");
  EXPECT_EQ(jobs[0]["user"], "alice");
  EXPECT_EQ(jobs[0]["state"], "PENDING");
  EXPECT_EQ(jobs[0]["spec"]["gpus_per_node"], 2);
  EXPECT_TRUE(jobs[0]["spec"].contains("config")) << "the training config travels in the job";
  const ProcessResult st = Ctl({"status", "1", "--json"});
  ASSERT_EQ(st.code, 0) << st.output;
  const json s = json::parse(st.output);
  for (const char* key : {"id", "name", "user", "state", "precision", "fallback_reason"}) {
    EXPECT_TRUE(s.contains(key)) << key;
  }
  for (const char* key :
       {"step", "total", "loss", "tokens_per_s", "eta_s", "val_loss", "val_step"}) {
    EXPECT_TRUE(s["progress"].contains(key)) << key;
  }
  const ProcessResult table = Ctl({"list"});
  EXPECT_TRUE(Has(table.output, "ID")) << table.output;
  EXPECT_TRUE(Has(table.output, "tiny")) << table.output;
  const ProcessResult cancel = Ctl({"cancel", "1"});
  ASSERT_EQ(cancel.code, 0) << cancel.output;
  EXPECT_TRUE(Has(cancel.output, "job 1: CANCELLED (cancelled by alice)")) << cancel.output;
  const ProcessResult ev = Ctl({"events", "1"});
  ASSERT_EQ(ev.code, 0) << ev.output;
  EXPECT_TRUE(Has(ev.output, "PENDING -> CANCELLED")) << ev.output;
  const ProcessResult nodes = Ctl({"nodes"}, kAdmin);
  EXPECT_EQ(nodes.code, 0) << nodes.output;
  EXPECT_TRUE(Has(nodes.output, "NODE")) << nodes.output;
}

// No node can run it here, so the job waits PENDING until another client cancels it: --wait
// follows it and exits with kJobFailed.
TEST_F(Fp8ctl, WaitFollowsTheJobAndExitsWithItsOutcome) {
  std::thread canceller([&] {
    for (int i = 0; i < 500; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (Req("POST", "/v1/jobs/1/cancel", kAlice).status == 200) return;
    }
  });
  const ProcessResult w = Ctl({"submit", files_ + "/c.yaml", "--wait", "--poll-ms", "50"});
  canceller.join();
  EXPECT_EQ(w.code, fp8ctl::kJobFailed) << w.output;
  EXPECT_TRUE(Has(w.output, "job 1: PENDING")) << w.output;
  EXPECT_TRUE(Has(w.output, "job 1: CANCELLED")) << w.output;
}

TEST_F(Fp8ctl, EveryFailureHasItsExitCodeAndSaysWhat) {
  ASSERT_EQ(Ctl({"submit", files_ + "/c.yaml"}).code, 0);
  const ProcessResult wrong = Ctl({"list"}, "not-a-token");
  EXPECT_EQ(wrong.code, fp8ctl::kAuth) << wrong.output;
  const ProcessResult missing = Ctl({"status", "99"});
  EXPECT_EQ(missing.code, fp8ctl::kNotFound) << missing.output;
  const ProcessResult other = Ctl({"cancel", "1"}, kBob);
  EXPECT_TRUE(other.code == fp8ctl::kAuth || other.code == fp8ctl::kNotFound) << other.output;
  EXPECT_EQ(Ctl({"status", "1"}).output.find("CANCELLED"), std::string::npos)
      << "bob's cancel changed nothing";
  const std::string spec = dir_.str() + "/bad.yaml";
  std::ofstream(spec) << "name: x\nconfig_path: c.yaml\ngpus: 8\n";
  const ProcessResult bad = Ctl({"submit", spec});
  EXPECT_EQ(bad.code, fp8ctl::kBadInput) << bad.output;
  EXPECT_TRUE(Has(bad.output, "gpus")) << bad.output;
  const ProcessResult flag = Ctl({"list", "--frobnicate"});
  EXPECT_EQ(flag.code, fp8ctl::kBadInput) << flag.output;
  const ProcessResult dead = [&] {
    return RunProcess({FP8CTL_PATH, "--server", "http://127.0.0.1:1", "--token", kAlice, "list"},
                      {}, dir_.str() + "/ctl.log", std::chrono::seconds(60));
  }();
  EXPECT_EQ(dead.code, fp8ctl::kUnreachable) << dead.output;
  EXPECT_TRUE(Has(dead.output, "cannot connect to 127.0.0.1:1")) << dead.output;
  EXPECT_EQ(Req("GET", "/v1/jobs", kAdmin).Json()["jobs"].size(), 1u) << "nothing was added";
}

// --version on every program; bare fp8ctl prints its help; an unknown verb is named with the
// nearest known one (after --server's value too), and nothing reaches the server.
TEST_F(Fp8ctl, VersionHelpAndUnknownVerbs) {
  for (const char* program : {FP8CTL_PATH, FP8TRAIN_PATH, FP8D_PATH}) {
    const ProcessResult v =
        RunProcess({program, "--version"}, {}, dir_.str() + "/v.log", std::chrono::seconds(60));
    EXPECT_EQ(v.code, 0) << program << ": " << v.output;
    const std::string name = std::filesystem::path(program).filename().string();
    EXPECT_TRUE(Has(v.output, name + " 0.")) << v.output;
    EXPECT_TRUE(Has(v.output, "(fp8rt)")) << v.output;
  }
  const ProcessResult bare = RunProcess({FP8CTL_PATH}, {}, dir_.str() + "/b.log",
                                        std::chrono::seconds(60));
  EXPECT_EQ(bare.code, fp8ctl::kBadInput) << bare.output;
  EXPECT_TRUE(Has(bare.output, "submit") && Has(bare.output, "cancel")) << bare.output;
  const ProcessResult typo = Ctl({"lsit"});
  EXPECT_EQ(typo.code, fp8ctl::kBadInput) << typo.output;
  EXPECT_TRUE(Has(typo.output, "unknown command 'lsit'; did you mean 'list'?")) << typo.output;
  const ProcessResult far = Ctl({"frobnicate", "1"});
  EXPECT_EQ(far.code, fp8ctl::kBadInput) << far.output;
  EXPECT_TRUE(Has(far.output, "unknown command 'frobnicate' (fp8ctl --help")) << far.output;
  EXPECT_EQ(Req("GET", "/v1/jobs", kAdmin).Json()["jobs"].size(), 0u) << "nothing was sent";
}

TEST_F(Fp8ctl, ServerAndTokenFromTheEnvironmentOrAPrivateConfigFile) {
  ASSERT_EQ(Ctl({"submit", files_ + "/c.yaml"}).code, 0);
  const ProcessResult env =
      Ctl({"list"}, "", {"FP8CTL_SERVER=" + url_, StrCat("FP8CTL_TOKEN=", kAlice)}, false);
  EXPECT_EQ(env.code, 0) << env.output;
  EXPECT_TRUE(Has(env.output, "tiny")) << env.output;
  const std::string cfg = dir_.str() + "/xdg/fp8ctl/config";
  fs::create_directories(fs::path(cfg).parent_path());
  std::ofstream(cfg) << "server: " << url_ << "\ntoken: " << kAlice << "\n";
  ::chmod(cfg.c_str(), 0644);
  const ProcessResult open = Ctl({"list"}, "", {}, false);
  EXPECT_EQ(open.code, fp8ctl::kAuth) << open.output;
  EXPECT_TRUE(Has(open.output, "chmod 600")) << open.output;
  ::chmod(cfg.c_str(), 0600);
  const ProcessResult file = Ctl({"list"}, "", {}, false);
  EXPECT_EQ(file.code, 0) << file.output;
  EXPECT_TRUE(Has(file.output, "tiny")) << file.output;
}

}  // namespace
}  // namespace fp8rt::test

// The scheduling loop's test fixtures (scheduler_loop_test.cc and the suites beside it): a
// Scheduler over a store with an injected clock, helpers for specs, nodes and daemon reports,
// and the /v1/nodes routes through an Api with node and user tokens.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "scheduler/api.h"
#include "scheduler/scheduler.h"
#include "scheduler/store.h"
#include "tests/common/job_files.h"
#include "tests/common/temp_dir.h"

namespace fp8rt::sched::loop_test {

using json = nlohmann::json;

inline JobSpec Spec(const std::string& name, int gpus, int priority = 0) {
  JobSpec s;
  s.name = name;
  s.config_path = "configs/gpt.yaml";  // (read at submit by the Api; the Scheduler takes it as is)
  s.config.data.train = {"/data/corpus.txt"};
  s.gpus_per_node = gpus;
  s.priority = priority;
  return s;
}

inline NodeRegistration Node(const std::string& id, const std::string& gpu, int cc, int count) {
  NodeRegistration r;
  r.id = id;
  r.gpus = std::vector<GpuInfo>(count, GpuInfo{gpu, cc, 80, true});
  return r;
}

inline JobReport Running(int64_t id, int64_t step = -1, int64_t ckpt = -1) {
  JobReport r;
  r.job_id = id, r.status = RankStatus::kRunning, r.progress.step = step, r.checkpoint_step = ckpt;
  return r;
}
inline JobReport Exited(int64_t id, int code, int64_t ckpt = -1) {
  JobReport r;
  r.job_id = id, r.status = RankStatus::kExited, r.exit_code = code, r.checkpoint_step = ckpt;
  return r;
}

class SchedLoopTest : public ::testing::Test {
 protected:
  // Nodes are only lost in the tests that say so.
  void SetUp() override {
    options_.heartbeat_timeout_s = 1'000'000;
    Open(NewMemoryJobStore());
  }

  void Open(std::unique_ptr<JobStore> store) {
    sched_.reset();
    store_ = std::move(store);
    OpenAgain();
  }
  void OpenAgain() {
    sched_.reset();
    auto s = Scheduler::Open(store_.get(), options_, now_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sched_ = std::move(s).value();
  }

  Job Get(int64_t id) {
    auto j = store_->Get(id);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : Job{};
  }
  std::vector<Event> Events(int64_t id) { return *store_->Events(id); }
  int64_t Submit(const JobSpec& spec) {
    auto j = sched_->Submit("alice", spec, now_);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? j->id : -1;
  }
  TickResult Tick() {
    auto r = sched_->Tick(now_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : TickResult{};
  }
  std::vector<NodeCommand> Beat(const std::string& node, std::vector<JobReport> reports) {
    HeartbeatRequest hb;
    hb.jobs = std::move(reports);
    auto c = sched_->Heartbeat(node, hb, now_);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : std::vector<NodeCommand>{};
  }
  void Register(const NodeRegistration& r) { ASSERT_TRUE(sched_->RegisterNode(r, now_).ok()); }

  SchedulerOptions options_;
  int64_t now_ = 1000;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Scheduler> sched_;
};

inline constexpr char kNodeToken[] = "node-secret";
inline constexpr char kUserToken[] = "alice-secret";
inline constexpr char kAdminToken[] = "ops-secret";

class SchedNodesApiTest : public SchedLoopTest {
 protected:
  void SetUp() override {
    SchedLoopTest::SetUp();
    auto auth =
        TokenAuth::Parse(StrCat("node: [{name: daemons, sha256: ", HashToken(kNodeToken),
                                "}]\nuser: [{name: alice, sha256: ", HashToken(kUserToken),
                                "}]\nadmin: [{name: ops, sha256: ", HashToken(kAdminToken), "}]"));
    ASSERT_TRUE(auth.ok());
    test::WriteJobFiles(files_.str());
    ApiOptions ao = test::RootedAt(files_.str());
    ao.burst = 1000;
    api_ = std::make_unique<Api>(
        sched_.get(), store_.get(), *auth, [this] { return static_cast<double>(now_); }, ao);
  }
  HttpResponse Call(const std::string& method, const std::string& target, const char* token,
                    const std::string& body = "") {
    HttpRequest r{method, target, {}, body};
    r.headers["authorization"] = StrCat("Bearer ", token);
    return api_->Handle(r);
  }
  std::string State() {
    std::string s;
    for (const NodeInfo& n : sched_->Nodes()) s += NodeToJson(n, true);
    auto jobs = store_->List();
    EXPECT_TRUE(jobs.ok());
    if (jobs.ok()) {
      for (const Job& j : jobs.value()) s += JobToJson(j);
    }
    return s;
  }
  // A request the API must refuse with `status`, its body saying `says`, changing nothing.
  struct BadCall {
    const char* method;
    const char* target;
    const char* token;
    std::string body;
    int status;
    const char* says;
  };
  void ExpectRefusedChangingNothing(const std::vector<BadCall>& calls) {
    const std::string before = State();
    for (const BadCall& b : calls) {
      HttpResponse res = Call(b.method, b.target, b.token, b.body);
      EXPECT_EQ(res.status, b.status) << b.target << " " << b.body << " -> " << res.body;
      EXPECT_NE(res.body.find(b.says), std::string::npos) << res.body;
      EXPECT_EQ(State(), before) << b.target << " " << b.body;
    }
  }
  test::TempDir files_;
  std::unique_ptr<Api> api_;
};

}  // namespace fp8rt::sched::loop_test

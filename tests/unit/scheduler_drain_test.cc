// Draining a node (`fp8ctl drain`, POST /v1/nodes/{id}/drain): no new placements on it, its
// running jobs checkpoint and move to other nodes without counting a restart, its scheduled ones
// are requeued at once; the drain outlives a re-registration, a loss and a scheduler restart
// (RocksDB), and undrain makes the node schedulable again. Admin tokens only.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "scheduler/api.h"
#include "scheduler/scheduler.h"
#include "scheduler/store.h"
#include "tests/common/temp_dir.h"
#include "tests/unit/scheduler_loop_fixture.h"

namespace fp8rt::sched {
namespace {

using namespace loop_test;  // NOLINT(build/namespaces)

TEST_F(SchedLoopTest, ADrainedNodesJobsCheckpointAndMoveAndItGetsNoNewOnesUntilUndrained) {
  test::TempDir dir;
  auto store = OpenRocksDbJobStore(dir.str() + "/db");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Open(std::move(store).value());
  Register(Node("h1", "H100", 90, 8));
  const int64_t a = Submit(Spec("a", 8));
  const int64_t s = Submit(Spec("s", 8));
  ASSERT_EQ(Tick().scheduled, std::vector<int64_t>{a});  // s waits for the node
  Beat("h1", {Running(a, 50, 40)});
  ASSERT_EQ(Get(a).state, JobState::kRunning);
  Register(Node("h2", "H100", 90, 8));
  ASSERT_EQ(Tick().scheduled, std::vector<int64_t>{s});
  ASSERT_EQ(Get(s).placement.at(0).node_id, "h2");

  EXPECT_EQ(sched_->DrainNode("h9", true, "", "ops", now_).status().code(), StatusCode::kNotFound);
  auto h1 = sched_->DrainNode("h1", true, "kernel upgrade", "ops", now_);
  ASSERT_TRUE(h1.ok()) << h1.status().ToString();
  EXPECT_EQ(h1->state, NodeState::kDraining);
  EXPECT_TRUE(h1->drained);
  EXPECT_EQ(h1->drain_reason, "kernel upgrade");
  EXPECT_EQ(Get(a).state, JobState::kPreempting);
  EXPECT_EQ(Get(a).reason,
            "node h1 drained by ops (kernel upgrade); checkpointing to move to another node");
  // h2's job was only SCHEDULED: draining h2 requeues it at once, undrain lets it back.
  ASSERT_TRUE(sched_->DrainNode("h2", true, "", "ops", now_).ok());
  EXPECT_EQ(Get(s).state, JobState::kPending);
  EXPECT_EQ(Get(s).reason, "node h2 drained by ops before the job started; requeued");
  EXPECT_EQ(Get(s).restarts, 0);
  EXPECT_TRUE(Tick().scheduled.empty()) << "no placements on drained nodes";
  ASSERT_TRUE(sched_->DrainNode("h2", false, "", "ops", now_).ok());
  EXPECT_EQ(sched_->Node("h2")->state, NodeState::kReady);
  EXPECT_EQ(Tick().scheduled, std::vector<int64_t>{s});

  // a checkpoints on h1 and is requeued without a restart counted; it waits (h2 is full).
  auto cmds = Beat("h1", {Running(a, 60, 40)});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, CommandKind::kCheckpoint);
  Beat("h1", {Exited(a, 3, 60)});
  EXPECT_EQ(Get(a).state, JobState::kPending);
  EXPECT_EQ(Get(a).checkpoint_step, 60);
  EXPECT_EQ(Get(a).restarts, 0);
  EXPECT_TRUE(Tick().scheduled.empty()) << "h1 is drained, h2 busy";

  // The drain outlives the daemon registering again, a loss and a scheduler restart.
  Register(Node("h1", "H100", 90, 8));
  EXPECT_EQ(sched_->Node("h1")->state, NodeState::kDraining);
  OpenAgain();
  EXPECT_EQ(sched_->Node("h1")->state, NodeState::kDraining);
  EXPECT_TRUE(sched_->Node("h1")->drained);
  options_.heartbeat_timeout_s = 10;
  OpenAgain();
  now_ += 11;
  Beat("h2", {Running(s, 5)});
  EXPECT_EQ(Tick().lost_nodes, std::vector<std::string>{"h1"});
  EXPECT_EQ(sched_->Node("h1")->state, NodeState::kLost);
  Beat("h1", {});
  EXPECT_EQ(sched_->Node("h1")->state, NodeState::kDraining) << "back, and still drained";
  EXPECT_TRUE(Tick().scheduled.empty());

  // Undrained, it takes a, which resumes from its checkpoint.
  auto back = sched_->DrainNode("h1", false, "", "ops", now_);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->state, NodeState::kReady);
  EXPECT_FALSE(back->drained);
  EXPECT_TRUE(back->drain_reason.empty());
  EXPECT_EQ(Tick().scheduled, std::vector<int64_t>{a});
  cmds = Beat("h1", {});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, CommandKind::kStart);
  EXPECT_EQ(cmds[0].resume_step, 60);
}

TEST_F(SchedNodesApiTest, DrainAndUndrainAreForAdminsAndShowInTheNodeList) {
  Register(Node("n1", "H100", 90, 8));
  const int64_t a = Submit(Spec("a", 4));
  Tick();
  Beat("n1", {Running(a, 5)});
  ExpectRefusedChangingNothing({
           {"POST", "/v1/nodes/n1/drain", kUserToken, "", 403, "only admin tokens may drain"},
           {"POST", "/v1/nodes/n1/undrain", kNodeToken, "", 403, "only admin tokens may undrain"},
           {"POST", "/v1/nodes/n9/drain", kAdminToken, "", 404, "node n9 is not registered"},
           {"POST", "/v1/nodes/n1/drain", kAdminToken, R"({"why": "x"})", 400, "'why'"},
           {"POST", "/v1/nodes/n1/drain", kAdminToken, R"({"reason": 5})", 400, "reason"},
           {"POST", "/v1/nodes/n1/drains", kAdminToken, "", 404, "no route"},
      });
  EXPECT_EQ(Call("GET", "/v1/nodes/n1/drain", kAdminToken).status, 405);

  HttpResponse d = Call("POST", "/v1/nodes/n1/drain", kAdminToken, R"({"reason": "upgrade"})");
  ASSERT_EQ(d.status, 200) << d.body;
  const json node = json::parse(d.body).at("node");
  EXPECT_EQ(node.at("state"), "DRAINING");
  EXPECT_EQ(node.at("drained"), true);
  EXPECT_EQ(node.at("drain_reason"), "upgrade");
  EXPECT_EQ(node.at("jobs"), json::array({a})) << "the job still holds its GPUs while it saves";
  const json listed = json::parse(Call("GET", "/v1/nodes", kUserToken).body).at("nodes").at(0);
  EXPECT_EQ(listed.at("state"), "DRAINING");
  EXPECT_EQ(Get(a).state, JobState::kPreempting);
  HttpResponse u = Call("POST", "/v1/nodes/n1/undrain", kAdminToken);
  ASSERT_EQ(u.status, 200) << u.body;
  EXPECT_EQ(json::parse(u.body).at("node").at("state"), "READY");
  EXPECT_EQ(json::parse(u.body).at("node").at("drained"), false);
  EXPECT_FALSE(json::parse(u.body).at("node").contains("drain_reason"));
}

}  // namespace
}  // namespace fp8rt::sched

// How long a job takes to train again, phase by phase: the scheduler's timing of each attempt
// (the failure, the requeue, the placement: its wall clock, injected here) joined with the node's
// and the trainer's own measurements (how long ago a rank failed; the checkpoint load and first
// step, and when that step ended), stored with the job, written as an event and shown by fp8ctl.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/fp8ctl_view.h"
#include "scheduler/scheduler.h"
#include "tests/unit/scheduler_loop_fixture.h"

namespace fp8rt::sched {
namespace {

using namespace loop_test;  // NOLINT(build/namespaces)

class SchedRecoveryTest : public SchedLoopTest {
 protected:
  void SetUp() override {
    SchedLoopTest::SetUp();
    options_.wall_clock = [this] { return wall_; };
    OpenAgain();
  }
  static JobReport WithStartup(JobReport r, int attempt, int64_t step, double load_s,
                               double first_step_s, double age_s) {
    r.attempt = attempt;
    r.startup.step = step, r.startup.load_s = load_s, r.startup.first_step_s = first_step_s;
    r.startup.age_s = age_s;
    return r;
  }
  static JobReport Attempt(JobReport r, int attempt) {
    r.attempt = attempt;
    return r;
  }
  std::string LastReason(int64_t id) { return Events(id).back().reason; }

  double wall_ = 5000.0;
};

TEST_F(SchedRecoveryTest, ALostNodesJobIsTimedFromItsLastHeartbeatToItsFirstStepElsewhere) {
  options_.heartbeat_timeout_s = 30;
  OpenAgain();
  Register(Node("n1", "H100", 90, 8));
  JobSpec s = Spec("r", 8);
  s.max_restarts = 2;
  const int64_t id = Submit(s);
  Tick();  // placed on n1 at wall 5000
  ASSERT_EQ(Get(id).timing.attempt, 1);
  EXPECT_DOUBLE_EQ(Get(id).timing.placed_at, 5000.0);

  // The first attempt's first step: 1.8 s after the placement, of which the trainer's first step
  // took 0.5 s; it ended 0.2 s before this heartbeat.
  wall_ = 5002.0;
  Beat("n1", {WithStartup(Running(id, 1), 1, 1, 0, 0.5, 0.2)});
  Job j = Get(id);
  EXPECT_EQ(j.state, JobState::kRunning);
  EXPECT_DOUBLE_EQ(j.timing.trained_at, 5001.8);
  AttemptPhases ph = PhasesOf(j.timing);
  EXPECT_NEAR(ph.total_s, 1.8, 1e-9);
  EXPECT_NEAR(ph.start_s, 1.3, 1e-9);
  EXPECT_DOUBLE_EQ(ph.detection_s, -1) << "no failure before the first attempt";
  EXPECT_EQ(LastReason(id),
            "first step trained at step 1 (attempt 1), 1.8 s after the placement: process start "
            "1.3 s, checkpoint load 0.0 s, first step 0.5 s");
  // The same startup again (every heartbeat carries it) is no second event.
  const size_t events = Events(id).size();
  wall_ = 5003.0;
  Beat("n1", {WithStartup(Running(id, 2), 1, 1, 0, 0.5, 1.2)});
  EXPECT_EQ(Events(id).size(), events);
  EXPECT_DOUBLE_EQ(Get(id).timing.trained_at, 5001.8);

  Register(Node("n2", "H100", 90, 8));
  wall_ = 5010.0;
  Beat("n1", {WithStartup(Running(id, 400, 400), 1, 1, 0, 0.5, 8.2)});  // n1's last heartbeat
  now_ += 31;
  wall_ = 5041.5;
  Beat("n2", {});
  TickResult t = Tick();  // n1 lost: requeued and placed on n2 in this tick
  ASSERT_EQ(t.lost_nodes, std::vector<std::string>{"n1"});
  ASSERT_EQ(t.scheduled, std::vector<int64_t>{id});
  j = Get(id);
  EXPECT_EQ(j.timing.attempt, 2);
  EXPECT_DOUBLE_EQ(j.timing.failed_at, 5010.0) << "n1's last heartbeat";
  EXPECT_DOUBLE_EQ(j.timing.requeued_at, 5041.5);
  EXPECT_DOUBLE_EQ(j.timing.placed_at, 5041.5);
  EXPECT_DOUBLE_EQ(j.timing.trained_at, 0) << "the new attempt has not trained yet";

  wall_ = 5043.0;
  Beat("n2", {Attempt(Running(id), 2)});
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  // A stale report of attempt 1 (n1 back, say) does not time attempt 2.
  wall_ = 5046.0;
  Beat("n2", {WithStartup(Running(id, 401, 400), 2, 401, 1.25, 0.75, 0.5)});
  j = Get(id);
  ph = PhasesOf(j.timing);
  EXPECT_DOUBLE_EQ(j.timing.trained_at, 5045.5);
  EXPECT_EQ(j.timing.step, 401);
  EXPECT_NEAR(ph.detection_s, 31.5, 1e-9);
  EXPECT_NEAR(ph.placement_s, 0.0, 1e-9);
  EXPECT_NEAR(ph.load_s, 1.25, 1e-9);
  EXPECT_NEAR(ph.first_step_s, 0.75, 1e-9);
  EXPECT_NEAR(ph.start_s, 2.0, 1e-9);  // 5045.5 - 5041.5 - 1.25 - 0.75
  EXPECT_NEAR(ph.total_s, 35.5, 1e-9);
  EXPECT_NEAR(ph.from_detection_s, 4.0, 1e-9);
  EXPECT_EQ(LastReason(id),
            "training again at step 401 (attempt 2), 35.5 s after the failure (4.0 s after its "
            "detection): detection 31.5 s, requeue and placement 0.0 s, process start 2.0 s, "
            "checkpoint load 1.2 s, first step 0.8 s");
  EXPECT_EQ(Events(id).back().from, JobState::kRunning);
  EXPECT_EQ(Events(id).back().to, JobState::kRunning);

  // The record keeps it (a restarted scheduler reads it back) and fp8ctl shows it.
  auto back = JobFromJson(JobToJson(j));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->timing, j.timing);
  const std::string line = fp8ctl::StartLine(fp8ctl::View(nlohmann::json::parse(JobToJson(j))));
  EXPECT_EQ(line,
            "\n  last start: attempt 2 trained 35.5 s after the failure (detection 31.5 s, "
            "requeue and placement 0.0 s, process start 2.0 s, checkpoint load 1.2 s, first "
            "step 0.8 s)");
}

TEST_F(SchedRecoveryTest, AFailedRankIsTimedFromWhenItsNodeSawItFail) {
  Register(Node("h1", "H100", 90, 8));
  JobSpec s = Spec("a", 8);
  s.max_restarts = 1;
  const int64_t id = Submit(s);
  Tick();
  Beat("h1", {Attempt(Running(id, 50, 40), 1)});
  JobReport crash = Attempt(Exited(id, 137, 40), 1);
  crash.failed_rank = 2, crash.failed_age_s = 0.75;
  wall_ = 6000.0;
  Beat("h1", {crash});
  Job j = Get(id);
  ASSERT_EQ(j.state, JobState::kPending);
  EXPECT_DOUBLE_EQ(j.timing.failed_at, 5999.25);
  EXPECT_DOUBLE_EQ(j.timing.requeued_at, 6000.0);
  EXPECT_EQ(j.timing.attempt, 2);
  wall_ = 6000.5;
  Tick();
  EXPECT_DOUBLE_EQ(Get(id).timing.placed_at, 6000.5);
  wall_ = 6004.0;
  Beat("h1", {WithStartup(Running(id, 41, 40), 2, 41, 0.5, 0.25, 0.25)});
  const AttemptPhases ph = PhasesOf(Get(id).timing);
  EXPECT_NEAR(ph.detection_s, 0.75, 1e-9);
  EXPECT_NEAR(ph.placement_s, 0.5, 1e-9);
  EXPECT_NEAR(ph.start_s, 2.5, 1e-9);  // 6003.75 - 6000.5 - 0.5 - 0.25
  EXPECT_NEAR(ph.total_s, 4.5, 1e-9);
  EXPECT_NE(LastReason(id).find("training again at step 41 (attempt 2), 4.5 s after the failure"),
            std::string::npos)
      << LastReason(id);
}

TEST_F(SchedRecoveryTest, ARequeueWithoutAFailureIsTimedFromThePlacement) {
  Register(Node("h1", "H100", 90, 8));
  const int64_t id = Submit(Spec("p", 8));
  Tick();
  Beat("h1", {WithStartup(Running(id, 1), 1, 1, 0, 0.5, 0)});
  auto held = sched_->Preempt(id, "ops", /*hold=*/true, now_);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  Beat("h1", {Attempt(Exited(id, 3, 1), 1)});
  ASSERT_EQ(Get(id).state, JobState::kPreempted);
  ASSERT_TRUE(sched_->Resume(id, "ops", now_).ok());
  wall_ = 7000.0;
  Tick();
  Job j = Get(id);
  EXPECT_EQ(j.timing.attempt, 2);
  EXPECT_DOUBLE_EQ(j.timing.failed_at, 0);
  EXPECT_DOUBLE_EQ(j.timing.requeued_at, 0);
  wall_ = 7003.0;
  Beat("h1", {WithStartup(Running(id, 2, 1), 2, 2, 1.0, 0.5, 0)});
  EXPECT_EQ(LastReason(id),
            "first step trained at step 2 (attempt 2), 3.0 s after the placement: process start "
            "1.5 s, checkpoint load 1.0 s, first step 0.5 s");
}

}  // namespace
}  // namespace fp8rt::sched

// The scheduling loop with an injected clock: placement with the precision decision in the
// events, daemon reports driving RUNNING / COMPLETED / FAILED, the wait and fail fallback
// policies, node loss up to max_restarts, preemption with its grace period, cancel with draining
// GPUs, and reconciliation after a restart over a real RocksDB store. Plus the /v1/nodes routes.
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
using json = nlohmann::json;

TEST_F(SchedLoopTest, PlacementStoresPrecisionAndReasonAndDaemonReportsFinishTheJob) {
  Register(Node("a100-1", "A100", 80, 4));
  const int64_t id = Submit(Spec("train", 2));  // fp8 requested, fallback bf16
  EXPECT_EQ(Get(id).state, JobState::kPending);
  TickResult t = Tick();
  ASSERT_EQ(t.scheduled, std::vector<int64_t>{id});
  Job j = Get(id);
  EXPECT_EQ(j.state, JobState::kScheduled);
  ASSERT_TRUE(j.precision.has_value());
  EXPECT_EQ(*j.precision, Precision::kBf16);
  EXPECT_EQ(j.reason,
            "placed on 2 x A100: FP8 needs compute capability 8.9 (A100: 8.0); running bf16 "
            "(fallback)");
  ASSERT_EQ(Events(id).size(), 2u);
  EXPECT_EQ(Events(id)[1].to, JobState::kScheduled);
  EXPECT_EQ(Events(id)[1].reason, j.reason);

  // The daemon is told to start it, and again until it reports it.
  for (int i = 0; i < 2; ++i) {
    auto cmds = Beat("a100-1", {});
    ASSERT_EQ(cmds.size(), 1u);
    EXPECT_EQ(cmds[0].kind, CommandKind::kStart);
    EXPECT_EQ(cmds[0].job_id, id);
    EXPECT_EQ(cmds[0].precision, Precision::kBf16);
    EXPECT_EQ(cmds[0].gpus.size(), 2u);
    EXPECT_EQ(cmds[0].gang_nodes, std::vector<std::string>{"a100-1"});
    EXPECT_EQ(cmds[0].resume_step, -1);
  }
  EXPECT_TRUE(Beat("a100-1", {Running(id, 10)}).empty());
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  JobReport at1200 = Running(id, 1200, 1000);
  at1200.progress.loss = 3.5, at1200.progress.val_loss = 3.75, at1200.progress.val_step = 1000;
  EXPECT_TRUE(Beat("a100-1", {at1200}).empty());
  EXPECT_EQ(Get(id).checkpoint_step, 1000);  // stored without an event, as is the progress
  EXPECT_DOUBLE_EQ(Get(id).progress.loss, 3.5);
  EXPECT_DOUBLE_EQ(Get(id).progress.val_loss, 3.75);
  EXPECT_EQ(Get(id).progress.val_step, 1000);
  EXPECT_EQ(Events(id).size(), 3u);
  auto done = Beat("a100-1", {Exited(id, 0, 2000)});
  ASSERT_EQ(done.size(), 1u);  // stop = forget the exited job
  EXPECT_EQ(done[0].kind, CommandKind::kStop);
  EXPECT_EQ(Get(id).state, JobState::kCompleted);
  EXPECT_EQ(Get(id).checkpoint_step, 2000);
  EXPECT_EQ(Events(id).back().reason, "every rank exited with code 0");
}

// A node's heartbeat may carry output only of the ranks it runs of a job placed on it now: not of
// another node's job, a job not yet submitted (the next user's would show it), ranks outside the
// gang, or an earlier attempt.
TEST_F(SchedLoopTest, HeartbeatLogsAreKeptOnlyFromTheRanksTheNodeRuns) {
  Register(Node("n1", "H100", 90, 2));
  Register(Node("n2", "H100", 90, 2));
  JobSpec gang = Spec("gang", 2);
  gang.nodes = 2;
  const int64_t id = Submit(gang);
  Tick();
  ASSERT_EQ(Get(id).state, JobState::kScheduled);
  const int attempt = Get(id).attempt;
  // Which node holds ranks 0-1 (the gang's first) and which 2-3.
  const std::string first = Get(id).placement[0].node_id;
  const std::string second = first == "n1" ? "n2" : "n1";
  JobReport mine = Running(id, 1);
  mine.attempt = attempt;
  mine.logs = {{0, "rank zero\n"}, {1, "rank one\n"}, {2, "not mine\n"}, {9'999'999, "far\n"}};
  Beat(first, {mine});
  JobReport theirs = Running(id, 1);
  theirs.attempt = attempt;
  theirs.logs = {{2, "rank two\n"}, {0, "claims rank zero\n"}};
  Beat(second, {theirs});
  EXPECT_EQ(*store_->Log(id, 0), "rank zero\n");
  EXPECT_EQ(*store_->Log(id, 1), "rank one\n");
  EXPECT_EQ(*store_->Log(id, 2), "rank two\n");
  EXPECT_EQ(*store_->LogRanks(id), (std::vector<int>{0, 1, 2}));
  // A stale attempt's report, and a job id nobody has submitted yet.
  JobReport stale = Running(id, 1);
  stale.attempt = attempt - 1;
  stale.logs = {{0, "stale\n"}};
  JobReport future = Running(id + 1, 1);
  future.logs = {{0, "planted\n"}};
  Beat(first, {stale, future});
  EXPECT_EQ(*store_->Log(id, 0), "rank zero\n");
  const int64_t next = Submit(Spec("next", 1));
  EXPECT_EQ(next, id + 1);
  EXPECT_TRUE(store_->LogRanks(next)->empty()) << "the next user's job starts with no output";
}

TEST_F(SchedLoopTest, AFailedGangRestartsFromItsCheckpointUpToMaxRestartsAndANanLossFailsAtOnce) {
  Register(Node("h1", "H100", 90, 8));
  JobSpec once = Spec("a", 8);
  once.max_restarts = 1;
  const int64_t a = Submit(once);
  const int64_t b = Submit(Spec("b", 4));
  Tick();
  EXPECT_EQ(Get(a).state, JobState::kScheduled);
  EXPECT_EQ(Get(a).attempt, 1);
  EXPECT_EQ(*Get(a).precision, Precision::kFp8);
  EXPECT_EQ(Get(b).state, JobState::kPending);  // no GPU left
  JobReport crash = Exited(a, 7, 100);
  crash.attempt = 1, crash.failed_rank = 3;
  Beat("h1", {Running(a)});
  Beat("h1", {crash});
  EXPECT_EQ(Get(a).state, JobState::kPending);
  EXPECT_EQ(Get(a).restarts, 1);
  EXPECT_EQ(Get(a).reason,
            "rank 3 on node h1 exited with code 7; resumes from checkpoint step 100; requeued "
            "(restart 1 of 1)");
  // Placed again (attempt 2): the node's report of attempt 1 is stale, so it is told to start.
  EXPECT_EQ(Tick().scheduled, std::vector<int64_t>{a});
  auto cmds = Beat("h1", {crash});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, CommandKind::kStart);
  EXPECT_EQ(cmds[0].attempt, 2);
  EXPECT_EQ(cmds[0].resume_step, 100);
  EXPECT_EQ(cmds[0].master_port, 0) << "a one-node gang picks its own port";
  EXPECT_EQ(Get(a).state, JobState::kScheduled) << "a stale report is not the new attempt running";
  JobReport again = Running(a);
  again.attempt = 2;
  Beat("h1", {again});
  EXPECT_EQ(Get(a).state, JobState::kRunning);
  crash.attempt = 2;
  Beat("h1", {crash});
  EXPECT_EQ(Get(a).state, JobState::kFailed);
  EXPECT_TRUE(Get(a).reason.find("would exceed max_restarts 1") != std::string::npos)
      << Get(a).reason;
  // Its GPUs are free again: b goes on the next tick, and a NaN loss (exit 5) is not restarted.
  EXPECT_EQ(Tick().scheduled, std::vector<int64_t>{b});
  Beat("h1", {Running(b)});
  JobReport nan = Exited(b, 5);
  nan.reason = "the loss is NaN/inf at step 40";
  Beat("h1", {nan});
  EXPECT_EQ(Get(b).state, JobState::kFailed);
  EXPECT_EQ(Get(b).restarts, 0);
  EXPECT_EQ(Get(b).reason,
            "ranks on node h1: the loss is NaN/inf at step 40 (exit code 5); the loss turned "
            "NaN/inf: not restarted");
}

TEST_F(SchedLoopTest, APreemptedJobGetsAtLeastItsMeasuredSaveTimeBeforeItIsStopped) {
  options_.preemption_grace_s = 60;
  options_.heartbeat_interval_s = 5;
  OpenAgain();
  Register(Node("h1", "H100", 90, 8));
  const int64_t a = Submit(Spec("slow-saver", 8));
  Tick();
  JobReport r = Running(a, 100, 90);
  r.progress.step_s = 0.5, r.progress.save_s = 100;  // a save takes 100 s
  Beat("h1", {r});
  ASSERT_EQ(Get(a).state, JobState::kRunning);
  EXPECT_DOUBLE_EQ(Get(a).progress.save_s, 100);
  ASSERT_TRUE(sched_->Preempt(a, "alice", false, now_).ok());
  auto cmds = Beat("h1", {r});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, CommandKind::kCheckpoint);
  EXPECT_EQ(cmds[0].grace_s, 155) << "1.5 x 100 s + a heartbeat, above the 60 s configured";
  now_ += 100;  // past the configured grace, within the job's own
  Tick();
  EXPECT_EQ(Get(a).state, JobState::kPreempting);
  now_ += 60;
  Tick();
  EXPECT_EQ(Get(a).state, JobState::kPending);
  EXPECT_TRUE(Events(a).back().reason.find("grace period of 155s over") != std::string::npos ||
              Events(a)[Events(a).size() - 2].reason.find("grace period of 155s over") !=
                  std::string::npos);
}

TEST_F(SchedLoopTest, AUserPreemptsWithHoldAndResumes) {
  Register(Node("h1", "H100", 90, 8));
  const int64_t a = Submit(Spec("a", 8));
  Tick();
  Beat("h1", {Running(a, 50, 40)});
  EXPECT_EQ(Get(a).progress.step, 50);
  EXPECT_EQ(sched_->Preempt(a, "alice", /*hold=*/false, now_).status().code(), StatusCode::kOk);
  EXPECT_EQ(Get(a).state, JobState::kPreempting);
  EXPECT_FALSE(sched_->Preempt(a, "alice", false, now_).ok()) << "only RUNNING jobs";
  auto cmds = Beat("h1", {Running(a, 60, 40)});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, CommandKind::kCheckpoint);
  Beat("h1", {Exited(a, 3, 60)});
  EXPECT_EQ(Get(a).state, JobState::kPending) << "requeued at once without hold";
  EXPECT_EQ(Get(a).checkpoint_step, 60);
  // With hold it waits for resume.
  Tick();
  Beat("h1", {[&] { JobReport r = Running(a, 70, 60); r.attempt = 2; return r; }()});
  ASSERT_EQ(Get(a).state, JobState::kRunning);
  ASSERT_TRUE(sched_->Preempt(a, "alice", /*hold=*/true, now_).ok());
  Beat("h1", {[&] { JobReport r = Exited(a, 3, 80); r.attempt = 2; return r; }()});
  EXPECT_EQ(Get(a).state, JobState::kPreempted);
  EXPECT_TRUE(Get(a).hold);
  EXPECT_TRUE(Tick().scheduled.empty()) << "a held job is not placed";
  EXPECT_FALSE(sched_->Resume(999, "alice", now_).ok());
  ASSERT_TRUE(sched_->Resume(a, "alice", now_).ok());
  EXPECT_EQ(Get(a).state, JobState::kPending);
  EXPECT_EQ(Get(a).reason, "resumed by alice; resumes from checkpoint step 80");
  EXPECT_FALSE(sched_->Resume(a, "alice", now_).ok()) << "not held any more";
  EXPECT_EQ(Tick().scheduled, std::vector<int64_t>{a});
}

TEST_F(SchedLoopTest, WaitPolicyWaitsForFp8GpusThenFallsBackAfterItsTimeout) {
  Register(Node("a1", "A100", 80, 8));
  JobSpec s = Spec("w", 8);
  s.fallback = Fallback::kWait;
  s.fallback_timeout_s = 100;
  const int64_t first = Submit(s);
  const int64_t second = Submit(s);
  Tick();
  EXPECT_EQ(Get(first).state, JobState::kPending);
  // An FP8 node arrives within the timeout: the first job gets it in fp8.
  now_ += 50;
  Register(Node("h1", "H100", 90, 8));
  Tick();
  EXPECT_EQ(Get(first).state, JobState::kScheduled);
  EXPECT_EQ(*Get(first).precision, Precision::kFp8);
  EXPECT_EQ(Get(second).state, JobState::kPending);
  // The second one waits out its 100 s, then takes the A100s in bf16.
  now_ += 49;
  Tick();
  EXPECT_EQ(Get(second).state, JobState::kPending);
  now_ += 1;
  Tick();  // nothing changed but the clock: placement still runs (replace_interval_s)
  EXPECT_EQ(Get(second).state, JobState::kScheduled);
  EXPECT_EQ(*Get(second).precision, Precision::kBf16);
  EXPECT_NE(Get(second).reason.find("running bf16 (fallback) after waiting 100s"),
            std::string::npos)
      << Get(second).reason;
}

TEST_F(SchedLoopTest, FailPolicyFailsWhenNoFp8PlacementExists) {
  Register(Node("a1", "A100", 80, 8));
  JobSpec s = Spec("f", 4);
  s.fallback = Fallback::kFail;
  const int64_t id = Submit(s);
  EXPECT_EQ(Tick().failed, std::vector<int64_t>{id});
  EXPECT_EQ(Get(id).state, JobState::kFailed);
  EXPECT_NE(Get(id).reason.find("no FP8-capable placement exists"), std::string::npos);
}

TEST_F(SchedLoopTest, LostNodeRequeuesFromCheckpointUpToMaxRestarts) {
  options_.heartbeat_timeout_s = 30;
  OpenAgain();
  Register(Node("n1", "H100", 90, 8));
  JobSpec s = Spec("r", 8);
  s.max_restarts = 1;
  const int64_t id = Submit(s);
  Tick();
  Beat("n1", {Running(id, 500, 400)});
  ASSERT_EQ(Get(id).state, JobState::kRunning);
  Register(Node("n2", "H100", 90, 8));

  now_ += 30;  // n1 silent exactly the timeout: not lost yet
  Beat("n2", {});
  EXPECT_TRUE(Tick().lost_nodes.empty());
  now_ += 1;
  Beat("n2", {});
  TickResult t = Tick();
  EXPECT_EQ(t.lost_nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(t.requeued, std::vector<int64_t>{id});
  EXPECT_EQ(t.scheduled, std::vector<int64_t>{id});  // same tick, on n2
  Job j = Get(id);
  EXPECT_EQ(j.restarts, 1);
  EXPECT_EQ(j.placement[0].node_id, "n2");
  const auto ev = Events(id);
  EXPECT_NE(ev[ev.size() - 2].reason.find("node n1 lost"), std::string::npos);
  EXPECT_NE(ev[ev.size() - 2].reason.find("requeued (restart 1 of 1)"), std::string::npos);
  // The start command resumes from the checkpoint.
  auto cmds = Beat("n2", {});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].resume_step, 400);
  EXPECT_EQ(sched_->Node("n1")->state, NodeState::kLost);

  Beat("n2", {Running(id)});
  now_ += 31;
  t = Tick();
  EXPECT_EQ(t.failed, std::vector<int64_t>{id});
  EXPECT_EQ(Get(id).state, JobState::kFailed);
  EXPECT_NE(Get(id).reason.find("restart 2 would exceed max_restarts 1"), std::string::npos);
  // A lost node that heartbeats again is ready again, and its stale ranks are stopped.
  cmds = Beat("n1", {Running(id)});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, CommandKind::kStop);
  EXPECT_EQ(sched_->Node("n1")->state, NodeState::kReady);
}

TEST_F(SchedLoopTest, PreemptionCheckpointsTheVictimThenRequeuesItAfterTheGrace) {
  options_.preemption_grace_s = 60;
  OpenAgain();
  Register(Node("n1", "H100", 90, 8));
  const int64_t low = Submit(Spec("low", 8, /*priority=*/0));
  Tick();
  Beat("n1", {Running(low, 120, 100)});
  ASSERT_EQ(Get(low).state, JobState::kRunning);

  now_ += 5;
  JobSpec hs = Spec("high", 8, /*priority=*/10);
  const int64_t high = Submit(hs);
  TickResult t = Tick();
  EXPECT_EQ(t.preempting, std::vector<int64_t>{low});
  EXPECT_EQ(Get(low).state, JobState::kPreempting);
  EXPECT_NE(Get(low).reason.find("preempted for job 2"), std::string::npos) << Get(low).reason;
  EXPECT_EQ(Get(high).state, JobState::kPending);
  // Waiting for its victim does not make the high job take another one.
  EXPECT_TRUE(Tick().preempting.empty());
  auto cmds = Beat("n1", {Running(low, 130, 100)});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, CommandKind::kCheckpoint);

  now_ += 60;  // grace over: stopped, requeued, and the high job placed in the same tick
  t = Tick();
  EXPECT_EQ(t.requeued, std::vector<int64_t>{low});
  Job l = Get(low);
  EXPECT_EQ(l.state, JobState::kPending);
  EXPECT_EQ(l.restarts, 0);  // preemption is not a failure
  const auto ev = Events(low);
  ASSERT_GE(ev.size(), 5u);
  EXPECT_EQ(ev[ev.size() - 3].to, JobState::kPreempting);
  EXPECT_EQ(ev[ev.size() - 2].to, JobState::kPreempted);
  EXPECT_EQ(ev.back().reason, "requeued after preemption; resumes from checkpoint step 100");
  // The ranks still run, so their GPUs drain before the high job can have them.
  EXPECT_TRUE(t.scheduled.empty());
  cmds = Beat("n1", {Running(low, 131, 100)});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, CommandKind::kStop);
  EXPECT_EQ(Tick().scheduled.size(), 0u);
  Beat("n1", {Exited(low, 3, 130)});  // stopped after a checkpoint at 130
  EXPECT_EQ(Tick().scheduled, std::vector<int64_t>{high});
  EXPECT_EQ(Get(high).state, JobState::kScheduled);
}

TEST_F(SchedLoopTest, VictimThatStopsEarlyIsRequeuedWithoutWaitingForTheGrace) {
  Register(Node("n1", "L40S", 89, 4));
  const int64_t low = Submit(Spec("low", 4, 1));
  Tick();
  Beat("n1", {Running(low)});
  const int64_t high = Submit(Spec("high", 4, 5));
  EXPECT_EQ(Tick().preempting, std::vector<int64_t>{low});
  Beat("n1", {Exited(low, 3, 42)});
  EXPECT_EQ(Get(low).state, JobState::kPending);
  EXPECT_EQ(Get(low).checkpoint_step, 42);
  EXPECT_EQ(Tick().scheduled, std::vector<int64_t>{high});
}

TEST_F(SchedLoopTest, NonPreemptibleAndEqualPriorityJobsAreNeverVictims) {
  Register(Node("n1", "H100", 90, 8));
  JobSpec keep = Spec("keep", 4, 0);
  keep.preemptible = false;
  const int64_t a = Submit(keep);
  const int64_t b = Submit(Spec("same", 4, 5));
  Tick();
  Beat("n1", {Running(a), Running(b)});
  Submit(Spec("high", 8, 5));
  EXPECT_TRUE(Tick().preempting.empty());
  EXPECT_EQ(Get(a).state, JobState::kRunning);
  EXPECT_EQ(Get(b).state, JobState::kRunning);
}

TEST_F(SchedLoopTest, CancelStopsTheRanksAndTheirGpusDrain) {
  Register(Node("n1", "H100", 90, 8));
  const int64_t a = Submit(Spec("a", 8));
  const int64_t b = Submit(Spec("b", 8));
  Tick();
  Beat("n1", {Running(a)});
  auto c = sched_->Cancel(a, "alice", now_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(Get(a).state, JobState::kCancelled);
  EXPECT_EQ(sched_->Cancel(a, "alice", now_).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sched_->Cancel(99, "alice", now_).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Tick().scheduled.empty());  // a's ranks still run
  auto cmds = Beat("n1", {Running(a)});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, CommandKind::kStop);
  EXPECT_EQ(cmds[0].job_id, a);
  Beat("n1", {});
  EXPECT_EQ(Tick().scheduled, std::vector<int64_t>{b});
}

TEST_F(SchedLoopTest, GangRunsOnlyWhenEveryNodeReports) {
  Register(Node("n1", "H200", 90, 8));
  Register(Node("n2", "H200", 90, 8));
  JobSpec s = Spec("gang", 8);
  s.nodes = 2;
  const int64_t id = Submit(s);
  Tick();
  Job j = Get(id);
  ASSERT_EQ(j.placement.size(), 2u);
  auto c1 = Beat(j.placement[0].node_id, {});
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].node_rank, 0);
  EXPECT_EQ(c1[0].gang_nodes.size(), 2u);
  Beat(j.placement[0].node_id, {Running(id)});
  EXPECT_EQ(Get(id).state, JobState::kScheduled);
  auto c2 = Beat(j.placement[1].node_id, {Running(id)});
  EXPECT_TRUE(c2.empty());
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  Beat(j.placement[0].node_id, {Exited(id, 0)});
  EXPECT_EQ(Get(id).state, JobState::kRunning);  // rank group 1 still runs
  Beat(j.placement[1].node_id, {Exited(id, 0)});
  EXPECT_EQ(Get(id).state, JobState::kCompleted);
}

TEST_F(SchedLoopTest, HeartbeatErrorsChangeNothing) {
  Register(Node("n1", "H100", 90, 2));
  HeartbeatRequest hb;
  EXPECT_EQ(sched_->Heartbeat("nope", hb, now_).status().code(), StatusCode::kNotFound);
  hb.unhealthy_gpus = std::vector<int>{2};
  auto bad = sched_->Heartbeat("n1", hb, now_);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("GPU 2 does not exist"), std::string::npos);
  hb.unhealthy_gpus = std::vector<int>{1};
  ASSERT_TRUE(sched_->Heartbeat("n1", hb, now_).ok());
  EXPECT_FALSE(sched_->Node("n1")->gpus[1].healthy);
  auto stored = store_->ListNodes();
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE((*stored)[0].gpus[1].healthy);
  const int64_t id = Submit(Spec("two", 2));
  Tick();
  EXPECT_EQ(Get(id).state, JobState::kPending);  // one healthy GPU only
}

// Reconciliation: what the store says, checked against what the daemons report after a restart.
TEST_F(SchedLoopTest, RestartReconcilesWithTheDaemonsReports) {
  test::TempDir dir;
  auto rocks = OpenRocksDbJobStore(dir.str() + "/jobs");
  ASSERT_TRUE(rocks.ok());
  Open(std::move(rocks).value());
  options_.heartbeat_timeout_s = 30;
  OpenAgain();
  Register(Node("n1", "H100", 90, 8));
  Register(Node("n2", "H100", 90, 8));
  const int64_t kept = Submit(Spec("kept", 4));
  const int64_t gone = Submit(Spec("gone", 4));
  const int64_t sched = Submit(Spec("sched", 8));
  Tick();
  // kept and gone packed on one node, sched on the other.
  const std::string node_kg = Get(kept).placement[0].node_id;
  const std::string node_s = Get(sched).placement[0].node_id;
  ASSERT_EQ(Get(gone).placement[0].node_id, node_kg);
  ASSERT_NE(node_kg, node_s);
  Beat(node_kg, {Running(kept), Running(gone, 50, 40)});

  // kill: drop the scheduler and the store handle, open both again.
  sched_.reset();
  store_.reset();
  auto again = OpenRocksDbJobStore(dir.str() + "/jobs");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  now_ += 20;
  Open(std::move(again).value());
  ASSERT_EQ(sched_->Nodes().size(), 2u);
  EXPECT_EQ(Get(kept).state, JobState::kRunning);
  EXPECT_EQ(Get(gone).state, JobState::kRunning);

  // The node reports only `kept`: it stays RUNNING; `gone` is requeued from its checkpoint.
  auto cmds = Beat(node_kg, {Running(kept)});
  EXPECT_EQ(Get(kept).state, JobState::kRunning);
  Job g = Get(gone);
  EXPECT_EQ(g.state, JobState::kPending);
  EXPECT_EQ(g.restarts, 1);
  EXPECT_EQ(g.checkpoint_step, 40);
  EXPECT_NE(g.reason.find("no longer reports the job"), std::string::npos) << g.reason;
  // The SCHEDULED job is started by its node after the restart.
  cmds = Beat(node_s, {});
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0].kind, CommandKind::kStart);
  EXPECT_EQ(cmds[0].job_id, sched);
  // Nodes get a full timeout after the restart, not counted from before it.
  now_ += 25;
  EXPECT_TRUE(Tick().lost_nodes.empty());
}

// ---- /v1/nodes through the Api handler ----

TEST_F(SchedNodesApiTest, RegisterHeartbeatListAndRefusals) {
  const std::string reg =
      R"({"id": "n1", "gpus": [{"name": "H100", "compute_capability": "9.0", "memory_gib": 80,
          "count": 8}]})";
  HttpResponse r = Call("POST", "/v1/nodes/register", kNodeToken, reg);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body).at("node").at("gpus").size(), 8u);
  EXPECT_EQ(json::parse(r.body).at("heartbeat_timeout_s"), options_.heartbeat_timeout_s);
  EXPECT_EQ(json::parse(r.body).at("heartbeat_interval_s"), 5);
  HttpResponse sub = Call("POST", "/v1/jobs", kUserToken,
                          R"({"name": "j", "config_path": "c.yaml", "gpus_per_node": 8})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  Tick();
  HttpResponse hb = Call("POST", "/v1/nodes/n1/heartbeat", kNodeToken, R"({"jobs": []})");
  ASSERT_EQ(hb.status, 200) << hb.body;
  const json cmd = json::parse(hb.body).at("commands").at(0);
  EXPECT_EQ(cmd.at("action"), "start");
  EXPECT_EQ(cmd.at("precision"), "fp8");
  EXPECT_EQ(cmd.at("gpus").size(), 8u);
  EXPECT_EQ(cmd.at("spec").at("config_path"), "c.yaml");
  HttpResponse list = Call("GET", "/v1/nodes", kUserToken);
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(json::parse(list.body).at("nodes").at(0).at("gpus").at(0).at("job_id"), 1);
  EXPECT_EQ(Call("GET", "/v1/nodes/n1", kUserToken).status, 200);
  EXPECT_EQ(Call("GET", "/v1/nodes/n9", kUserToken).status, 404);

  ExpectRefusedChangingNothing({
           {"POST", "/v1/nodes/n1/heartbeat", kUserToken, "{}", 403, "only node tokens"},
           {"POST", "/v1/nodes/register", kUserToken, reg, 403, "only node or admin"},
           {"POST", "/v1/nodes/n1/heartbeat", "wrong", "{}", 401, "unknown token"},
           {"POST", "/v1/nodes/n1/heartbeat", kNodeToken, R"({"jobs": [)", 400,
            "not valid YAML or JSON"},
           {"POST", "/v1/nodes/n1/heartbeat", kNodeToken, R"({"load": 1})", 400, "'load'"},
           {"POST", "/v1/nodes/n1/heartbeat", kNodeToken,
            R"({"jobs": [{"job_id": 1, "status": "sleeping"}]})", 400, "sleeping"},
           {"POST", "/v1/nodes/n1/heartbeat", kNodeToken,
            R"({"jobs": [{"job_id": 1, "status": "exited"}]})", 400, "exit_code is required"},
           {"POST", "/v1/nodes/n2/heartbeat", kNodeToken, "{}", 404, "not registered"},
           {"POST", "/v1/nodes/register", kNodeToken,
            R"({"id": "n2", "gpus": [{"name": "H100", "compute_capability": "nine",
                "memory_gib": 80}]})",
            400, "compute_capability"},
           {"POST", "/v1/nodes/register", kNodeToken, R"({"id": "bad id!", "gpus": []})", 400,
            "id = 'bad id!'"},
           {"GET", "/v1/nodes/n1/heartbeat", kNodeToken, "", 405, "allowed: POST"},
      });
}

TEST_F(SchedNodesApiTest, NodeTokensAreRateLimitedPerRegisteredNodeOtherTokensPerToken) {
  auto auth =
      TokenAuth::Parse(StrCat("node: [{name: d, sha256: ", HashToken(kNodeToken),
                              "}]\nuser: [{name: alice, sha256: ", HashToken(kUserToken), "}]"));
  ASSERT_TRUE(auth.ok());
  ApiOptions ao;
  ao.rate_per_s = 0.001;
  ao.burst = 2;
  Api api(
      sched_.get(), store_.get(), *auth, [this] { return static_cast<double>(now_); }, ao);
  auto call = [&](const char* target, const char* token) {
    HttpRequest r{"GET", target, {{"authorization", StrCat("Bearer ", token)}}, ""};
    return api.Handle(r).status;
  };
  // A user cannot get fresh buckets by naming other nodes.
  EXPECT_EQ(call("/v1/nodes/a", kUserToken), 404);
  EXPECT_EQ(call("/v1/nodes/b", kUserToken), 404);
  EXPECT_EQ(call("/v1/nodes/c", kUserToken), 429);
  EXPECT_EQ(call("/v1/jobs", kUserToken), 429);
  // Daemons sharing the node token each have their own bucket once registered; ids that are
  // not registered share the token's, so made-up ids buy nothing.
  for (const char* id : {"a", "b"}) {
    ASSERT_TRUE(sched_->RegisterNode(Node(id, "H100", 90, 1), now_).ok());
  }
  for (const char* n : {"/v1/nodes/a", "/v1/nodes/b"}) {
    EXPECT_EQ(call(n, kNodeToken), 200);
    EXPECT_EQ(call(n, kNodeToken), 200);
    EXPECT_EQ(call(n, kNodeToken), 429);
  }
  EXPECT_EQ(call("/v1/nodes/c", kNodeToken), 404);
  EXPECT_EQ(call("/v1/nodes/d", kNodeToken), 404);
  EXPECT_EQ(call("/v1/nodes/e", kNodeToken), 429);
}

}  // namespace
}  // namespace fp8rt::sched

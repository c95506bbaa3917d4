// The job state machine: legal paths, refused edges naming both states, node-loss requeue and
// the restart limit, and the job/event storage encoding.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "scheduler/job_state.h"

namespace fp8rt::sched {
namespace {

Job NewJob(int max_restarts = 3) {
  Job j;
  j.id = 7;
  j.owner = "alice";
  auto spec =
      ParseJobSpec("name: j\nconfig: {data: {train: /d/c.txt}}\nnodes: 2\ngpus_per_node: 4");
  EXPECT_TRUE(spec.ok());
  j.spec = *spec;
  j.spec.max_restarts = max_restarts;
  j.submitted_at = j.updated_at = 100;
  return j;
}

TEST(SchedJobState, HappyPathAndPreemptionRequeue) {
  Job j = NewJob();
  for (JobState to :
       {JobState::kScheduled, JobState::kRunning, JobState::kPreempting, JobState::kPreempted,
        JobState::kPending, JobState::kScheduled, JobState::kRunning, JobState::kCompleted}) {
    const JobState from = j.state;
    auto e = Transition(&j, to, 200, "step");
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->from, from);
    EXPECT_EQ(e->to, to);
    EXPECT_EQ(e->job_id, 7);
    EXPECT_EQ(j.state, to);
  }
  EXPECT_EQ(j.updated_at, 200);
  EXPECT_TRUE(IsTerminal(j.state));
}

TEST(SchedJobState, IllegalTransitionsNameBothStates) {
  EXPECT_TRUE(CheckTransition(JobState::kPending, JobState::kCancelled).ok());
  EXPECT_TRUE(CheckTransition(JobState::kRunning, JobState::kPending).ok());
  EXPECT_TRUE(CheckTransition(JobState::kPreempted, JobState::kPending).ok());
  const std::pair<JobState, JobState> bad[] = {
      {JobState::kPending, JobState::kRunning},      {JobState::kCompleted, JobState::kRunning},
      {JobState::kCancelled, JobState::kPending},    {JobState::kPreempted, JobState::kRunning},
      {JobState::kRunning, JobState::kPreempted},    {JobState::kFailed, JobState::kFailed},
      {JobState::kScheduled, JobState::kPreempting},
  };
  for (const auto& [from, to] : bad) {
    Status s = CheckTransition(from, to);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    const std::string edge = StrCat(JobStateName(from), " -> ", JobStateName(to));
    EXPECT_NE(s.message().find(edge), std::string::npos) << s.message();
  }
  Job j = NewJob();
  j.state = JobState::kCompleted;
  auto e = Transition(&j, JobState::kRunning, 300, "x");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("terminal"), std::string::npos) << e.status().message();
  EXPECT_EQ(j.state, JobState::kCompleted);
  EXPECT_EQ(j.updated_at, 100);
}

TEST(SchedJobState, NodeLossRequeuesUntilMaxRestarts) {
  Job j = NewJob(/*max_restarts=*/1);
  j.state = JobState::kRunning;
  j.placement = {{"n1", {0, 1, 2, 3}}, {"n2", {0, 1, 2, 3}}};
  auto e1 = RequeueAfterNodeLoss(&j, 500, "n2");
  ASSERT_TRUE(e1.ok()) << e1.status().ToString();
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.restarts, 1);
  EXPECT_TRUE(j.placement.empty());
  EXPECT_NE(e1->reason.find("n2"), std::string::npos);

  ASSERT_TRUE(Transition(&j, JobState::kScheduled, 510, "placed").ok());
  auto e2 = RequeueAfterNodeLoss(&j, 520, "n1");
  ASSERT_TRUE(e2.ok());
  EXPECT_EQ(j.state, JobState::kFailed);
  EXPECT_EQ(e2->to, JobState::kFailed);
  EXPECT_NE(e2->reason.find("max_restarts 1"), std::string::npos) << e2->reason;

  Job pending = NewJob();
  auto refused = RequeueAfterNodeLoss(&pending, 600, "n1");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("PENDING"), std::string::npos);
}

TEST(SchedJobState, NamesAndJsonRoundTrip) {
  for (JobState s : {JobState::kPending, JobState::kPreempting, JobState::kCancelled}) {
    auto p = ParseJobState(JobStateName(s));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, s);
  }
  auto bad = ParseJobState("DONE");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("COMPLETED"), std::string::npos);

  Job j = NewJob();
  j.state = JobState::kRunning;
  j.precision = Precision::kBf16;
  j.placement = {{"n1", {0, 2}}};
  j.restarts = 2;
  j.checkpoint_step = 4000;
  j.reason = "placed on 2 x A100: ...";
  j.progress.step = 4100, j.progress.total_steps = 9000, j.progress.save_s = 7.5;
  j.progress.checkpoint_error = "the checkpoint of step 4050 failed: EIO";
  j.progress.checkpoint_disk_bytes = 47368000000;
  auto back = JobFromJson(JobToJson(j));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, j);
  Job fresh = NewJob();
  auto fresh_back = JobFromJson(JobToJson(fresh));
  ASSERT_TRUE(fresh_back.ok());
  EXPECT_FALSE(fresh_back->precision.has_value());

  Event e{5, 7, JobState::kRunning, JobState::kPreempting, "job 9 (priority 10) needs the GPUs"};
  auto eb = EventFromJson(EventToJson(e));
  ASSERT_TRUE(eb.ok());
  EXPECT_EQ(*eb, e);
  EXPECT_EQ(JobFromJson("{\"id\": 1}").status().code(), StatusCode::kCorruption);
}

TEST(SchedJobState, ProgressWithTheValidationLossRoundTripsAndOlderRecordsLoad) {
  Job j = NewJob();
  j.state = JobState::kRunning;
  j.progress.step = 1200, j.progress.total_steps = 5000, j.progress.loss = 3.5;
  j.progress.val_loss = 3.75, j.progress.val_step = 1000, j.progress.at = 300;
  const std::string text = JobToJson(j);
  const auto stored = nlohmann::json::parse(text);
  EXPECT_EQ(stored["progress"]["val_loss"], 3.75);
  EXPECT_EQ(stored["progress"]["val_step"], 1000);
  auto back = JobFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_DOUBLE_EQ(back->progress.val_loss, 3.75);
  EXPECT_EQ(back->progress.val_step, 1000);
  EXPECT_EQ(*back, j);
  // None measured yet: null, read back as -1.
  Job none = NewJob();
  none.progress.step = 10;
  const auto none_stored = nlohmann::json::parse(JobToJson(none));
  EXPECT_TRUE(none_stored["progress"]["val_loss"].is_null());
  EXPECT_TRUE(none_stored["progress"]["val_step"].is_null());
  auto none_back = JobFromJson(JobToJson(none));
  ASSERT_TRUE(none_back.ok()) << none_back.status().ToString();
  EXPECT_EQ(none_back->progress.val_loss, -1);
  EXPECT_EQ(none_back->progress.val_step, -1);
  // A record stored before the fields existed loads with -1 for both.
  auto old = stored;
  old["progress"].erase("val_loss");
  old["progress"].erase("val_step");
  auto old_back = JobFromJson(old.dump());
  ASSERT_TRUE(old_back.ok()) << old_back.status().ToString();
  EXPECT_EQ(old_back->progress.val_loss, -1);
  EXPECT_EQ(old_back->progress.val_step, -1);
  EXPECT_DOUBLE_EQ(old_back->progress.loss, 3.5);
}

}  // namespace
}  // namespace fp8rt::sched

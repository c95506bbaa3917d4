// Victim choice: least lost work first, then lowest priority, then newest; only lower-priority
// preemptible gangs; unneeded victims dropped; none when preemption cannot help.
#include <gtest/gtest.h>

#include "scheduler/preemption.h"

namespace fp8rt::sched {
namespace {

NodeInfo Node(const std::string& id, const std::vector<int64_t>& gpu_job) {
  NodeInfo n;
  n.id = id;
  for (size_t i = 0; i < gpu_job.size(); ++i) n.gpus.push_back({"H100", 90, 80, true});
  n.gpu_job = gpu_job;
  return n;
}

PendingJob HighJob(int gpus_per_node, int nodes = 1, int priority = 10) {
  PendingJob j;
  j.id = 1;
  j.spec.name = "urgent";
  j.spec.config_path = "c.yaml";
  j.spec.config.data.train = {"/data/corpus.txt"};
  j.spec.nodes = nodes;
  j.spec.gpus_per_node = gpus_per_node;
  j.spec.priority = priority;
  return j;
}

// Node a: job 10 on GPUs 0-3 (500 steps since checkpoint), job 11 on GPUs 4-7 (20 steps).
ClusterSnapshot TwoJobs() { return {{Node("a", {10, 10, 10, 10, 11, 11, 11, 11})}, 1000}; }
std::vector<RunningJob> Running() { return {{10, 0, true, 500, 100}, {11, 0, true, 20, 100}}; }

TEST(SchedPreemption, PrefersTheVictimThatLosesLeastWork) {
  auto plan = ChooseVictims(TwoJobs(), HighJob(4), Running());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<int64_t>{11}));
  ASSERT_EQ(plan->placement.kind, DecisionKind::kPlace);
  EXPECT_EQ(plan->placement.assignment, (std::vector<NodeAssignment>{{"a", {4, 5, 6, 7}}}));
}

TEST(SchedPreemption, MeasuredStepAndSaveTimesDecideWhatStoppingCosts) {
  // Job 11 has fewer steps since its checkpoint, but they are slow and its save takes 10 minutes:
  // 20 x 3 s + 600 s = 660 s lost, against 500 x 0.1 s + 5 s = 55 s for job 10.
  auto running = Running();
  running[0].lost_s = 500 * 0.1 + 5;
  running[1].lost_s = 20 * 3.0 + 600;
  auto plan = ChooseVictims(TwoJobs(), HighJob(4), running);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<int64_t>{10}));
}

TEST(SchedPreemption, TakesSeveralGangsWhenNeeded) {
  auto plan = ChooseVictims(TwoJobs(), HighJob(8), Running());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<int64_t>{11, 10}));
}

TEST(SchedPreemption, OnlyLowerPriorityPreemptibleJobs) {
  auto running = Running();
  running[1].preemptible = false;
  auto plan = ChooseVictims(TwoJobs(), HighJob(4), running);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<int64_t>{10}));
  // Same priority as the running jobs: nobody may be preempted.
  EXPECT_FALSE(ChooseVictims(TwoJobs(), HighJob(4, 1, /*priority=*/0), Running()).has_value());
  // Higher-priority running job is not a victim even if it lost least work.
  running = Running();
  running[1].priority = 20;
  plan = ChooseVictims(TwoJobs(), HighJob(4), running);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<int64_t>{10}));
}

TEST(SchedPreemption, TieBreaksLowestPriorityThenNewest) {
  std::vector<RunningJob> running = {{10, 3, true, 20, 100}, {11, 1, true, 20, 50}};
  auto plan = ChooseVictims(TwoJobs(), HighJob(4), running);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<int64_t>{11}));  // lower priority
  running = {{10, 1, true, 20, 300}, {11, 1, true, 20, 50}};
  plan = ChooseVictims(TwoJobs(), HighJob(4), running);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<int64_t>{10}));  // newer
}

TEST(SchedPreemption, NoneWhenItCannotHelpOrIsNotNeeded) {
  // 2 nodes x 8 GPUs asked of a one-node cluster.
  EXPECT_FALSE(ChooseVictims(TwoJobs(), HighJob(8, 2), Running()).has_value());
  // Already fits on free GPUs.
  ClusterSnapshot c{{Node("a", {10, 10, 10, 10, kNoJob, kNoJob, kNoJob, kNoJob})}, 0};
  EXPECT_FALSE(ChooseVictims(c, HighJob(4), {{10, 0, true, 0, 0}}).has_value());
}

TEST(SchedPreemption, DropsVictimsThePlacementDoesNotNeed) {
  // Job 20 is cheapest to stop but freeing node a's two GPUs is useless while non-preemptible
  // job 22 holds the rest; stopping job 21 frees all of node b, so only 21 is preempted.
  ClusterSnapshot c{
      {Node("a", {20, 20, 22, 22, 22, 22, 22, 22}), Node("b", {21, 21, 21, 21, 21, 21, 21, 21})},
      0};
  std::vector<RunningJob> running = {
      {20, 0, true, 0, 0}, {21, 0, true, 5, 0}, {22, 0, false, 0, 0}};
  auto plan = ChooseVictims(c, HighJob(8), running);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<int64_t>{21}));
  EXPECT_EQ(plan->placement.assignment[0].node_id, "b");
}

}  // namespace
}  // namespace fp8rt::sched

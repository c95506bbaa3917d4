// The placement policy on hand-built snapshots: constraints, gangs, GPU-type mixing, the FP8
// decision with each fallback policy (injected clock), queue order and the anti-starvation
// reservation.
#include <gtest/gtest.h>

#include <set>

#include "scheduler/placement.h"

namespace fp8rt::sched {
namespace {

int CcOf(const std::string& gpu) {
  if (gpu == "B200") return 100;
  if (gpu == "H100" || gpu == "H200") return 90;
  if (gpu == "L40S") return 89;
  if (gpu == "A100") return 80;
  return 70;  // V100
}

NodeInfo Node(const std::string& id, const std::string& gpu, int count, double mem = 80) {
  NodeInfo n;
  n.id = id;
  for (int i = 0; i < count; ++i) n.gpus.push_back({gpu, CcOf(gpu), mem, true});
  n.gpu_job.assign(count, kNoJob);
  return n;
}

JobSpec Spec(int nodes, int gpus_per_node) {
  JobSpec s;
  s.name = "j";
  s.config_path = "c.yaml";
  s.nodes = nodes;
  s.gpus_per_node = gpus_per_node;
  return s;
}

PendingJob Pending(int64_t id, JobSpec spec, int64_t submitted_at = 0) {
  return {id, std::move(spec), submitted_at};
}

JobDecision PlaceOne(const ClusterSnapshot& c, const JobSpec& s, int64_t submitted_at = 0) {
  auto d = Place(c, {Pending(1, s, submitted_at)});
  EXPECT_EQ(d.jobs.size(), 1u);
  return d.jobs.at(0);
}

TEST(SchedPlacement, Fp8OnHopperUsesLowestFreeGpus) {
  ClusterSnapshot c{{Node("h1", "H100", 8)}, 0};
  c.nodes[0].gpu_job[0] = 99;
  JobDecision d = PlaceOne(c, Spec(1, 4));
  ASSERT_EQ(d.kind, DecisionKind::kPlace) << d.reason;
  EXPECT_EQ(d.precision, Precision::kFp8);
  EXPECT_EQ(d.assignment, (std::vector<NodeAssignment>{{"h1", {1, 2, 3, 4}}}));
  EXPECT_EQ(d.reason, "placed on 4 x H100: running fp8 (from the config)");
}

TEST(SchedPlacement, GpuTypesComputeCapabilityAndMemory) {
  ClusterSnapshot c{{Node("a", "A100", 8), Node("h", "H100", 8), Node("l", "L40S", 8, 48)}, 0};
  JobSpec only_h200 = Spec(1, 1);
  only_h200.gpu_types = {"H200"};
  EXPECT_EQ(PlaceOne(c, only_h200).kind, DecisionKind::kWait);

  JobSpec a100 = Spec(1, 2);
  a100.gpu_types = {"A100"};
  a100.precision = Precision::kBf16;
  JobDecision d = PlaceOne(c, a100);
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.assignment[0].node_id, "a");
  EXPECT_EQ(d.precision, Precision::kBf16);

  JobSpec cc90 = Spec(1, 8);
  cc90.min_compute_capability = 90;
  d = PlaceOne(c, cc90);
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.assignment[0].node_id, "h");

  JobSpec big_mem = Spec(1, 1);
  big_mem.gpu_types = {"L40S", "A100"};
  big_mem.min_memory_gib = 60;  // L40S has 48 GiB: only the A100 qualifies, so bf16
  d = PlaceOne(c, big_mem);
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.assignment[0].node_id, "a");
  EXPECT_EQ(d.precision, Precision::kBf16);

  JobSpec l40s = Spec(1, 8);
  l40s.gpu_types = {"L40S"};
  d = PlaceOne(c, l40s);  // cc 8.9 is enough for FP8
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.precision, Precision::kFp8);
}

TEST(SchedPlacement, SkipsUnhealthyBusyLostDrainingAndSilentNodes) {
  ClusterSnapshot c{{Node("n", "H100", 4)}, 1000};
  c.nodes[0].gpus[1].healthy = false;
  c.nodes[0].gpu_job[2] = 5;
  c.nodes[0].last_heartbeat = 990;
  JobDecision d = PlaceOne(c, Spec(1, 2));
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.assignment[0].gpus, (std::vector<int>{0, 3}));
  EXPECT_EQ(PlaceOne(c, Spec(1, 3)).kind, DecisionKind::kWait);

  for (NodeState st : {NodeState::kLost, NodeState::kDraining}) {
    ClusterSnapshot down = c;
    down.nodes[0].state = st;
    EXPECT_EQ(PlaceOne(down, Spec(1, 1)).kind, DecisionKind::kWait);
  }
  PlacementOptions strict;
  strict.heartbeat_timeout_s = 5;  // last heartbeat was 10 s ago
  EXPECT_EQ(Place(c, {Pending(1, Spec(1, 1))}, strict).jobs[0].kind, DecisionKind::kWait);
  strict.heartbeat_timeout_s = 30;
  EXPECT_EQ(Place(c, {Pending(1, Spec(1, 1))}, strict).jobs[0].kind, DecisionKind::kPlace);
}

TEST(SchedPlacement, GangIsAllNodesOrNothing) {
  ClusterSnapshot c{{Node("a", "H100", 4), Node("b", "H100", 4), Node("c", "H100", 4)}, 0};
  c.nodes[1].gpu_job[3] = 9;
  JobDecision d = PlaceOne(c, Spec(2, 4));
  ASSERT_EQ(d.kind, DecisionKind::kPlace) << d.reason;
  EXPECT_EQ(d.assignment, (std::vector<NodeAssignment>{{"a", {0, 1, 2, 3}}, {"c", {0, 1, 2, 3}}}));
  EXPECT_EQ(d.reason, "placed on 8 x H100: running fp8 (from the config)");
  JobDecision none = PlaceOne(c, Spec(3, 4));
  EXPECT_EQ(none.kind, DecisionKind::kWait);
  EXPECT_TRUE(none.assignment.empty());
  // Best fit: a 3-GPU job goes to the node with 3 free rather than splitting a whole node.
  d = PlaceOne(c, Spec(1, 3));
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.assignment[0].node_id, "b");
}

TEST(SchedPlacement, MixedGpuTypesRefusedUnlessAllowed) {
  ClusterSnapshot c{{Node("h100", "H100", 4), Node("h200", "H200", 4)}, 0};
  EXPECT_EQ(PlaceOne(c, Spec(2, 4)).kind, DecisionKind::kWait);
  JobSpec mixed = Spec(2, 4);
  mixed.allow_mixed_gpu_types = true;
  JobDecision d = PlaceOne(c, mixed);
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.precision, Precision::kFp8);
  EXPECT_EQ(d.reason, "placed on 4 x H100 + 4 x H200: running fp8 (from the config)");
}

TEST(SchedPlacement, Bf16FallbackRunsAtOnceWithReason) {
  ClusterSnapshot c{{Node("a", "A100", 2)}, 0};
  JobDecision d = PlaceOne(c, Spec(1, 2));
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.precision, Precision::kBf16);
  EXPECT_EQ(d.precision_source, PrecisionSource::kFallback);
  EXPECT_EQ(d.reason,
            "placed on 2 x A100: FP8 needs compute capability 8.9 (A100: 8.0); running bf16 "
            "(fallback)");
}

TEST(SchedPlacement, OneAmpereGpuInAMixedGangMeansBf16) {
  ClusterSnapshot c{{Node("h", "H100", 1), Node("a", "A100", 1)}, 0};
  JobSpec s = Spec(2, 1);
  s.allow_mixed_gpu_types = true;
  JobDecision d = PlaceOne(c, s);
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.precision, Precision::kBf16);
  EXPECT_NE(d.reason.find("1 x A100 + 1 x H100"), std::string::npos) << d.reason;
}

TEST(SchedPlacement, WaitFallbackHoldsOutForFp8UntilTimeout) {
  ClusterSnapshot c{{Node("h", "H100", 2), Node("a", "A100", 2)}, 0};
  c.nodes[0].gpu_job = {50, 50};  // FP8 GPUs busy, Ampere free
  JobSpec s = Spec(1, 2);
  s.fallback = Fallback::kWait;
  s.fallback_timeout_s = 600;
  c.now = 1599;
  JobDecision d = PlaceOne(c, s, /*submitted_at=*/1000);
  EXPECT_EQ(d.kind, DecisionKind::kWait);
  EXPECT_NE(d.reason.find("after 600s (waited 599s)"), std::string::npos) << d.reason;
  c.now = 1600;
  d = PlaceOne(c, s, 1000);
  ASSERT_EQ(d.kind, DecisionKind::kPlace) << d.reason;
  EXPECT_EQ(d.precision, Precision::kBf16);
  EXPECT_EQ(d.assignment[0].node_id, "a");
  EXPECT_NE(d.reason.find("running bf16 (fallback) after waiting 600s"), std::string::npos)
      << d.reason;
  // FP8 GPUs free again before the timeout: fp8 at once.
  c.now = 1100;
  c.nodes[0].gpu_job = {kNoJob, kNoJob};
  d = PlaceOne(c, s, 1000);
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.precision, Precision::kFp8);
}

TEST(SchedPlacement, FailFallbackFailsOnlyWhenNoFp8PlacementCanExist) {
  JobSpec s = Spec(1, 2);
  s.fallback = Fallback::kFail;
  ClusterSnapshot ampere{{Node("a", "A100", 8)}, 0};
  JobDecision d = PlaceOne(ampere, s);
  EXPECT_EQ(d.kind, DecisionKind::kFail);
  EXPECT_NE(d.reason.find("FP8 needs compute capability 8.9"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("fallback policy is fail"), std::string::npos);

  // FP8 GPUs exist but are busy: wait for them, never take the free Ampere GPUs.
  ClusterSnapshot busy{{Node("a", "A100", 8), Node("h", "H100", 2)}, 0};
  busy.nodes[1].gpu_job = {3, 3};
  d = PlaceOne(busy, s);
  EXPECT_EQ(d.kind, DecisionKind::kWait) << d.reason;

  // Too few FP8 GPUs on any one node for the gang: fails.
  s.gpus_per_node = 4;
  EXPECT_EQ(PlaceOne(busy, s).kind, DecisionKind::kFail);
}

// fp8.scaling: block in a job's inline config (fp8ctl sends the config inside the job): FP8 on
// compute capability 9.0 only, where cuBLASLt has the block-scaled GEMMs; on other FP8 GPUs (Ada,
// Blackwell) the fallback policy applies, and the reason names the recipe.
TEST(SchedPlacement, BlockScaledJobsRunFp8OnHopperOnly) {
  JobSpec block = Spec(1, 2);
  block.config.fp8.mode = ScalingMode::kBlock;  // the typed config: nothing searches strings
  JobSpec delayed = block;
  delayed.config.name = "block";
  delayed.config.fp8.mode = ScalingMode::kDelayed;

  ClusterSnapshot all{{Node("b", "B200", 8), Node("h", "H100", 8), Node("l", "L40S", 8)}, 0};
  JobDecision d = PlaceOne(all, block);
  ASSERT_EQ(d.kind, DecisionKind::kPlace) << d.reason;
  EXPECT_EQ(d.precision, Precision::kFp8);
  EXPECT_EQ(d.assignment[0].node_id, "h");
  EXPECT_EQ(d.reason, "placed on 2 x H100: running fp8 (from the config) with block scaling");
  d = PlaceOne(all, delayed);  // any FP8 GPU; types are tried in name order
  ASSERT_EQ(d.kind, DecisionKind::kPlace) << d.reason;
  EXPECT_EQ(d.precision, Precision::kFp8);
  EXPECT_EQ(d.assignment[0].node_id, "b");

  // No Hopper: bf16 per the default fallback, saying why.
  ClusterSnapshot others{{Node("b", "B200", 8), Node("l", "L40S", 8)}, 0};
  d = PlaceOne(others, block);
  ASSERT_EQ(d.kind, DecisionKind::kPlace) << d.reason;
  EXPECT_EQ(d.precision, Precision::kBf16);
  EXPECT_NE(d.reason.find("fp8.scaling: block needs compute capability 9.0 (Hopper) (B200: 10.0); "
                          "running bf16 (fallback)"),
            std::string::npos)
      << d.reason;
  auto with_fallback = [&](Fallback f) {
    JobSpec s = block;
    s.fallback = f;
    return s;
  };
  const JobSpec wait = with_fallback(Fallback::kWait), fail = with_fallback(Fallback::kFail);
  d = PlaceOne(others, wait);
  EXPECT_EQ(d.kind, DecisionKind::kWait);
  EXPECT_NE(d.reason.find("of free Hopper GPUs (fp8.scaling: block)"), std::string::npos)
      << d.reason;
  d = PlaceOne(others, fail);
  EXPECT_EQ(d.kind, DecisionKind::kFail);
  EXPECT_NE(d.reason.find("fp8.scaling: block needs compute capability 9.0"), std::string::npos)
      << d.reason;
  // Busy Hopper GPUs: wait for them (fallback fail), never take the free B200s in fp8.
  ClusterSnapshot busy{{Node("b", "B200", 8), Node("h", "H100", 2)}, 0};
  busy.nodes[1].gpu_job = {3, 3};
  d = PlaceOne(busy, fail);
  EXPECT_EQ(d.kind, DecisionKind::kWait) << d.reason;
  // bf16 as requested ignores the recipe; CPU slots emulate block scaling too.
  JobSpec bf16 = block;
  bf16.precision = Precision::kBf16;
  EXPECT_EQ(PlaceOne(others, bf16).kind, DecisionKind::kPlace);
  ClusterSnapshot cpu{{Node("c", kCpuSlotName, 4)}, 0};
  d = PlaceOne(cpu, block);
  ASSERT_EQ(d.kind, DecisionKind::kPlace) << d.reason;
  EXPECT_EQ(d.precision, Precision::kFp8);
}

TEST(SchedPlacement, RequestedPrecisionNeedsCapableGpus) {
  ClusterSnapshot c{{Node("v", "V100", 4)}, 0};
  JobSpec s = Spec(1, 4);
  s.precision = Precision::kBf16;
  EXPECT_EQ(PlaceOne(c, s).kind, DecisionKind::kWait);
  s.precision = Precision::kFp32;
  JobDecision d = PlaceOne(c, s);
  ASSERT_EQ(d.kind, DecisionKind::kPlace);
  EXPECT_EQ(d.precision, Precision::kFp32);
  EXPECT_EQ(d.reason, "placed on 4 x V100: running fp32 (from the override)");
  EXPECT_EQ(d.precision_source, PrecisionSource::kOverride);
  // fp8 with bf16 fallback cannot use V100s either.
  EXPECT_EQ(PlaceOne(c, Spec(1, 1)).kind, DecisionKind::kWait);
}

// The precision comes from the config unless the spec overrides it (common/precision.h decides,
// as the trainer does): a bf16 config runs bf16 on FP8 GPUs; --precision fp8 there runs fp8.
TEST(SchedPlacement, TheConfigsPrecisionUnlessTheSpecOverridesIt) {
  ClusterSnapshot c{{Node("h", "H100", 2)}, 0};
  JobSpec s = Spec(1, 1);
  s.config.precision = Precision::kBf16;
  JobDecision d = PlaceOne(c, s);
  ASSERT_EQ(d.kind, DecisionKind::kPlace) << d.reason;
  EXPECT_EQ(d.precision, Precision::kBf16);
  EXPECT_EQ(d.precision_source, PrecisionSource::kConfig);
  EXPECT_EQ(d.reason, "placed on 1 x H100: running bf16 (from the config)");
  s.precision = Precision::kFp8;
  d = PlaceOne(c, s);
  EXPECT_EQ(d.precision, Precision::kFp8);
  EXPECT_EQ(d.precision_source, PrecisionSource::kOverride);
  // On Ampere the fp8 override falls back, and says which rule and which GPU.
  ClusterSnapshot a100{{Node("a", "A100", 1)}, 0};
  d = PlaceOne(a100, s);
  EXPECT_EQ(d.precision, Precision::kBf16);
  EXPECT_EQ(d.precision_source, PrecisionSource::kFallback);
  EXPECT_EQ(d.reason,
            "placed on 1 x A100: FP8 needs compute capability 8.9 (A100: 8.0); running bf16 "
            "(fallback)");
}

// A request no registered node could ever satisfy is refused at submit, naming the resource; one
// that only waits for busy, lost or drained nodes is not.
TEST(SchedPlacement, CheckFeasibleNamesWhatNoNodeOffers) {
  const std::vector<NodeInfo> one_cpu = {Node("n0", kCpuSlotName, 1)};
  EXPECT_TRUE(CheckFeasible(Spec(1, 1), one_cpu).ok());
  EXPECT_TRUE(CheckFeasible(Spec(5, 4), {}).ok()) << "no node registered: nothing to judge";
  Status s = CheckFeasible(Spec(1, 4), one_cpu);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("gpus_per_node = 4: no 1 registered node(s) have 4 GPUs (or CPU "
                             "slots) of one type each; the most on a node is 1 (n0)"),
            std::string::npos)
      << s.message();
  s = CheckFeasible(Spec(2, 1), one_cpu);
  EXPECT_NE(s.message().find("nodes = 2: only 1 node(s) are registered"), std::string::npos)
      << s.message();
  JobSpec h100 = Spec(1, 1);
  h100.gpu_types = {"H100"};
  s = CheckFeasible(h100, one_cpu);
  EXPECT_NE(s.message().find("gpu_types = [H100]: no gang of 1 x 1 such GPUs exists (the 1 "
                             "registered node(s) have 1 x cpu)"),
            std::string::npos)
      << s.message();
  JobSpec mem = Spec(1, 1);
  mem.min_memory_gib = 100;
  EXPECT_NE(CheckFeasible(mem, {Node("h", "H100", 8)}).message().find("min_memory_gib = 100"),
            std::string::npos);
  // fp8 with fallback fail on Ampere only: impossible; with the default fallback it runs bf16.
  JobSpec fail = Spec(1, 1);
  fail.fallback = Fallback::kFail;
  s = CheckFeasible(fail, {Node("a", "A100", 8)});
  EXPECT_NE(s.message().find("precision fp8 with fallback fail: FP8 needs compute capability 8.9"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(CheckFeasible(Spec(1, 1), {Node("a", "A100", 8)}).ok());
  // Busy, unhealthy and lost nodes count: the job waits for them.
  std::vector<NodeInfo> busy = {Node("h", "H100", 2)};
  busy[0].gpu_job = {7, 7};
  busy[0].gpus[1].healthy = false;
  busy[0].state = NodeState::kLost;
  EXPECT_TRUE(CheckFeasible(Spec(1, 2), busy).ok());
}

TEST(SchedPlacement, PriorityThenSubmitTimeThenId) {
  std::vector<PendingJob> q = {Pending(5, Spec(1, 1), 1), Pending(4, Spec(1, 1), 5),
                               Pending(3, Spec(1, 1), 5), Pending(2, Spec(1, 1), 3)};
  for (int i = 1; i < 4; ++i) q[i].spec.priority = 1;
  ClusterSnapshot c{{Node("n", "H100", 1)}, 10};
  PlacementDecision d = Place(c, q);
  ASSERT_EQ(d.jobs.size(), 4u);
  std::vector<int64_t> order;
  for (const auto& j : d.jobs) order.push_back(j.job_id);
  EXPECT_EQ(order, (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(d.jobs[0].kind, DecisionKind::kPlace);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(d.jobs[i].kind, DecisionKind::kWait);
  // Two free GPUs: the next in order gets the second one, never the older low-priority job.
  c.nodes[0] = Node("n", "H100", 2);
  d = Place(c, q);
  EXPECT_EQ(d.jobs[1].job_id, 3);
  EXPECT_EQ(d.jobs[1].kind, DecisionKind::kPlace);
  EXPECT_EQ(d.jobs[3].kind, DecisionKind::kWait);
}

std::set<std::string> NodesUsedBy(const PlacementDecision& d, int64_t first_id, int64_t last_id) {
  std::set<std::string> out;
  for (const auto& j : d.jobs) {
    if (j.job_id >= first_id && j.job_id <= last_id && j.kind == DecisionKind::kPlace) {
      out.insert(j.assignment[0].node_id);
    }
  }
  return out;
}

TEST(SchedPlacement, ReservationStopsSmallJobsStarvingABigGang) {
  // Two 8-GPU nodes, one GPU busy on each: the 8-GPU job is blocked. Small jobs submitted after it
  // may backfill node b but must leave node a (its reservation) alone, so once job 100 ends the
  // big job starts even though more small jobs keep arriving.
  ClusterSnapshot c{{Node("a", "H100", 8), Node("b", "H100", 8)}, 100};
  c.nodes[0].gpu_job[0] = 100;
  c.nodes[1].gpu_job[0] = 101;
  std::vector<PendingJob> q = {Pending(1, Spec(1, 8), 1)};
  for (int64_t id = 10; id < 20; ++id) q.push_back(Pending(id, Spec(1, 1), id));
  PlacementDecision d = Place(c, q);
  EXPECT_EQ(d.jobs[0].kind, DecisionKind::kWait);
  ASSERT_EQ(d.reserved_job_id, std::optional<int64_t>(1));
  EXPECT_EQ(d.reservation, (std::vector<NodeAssignment>{{"a", {0, 1, 2, 3, 4, 5, 6, 7}}}));
  EXPECT_NE(d.jobs[0].reason.find("holds a reservation on 8 x H100"), std::string::npos);
  EXPECT_EQ(NodesUsedBy(d, 10, 19), (std::set<std::string>{"b"}));
  int placed = 0;
  for (const auto& j : d.jobs) {
    if (j.kind == DecisionKind::kPlace) {
      ++placed;
      c.nodes[1].gpu_job[j.assignment[0].gpus[0]] = j.job_id;
    }
  }
  EXPECT_EQ(placed, 7);

  // Job 100 ends; new small jobs arrive. The big job starts on a, small ones still wait.
  c.nodes[0].gpu_job[0] = kNoJob;
  c.now = 200;
  std::vector<PendingJob> q2 = {Pending(1, Spec(1, 8), 1)};
  for (int64_t id = 17; id < 30; ++id) q2.push_back(Pending(id, Spec(1, 1), id));
  d = Place(c, q2);
  ASSERT_EQ(d.jobs[0].job_id, 1);
  ASSERT_EQ(d.jobs[0].kind, DecisionKind::kPlace) << d.jobs[0].reason;
  EXPECT_EQ(d.jobs[0].assignment[0].node_id, "a");
  EXPECT_EQ(d.reserved_job_id, std::optional<int64_t>(17));  // now the oldest blocked small job
}

TEST(SchedPlacement, JobThatCanNeverFitReservesNothing) {
  ClusterSnapshot c{{Node("a", "H100", 8), Node("b", "H100", 8)}, 0};
  PlacementDecision d = Place(c, {Pending(1, Spec(3, 8), 1), Pending(2, Spec(1, 8), 2)});
  EXPECT_EQ(d.jobs[0].kind, DecisionKind::kWait);
  EXPECT_FALSE(d.reserved_job_id.has_value());
  EXPECT_EQ(d.jobs[1].kind, DecisionKind::kPlace);
}

TEST(SchedPlacement, SameSnapshotSameDecision) {
  ClusterSnapshot c{{Node("a", "H100", 8), Node("b", "A100", 8)}, 50};
  std::vector<PendingJob> q = {Pending(3, Spec(1, 4), 3), Pending(1, Spec(2, 4), 1),
                               Pending(2, Spec(1, 2), 2)};
  PlacementDecision d1 = Place(c, q);
  std::reverse(q.begin(), q.end());
  PlacementDecision d2 = Place(c, q);
  ASSERT_EQ(d1.jobs.size(), d2.jobs.size());
  for (size_t i = 0; i < d1.jobs.size(); ++i) {
    EXPECT_EQ(d1.jobs[i].job_id, d2.jobs[i].job_id);
    EXPECT_EQ(d1.jobs[i].assignment, d2.jobs[i].assignment);
    EXPECT_EQ(d1.jobs[i].reason, d2.jobs[i].reason);
  }
}

}  // namespace
}  // namespace fp8rt::sched

// The node protocol from both ends: what the node daemon writes (node/protocol.h) the scheduler
// reads (scheduler/node.h), and the commands the scheduler writes the daemon reads, field by field.
#include <gtest/gtest.h>

#include "node/protocol.h"
#include "scheduler/node.h"

namespace fp8rt {
namespace {

TEST(NodeProtocol, RegistrationsOfGpuAndCpuNodesReadBackOnTheScheduler) {
  node::Inventory gpus;
  gpus.source = "nvml";
  gpus.gpus = {{0, "NVIDIA H100 80GB HBM3", 90, 79.6, 0.5}, {1, "NVIDIA A100-SXM4-40GB", 80, 40, 0}};
  auto r = sched::ParseNodeRegistration(node::RegistrationJson("gpu-1", "10.0.0.5", gpus));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->id, "gpu-1");
  EXPECT_EQ(r->address, "10.0.0.5");
  ASSERT_EQ(r->gpus.size(), 2u);
  EXPECT_EQ(r->gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(r->gpus[0].compute_capability, 90);
  EXPECT_DOUBLE_EQ(r->gpus[0].memory_gib, 79.6);
  EXPECT_EQ(r->gpus[1].compute_capability, 80);

  node::Inventory cpu;
  cpu.source = "cpu";
  cpu.cpu_slots = 3;
  auto c = sched::ParseNodeRegistration(node::RegistrationJson("cpu-1", "", cpu));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->gpus.size(), 3u);
  EXPECT_EQ(c->gpus[2].name, sched::kCpuSlotName);
  EXPECT_EQ(c->gpus[2].compute_capability, 0);
  // Only CPU slots go without a compute capability.
  auto bad = sched::ParseNodeRegistration(
      R"({"id": "n", "gpus": [{"name": "H100", "memory_gib": 80}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gpus[0].compute_capability is required"),
            std::string::npos)
      << bad.status().message();
}

TEST(NodeProtocol, HeartbeatsReadBackWithEveryField) {
  node::JobReport run;
  run.job_id = 7, run.attempt = 2, run.step = 120, run.checkpoint_step = 100, run.total_steps = 200;
  run.loss = 2.5, run.tokens_per_s = 1234.5, run.eta_s = 30;
  run.val_loss = 2.75, run.val_step = 100;
  run.checkpoint_error = "the checkpoint of step 100 failed: writing 'x' failed: EIO";
  run.checkpoint_disk_bytes = 47368000000;
  run.startup_step = 101, run.startup_load_s = 1.25, run.startup_first_step_s = 0.5,
  run.startup_age_s = 3.5;
  node::JobReport dead;
  dead.job_id = 8, dead.attempt = 1, dead.running = false, dead.exit_code = 137,
  dead.failed_rank = 1, dead.reason = "no progress since step 40 for 3 s";
  dead.failed_age_s = 0.75;
  auto hb = sched::ParseHeartbeat(node::HeartbeatJson({run, dead}, {3}));
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  ASSERT_EQ(hb->jobs.size(), 2u);
  const sched::JobReport& a = hb->jobs[0];
  EXPECT_EQ(a.job_id, 7);
  EXPECT_EQ(a.status, sched::RankStatus::kRunning);
  EXPECT_EQ(a.attempt, 2);
  EXPECT_EQ(a.progress.step, 120);
  EXPECT_EQ(a.checkpoint_step, 100);
  EXPECT_EQ(a.progress.total_steps, 200);
  EXPECT_DOUBLE_EQ(a.progress.loss, 2.5);
  EXPECT_DOUBLE_EQ(a.progress.tokens_per_s, 1234.5);
  EXPECT_DOUBLE_EQ(a.progress.mfu, -1) << "not reported";
  EXPECT_DOUBLE_EQ(a.progress.eta_s, 30);
  EXPECT_DOUBLE_EQ(a.progress.val_loss, 2.75);
  EXPECT_EQ(a.progress.val_step, 100);
  EXPECT_EQ(a.progress.checkpoint_error, run.checkpoint_error);
  EXPECT_EQ(a.progress.checkpoint_disk_bytes, 47368000000);
  EXPECT_EQ(a.startup.step, 101);
  EXPECT_DOUBLE_EQ(a.startup.load_s, 1.25);
  EXPECT_DOUBLE_EQ(a.startup.first_step_s, 0.5);
  EXPECT_DOUBLE_EQ(a.startup.age_s, 3.5);
  EXPECT_DOUBLE_EQ(a.failed_age_s, -1) << "running";
  const sched::JobReport& b = hb->jobs[1];
  EXPECT_DOUBLE_EQ(b.failed_age_s, 0.75);
  EXPECT_EQ(b.startup.step, -1) << "no first step reported";
  EXPECT_EQ(b.progress.checkpoint_disk_bytes, -1) << "not said";
  EXPECT_EQ(b.progress.checkpoint_error, "");
  EXPECT_DOUBLE_EQ(b.progress.val_loss, -1) << "no evaluation reported";
  EXPECT_EQ(b.progress.val_step, -1);
  EXPECT_EQ(b.status, sched::RankStatus::kExited);
  EXPECT_EQ(b.exit_code, 137);
  EXPECT_EQ(b.failed_rank, 1);
  EXPECT_EQ(b.reason, "no progress since step 40 for 3 s");
  ASSERT_TRUE(hb->unhealthy_gpus.has_value());
  EXPECT_EQ(*hb->unhealthy_gpus, std::vector<int>{3});
}

TEST(NodeProtocol, AStartupReportIsWholeOrRefused) {
  for (const char* bad :
       {R"({"jobs": [{"job_id": 1, "status": "running", "startup_step": 5}]})",
        R"({"jobs": [{"job_id": 1, "status": "running", "startup_step": 5, "startup_load_s": 1,
                      "startup_first_step_s": 1, "startup_age_s": -2}]})",
        R"({"jobs": [{"job_id": 1, "status": "exited", "exit_code": 1, "failed_age_s": -1}]})"}) {
    auto hb = sched::ParseHeartbeat(bad);
    ASSERT_FALSE(hb.ok()) << bad;
    EXPECT_TRUE(hb.status().message().find("startup") != std::string::npos ||
                hb.status().message().find("failed_age_s") != std::string::npos)
        << hb.status().ToString();
  }
}

TEST(NodeProtocol, CommandsReadBackOnTheNode) {
  sched::NodeCommand start;
  start.kind = sched::CommandKind::kStart;
  start.job_id = 4;
  start.precision = Precision::kBf16;
  start.gpus = {2, 3};
  start.node_rank = 1;
  start.gang_nodes = {"a", "b"};
  start.attempt = 3;
  start.master_addr = "10.0.0.1";
  start.master_port = 29504;
  start.resume_step = 300;
  start.spec.name = "job";
  start.spec.config.data.train = {"/data/corpus.txt"};
  start.spec.config.train.total_steps = 10;
  start.spec.config.train.lr = 3e-4f;
  start.spec.config.fp8.mode = ScalingMode::kCurrent;
  start.spec.checkpoint_interval = 50;
  sched::NodeCommand stop;
  stop.kind = sched::CommandKind::kStop;
  stop.job_id = 5;
  stop.reason = "cancelled";
  const std::string body = StrCat("{\"commands\": [", sched::CommandToJson(start), ",",
                                  sched::CommandToJson(stop), "]}");
  auto cmds = node::ParseCommands(body);
  ASSERT_TRUE(cmds.ok()) << cmds.status().ToString();
  ASSERT_EQ(cmds->size(), 2u);
  const node::Command& c = (*cmds)[0];
  EXPECT_EQ(c.kind, node::Command::Kind::kStart);
  EXPECT_EQ(c.job_id, 4);
  EXPECT_EQ(c.start.precision, Precision::kBf16);
  EXPECT_EQ(c.start.gpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(c.start.node_rank, 1);
  EXPECT_EQ(c.start.nodes, 2);
  EXPECT_EQ(c.start.attempt, 3);
  EXPECT_EQ(c.start.master_addr, "10.0.0.1");
  EXPECT_EQ(c.start.master_port, 29504);
  EXPECT_EQ(c.start.resume_step, 300);
  // The typed spec, config included, exactly as the scheduler holds it.
  EXPECT_TRUE(c.start.spec == start.spec) << sched::CommandToJson(start);
  EXPECT_EQ(c.start.spec.config.train.lr, 3e-4f);
  EXPECT_EQ(c.start.spec.config.fp8.mode, ScalingMode::kCurrent);
  EXPECT_EQ(c.start.spec.checkpoint_interval, 50);
  EXPECT_EQ((*cmds)[1].kind, node::Command::Kind::kStop);
  EXPECT_EQ((*cmds)[1].reason, "cancelled");
  // What it cannot act on is refused naming the field.
  auto bad = node::ParseCommands(R"({"commands": [{"action": "reboot", "job_id": 1}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("commands[0].action = 'reboot'"), std::string::npos);
  EXPECT_FALSE(node::ParseCommands("[]").ok());
  // A start whose config is not one (a typo'd key, a value out of range) is refused whole.
  std::string typo = sched::CommandToJson(start);
  typo.replace(typo.find("\"total_steps\""), 13, "\"total_stepz\"");
  auto refused = node::ParseCommands(StrCat("{\"commands\": [", typo, "]}"));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("commands[0].spec: config: unknown field "
                                            "'train.total_stepz'"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace fp8rt

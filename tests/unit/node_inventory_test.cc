// The node daemon's inventory: fake GPU lists (what tests and --fake-gpus inject), NVML where a
// driver exists, and a CPU node with the reason where none does.
#include "node/inventory.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

namespace fp8rt::node {
namespace {

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

TEST(NodeInventory, FakeListsExpandInOrder) {
  auto g = ParseFakeGpus("2xH100:9.0, 1xL40S:8.9:48");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->size(), 3u);
  EXPECT_EQ((*g)[0], (Gpu{0, "H100", 90, 80, 0}));
  EXPECT_EQ((*g)[1], (Gpu{1, "H100", 90, 80, 0}));
  EXPECT_EQ((*g)[2], (Gpu{2, "L40S", 89, 48, 0}));
}

TEST(NodeInventory, BadFakeListsAreRefusedNamingTheEntry) {
  for (const std::string bad : {"", "A100:8.0", "0xA100:8.0", "4xA100", "4xA100:8", "4x:8.0",
                                "4xA100:8.0:0", "4xA100:8.0:80:1", "2xH100:9.0,junk", "4xA100:8.10"}) {
    auto g = ParseFakeGpus(bad);
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Has(g.status().message(), "fake GPUs '" + bad + "'")) << g.status().message();
  }
}

TEST(NodeInventory, TheFlagComesBeforeTheEnvironmentWhichComesBeforeNvml) {
  ::setenv("FP8D_FAKE_GPUS", "1xA100:8.0", 1);
  auto from_env = DiscoverInventory({});
  auto from_flag = DiscoverInventory({"2xH200:9.0:141", 0});
  ::unsetenv("FP8D_FAKE_GPUS");
  ASSERT_TRUE(from_env.ok() && from_flag.ok());
  EXPECT_EQ(from_env->source, "fake");
  ASSERT_EQ(from_env->gpus.size(), 1u);
  EXPECT_EQ(from_env->gpus[0].compute_capability, 80);
  ASSERT_EQ(from_flag->gpus.size(), 2u);
  EXPECT_EQ(from_flag->gpus[1].name, "H200");
  EXPECT_EQ(from_flag->gpus[1].memory_gib, 141);
  EXPECT_EQ(from_flag->cpu_slots, 0);
}

// Without a fake list: NVML's GPUs where the driver is (the GPU node), else a CPU node that says
// why (this CI machine has no driver).
TEST(NodeInventory, WithoutADriverTheNodeOffersCpuSlotsAndSaysWhy) {
  auto nvml = DiscoverNvmlGpus();
  auto inv = DiscoverInventory({"", 3});
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  if (nvml.ok() && !nvml->empty()) {
    EXPECT_EQ(inv->source, "nvml");
    EXPECT_EQ(inv->gpus, *nvml);
    for (const Gpu& g : inv->gpus) {
      EXPECT_GE(g.compute_capability, 30) << g.name;
      EXPECT_GT(g.memory_gib, 1) << g.name;
    }
    GTEST_SKIP() << "this machine has " << nvml->size() << " GPU(s) through NVML";
  }
  EXPECT_EQ(inv->source, "cpu");
  EXPECT_TRUE(inv->gpus.empty());
  EXPECT_EQ(inv->cpu_slots, 3);
  if (!nvml.ok()) {
    EXPECT_TRUE(Has(inv->note, "NVML")) << inv->note;
  }
  auto all = DiscoverInventory({});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->cpu_slots, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

TEST(DirtyGpus, AGpuIsOfferedAgainOnlyOnceItsMemoryIsFreed) {
  // 0.5 GiB in use on both GPUs when fp8d started (a display, say); a margin of 0.5 GiB.
  DirtyGpus d({0.5, 0.5}, 0.5);
  EXPECT_FALSE(d.Pending());
  d.JobEnded({0, 1, 7});  // 7 does not exist: ignored
  ASSERT_TRUE(d.Pending());
  auto reading = [](double g0, double g1) {
    return std::vector<Gpu>{{0, "H100", 90, 80, g0}, {1, "H100", 90, 80, g1}};
  };
  // GPU 0 still holds 12 GiB (a leaked context); GPU 1 is back to its baseline.
  auto lines = d.Update(reading(12.5, 0.9));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("GPU 0 is dirty: 12.5 GiB in use"), std::string::npos) << lines[0];
  EXPECT_EQ(d.Dirty(), std::vector<int>{0});
  EXPECT_TRUE(d.Pending()) << "GPU 0 is watched until it is freed";
  EXPECT_TRUE(d.Update(reading(12.5, 0.5)).empty()) << "said once";
  lines = d.Update(reading(0.6, 0.5));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "GPU 0 is free again");
  EXPECT_TRUE(d.Dirty().empty());
  EXPECT_FALSE(d.Pending());
}

}  // namespace
}  // namespace fp8rt::node

// fp8train --plan (runtime/memory_plan.h): the plan of a CPU run is the CPU model's allocation,
// category by category; sharding shows in it; an 8B model is planned without its memory.
#include "runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

size_t Category(const MemoryPlan& p, const std::string& name) {
  for (const auto& [n, b] : p.categories) {
    if (n == name) return b;
  }
  return 0;
}

double RssMiB() {
  std::ifstream in("/proc/self/status");
  std::string key;
  double kb = 0;
  while (in >> key) {
    if (key == "VmRSS:") {
      in >> kb;
      return kb / 1024;
    }
  }
  return 0;
}

TEST(MemoryPlan, ACpuRunsPlanIsItsAllocationCategoryByCategory) {
  struct Case {
    const char* what;
    Precision p;
    bool llama;
    int grad_accum;
    bool recompute;
  };
  for (const Case& k : {Case{"gpt2 fp8", Precision::kFp8, false, 1, false},
                        Case{"gpt2 fp8 recompute, grad_accum 4", Precision::kFp8, false, 4, true},
                        Case{"gpt2 bf16", Precision::kBf16, false, 1, false},
                        Case{"llama fp8", Precision::kFp8, true, 1, false},
                        Case{"llama fp32 grad_accum 2", Precision::kFp32, true, 2, false}}) {
    RunConfig c = test::TinyRunConfig("/unused", k.p, 10);
    if (k.llama) {
      c.model.arch = Arch::kLlama;
      c.model.n_kv_head = 2, c.model.ffn_hidden = 160;
    }
    c.train.grad_accum = k.grad_accum;
    c.train.recompute = k.recompute;
    ASSERT_TRUE(c.Validate().ok()) << k.what;
    auto plan = PlanMemory(c, k.p, 1, /*gpu=*/false);
    ASSERT_TRUE(plan.ok()) << k.what << ": " << plan.status().ToString();
    auto model = CreateCpuGpt(ModelOptionsFor(c, k.p));
    ASSERT_TRUE(model.ok()) << k.what;
    EXPECT_EQ(plan->total, (*model)->allocated_bytes()) << k.what;
    EXPECT_EQ(plan->categories, (*model)->MemoryReport()) << k.what;
  }
}

// Sharding shows: ZeRO-1 keeps 1/dp of the master weights and moments, TP 2 about half of
// everything the layers hold; a shape the run would refuse is refused.
TEST(MemoryPlan, ShardingShowsAndWhatARunRefusesIsRefused) {
  RunConfig c = test::TinyRunConfig("/unused", Precision::kFp8, 10);
  auto one = PlanMemory(c, Precision::kFp8, 1, true);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  c.parallel.zero = true;
  auto zero = PlanMemory(c, Precision::kFp8, 4, true);
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  const char* master = "master weights (fp32)";
  const char* moments = "optimizer moments (fp32)";
  EXPECT_NEAR(Category(*zero, master) * 4.0, Category(*one, master), 0.02 * Category(*one, master));
  EXPECT_NEAR(Category(*zero, moments) * 4.0, Category(*one, moments),
              0.02 * Category(*one, moments));
  c.parallel.zero = false;
  c.parallel.tp = 2;
  auto tp = PlanMemory(c, Precision::kFp8, 2, true);
  ASSERT_TRUE(tp.ok()) << tp.status().ToString();
  EXPECT_LT(Category(*tp, master), 0.7 * Category(*one, master));
  EXPECT_TRUE(Has(PlanMemory(c, Precision::kFp8, 3, true).status().message(),
                  "--ranks 3 is not a multiple of parallel.tp = 2"));
  c.parallel.tp = 1;
  c.parallel.zero = true;
  const auto odd = PlanMemory(c, Precision::kFp8, 3, true);
  ASSERT_FALSE(odd.ok());
  EXPECT_TRUE(Has(odd.status().message(), "do not split into 3 equal parts"))
      << odd.status().message();
  const std::string table = FormatMemoryPlan(*zero, c);
  EXPECT_TRUE(Has(table, "dp 4 x tp 1, ZeRO-1")) << table;
}

// Llama-3-8B on 4 GPUs (tp 2 x ZeRO-1 dp 2, T 8192): about 81.5 GiB a rank (measured on
// 4 x H200: model_gib 81.54, docs/PERFORMANCE.md), planned here without that memory.
TEST(MemoryPlan, An8BModelIsPlannedWithoutItsMemory) {
  auto c = LoadRunConfig(std::string(FP8RT_CONFIGS_DIR) + "/llama3-8b.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const double before = RssMiB();
  auto plan = PlanMemory(*c, Precision::kFp8, 4, true);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_LT(RssMiB() - before, 512) << "reserved, not touched";
  const double gib = plan->total / 1073741824.0;
  EXPECT_NEAR(gib, 81.54, 0.05 * 81.54) << FormatMemoryPlan(*plan, *c);
}

}  // namespace
}  // namespace fp8rt

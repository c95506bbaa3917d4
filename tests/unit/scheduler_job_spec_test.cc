// Job specs from YAML and JSON: every field, defaults, round trip, and one refusal per bad field.
#include <gtest/gtest.h>

#include "scheduler/job_spec.h"

namespace fp8rt::sched {
namespace {

constexpr char kFullYaml[] = R"(
name: gpt-350m.fp8
config:
  model: {n_layer: 24, n_embd: 1024}
  train: {batch_size: 8}
nodes: 2
gpus_per_node: 8
gpu_types: [H100, H200]
min_compute_capability: 8.9
min_memory_gib: 80
precision: fp8
fallback: wait
fallback_timeout_s: 600
priority: 5
preemptible: false
checkpoint_interval: 200
max_restarts: 7
allow_mixed_gpu_types: true
)";

TEST(SchedJobSpec, ParsesEveryFieldFromYaml) {
  auto r = ParseJobSpec(kFullYaml);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const JobSpec& s = *r;
  EXPECT_EQ(s.name, "gpt-350m.fp8");
  EXPECT_NE(s.config_yaml.find("\"n_layer\":24"), std::string::npos) << s.config_yaml;
  EXPECT_TRUE(s.config_path.empty());
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.gpus_per_node, 8);
  EXPECT_EQ(s.total_gpus(), 16);
  EXPECT_EQ(s.gpu_types, (std::vector<std::string>{"H100", "H200"}));
  EXPECT_EQ(s.min_compute_capability, 89);
  EXPECT_DOUBLE_EQ(s.min_memory_gib, 80);
  EXPECT_EQ(s.precision, Precision::kFp8);
  EXPECT_EQ(s.fallback, Fallback::kWait);
  EXPECT_EQ(s.fallback_timeout_s, 600);
  EXPECT_EQ(s.priority, 5);
  EXPECT_FALSE(s.preemptible);
  EXPECT_EQ(s.checkpoint_interval, 200);
  EXPECT_EQ(s.max_restarts, 7);
  EXPECT_TRUE(s.allow_mixed_gpu_types);
}

TEST(SchedJobSpec, ParsesJsonAndAppliesDefaults) {
  auto r = ParseJobSpec(R"({"name": "small", "config_path": "configs/tiny.yaml",
                            "min_compute_capability": "9.0", "precision": "bf16"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->config_path, "configs/tiny.yaml");
  EXPECT_EQ(r->min_compute_capability, 90);
  EXPECT_EQ(r->precision, Precision::kBf16);
  EXPECT_EQ(r->nodes, 1);
  EXPECT_EQ(r->gpus_per_node, 1);
  EXPECT_TRUE(r->gpu_types.empty());
  EXPECT_EQ(r->fallback, Fallback::kBf16);
  EXPECT_EQ(r->priority, 0);
  EXPECT_TRUE(r->preemptible);
  EXPECT_EQ(r->max_restarts, 3);
  EXPECT_FALSE(r->allow_mixed_gpu_types);
}

TEST(SchedJobSpec, ToJsonRoundTrips) {
  for (const std::string& text :
       {std::string(kFullYaml), std::string("{name: a, config_path: x.yaml, fallback: fail}")}) {
    auto a = ParseJobSpec(text);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto b = ParseJobSpec(a->ToJson());
    ASSERT_TRUE(b.ok()) << b.status().ToString() << "\n" << a->ToJson();
    EXPECT_EQ(*a, *b) << a->ToJson();
  }
}

struct BadCase {
  const char* yaml;
  std::vector<const char*> must_mention;
};

TEST(SchedJobSpec, EachBadFieldIsNamedWithValueAndAllowed) {
  const std::string base = "name: j\nconfig_path: c.yaml\n";
  const std::vector<BadCase> cases = {
      {"nodes: 0", {"nodes", "0", "out of range [1, 4096]"}},
      {"gpus_per_node: -2", {"gpus_per_node", "-2", "out of range [1, 1024]"}},
      {"nodes: two", {"nodes", "two", "integer"}},
      {"gpu_types: H100", {"gpu_types", "list"}},
      {"min_compute_capability: 8.95", {"min_compute_capability", "8.95", "8.9"}},
      {"min_compute_capability: ampere", {"min_compute_capability", "ampere"}},
      {"min_memory_gib: -1", {"min_memory_gib", "-1", "out of range [0, "}},
      {"precision: fp4", {"precision", "fp4", "fp8, bf16, fp32"}},
      {"fallback: retry", {"fallback", "retry", "bf16, wait, fail"}},
      {"fallback_timeout_s: 10", {"fallback_timeout_s", "wait", "bf16"}},
      {"fallback: wait\nfallback_timeout_s: -5", {"fallback_timeout_s", "-5", "out of range [0, "}},
      {"priority: high", {"priority", "high", "integer"}},
      {"preemptible: maybe", {"preemptible", "maybe", "boolean"}},
      {"checkpoint_interval: 0", {"checkpoint_interval", "0", "out of range [1, "}},
      {"max_restarts: -1", {"max_restarts", "-1", "out of range [0, 1000]"}},
      {"allow_mixed_gpu_types: 3", {"allow_mixed_gpu_types", "3", "boolean"}},
      {"gpus: 8", {"unknown field 'gpus'", "gpus_per_node"}},
  };
  for (const auto& c : cases) {
    auto r = ParseJobSpec(base + c.yaml);
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    for (const char* word : c.must_mention) {
      EXPECT_NE(r.status().message().find(word), std::string::npos)
          << c.yaml << " -> " << r.status().message() << " (missing '" << word << "')";
    }
  }
}

TEST(SchedJobSpec, NameAndConfigRules) {
  auto no_name = ParseJobSpec("config_path: c.yaml");
  ASSERT_FALSE(no_name.ok());
  EXPECT_NE(no_name.status().message().find("name"), std::string::npos);
  auto bad_name = ParseJobSpec("name: 'a b'\nconfig_path: c.yaml");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.status().message().find("'a b'"), std::string::npos);
  auto both = ParseJobSpec("name: j\nconfig_path: c.yaml\nconfig: {model: {n_layer: 2}}");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("exactly one of config"), std::string::npos);
  auto neither = ParseJobSpec("name: j");
  ASSERT_FALSE(neither.ok());
  EXPECT_NE(neither.status().message().find("config_path"), std::string::npos);
  auto list_config = ParseJobSpec("name: j\nconfig: [1, 2]");
  ASSERT_FALSE(list_config.ok());
  EXPECT_NE(list_config.status().message().find("config: expected a mapping"), std::string::npos);
}

TEST(SchedJobSpec, RefusesMalformedText) {
  EXPECT_FALSE(ParseJobSpec("").ok());
  EXPECT_FALSE(ParseJobSpec("[1, 2]").ok());
  auto r = ParseJobSpec("{\"name\": \"j\", ");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not valid YAML or JSON"), std::string::npos);
}

}  // namespace
}  // namespace fp8rt::sched

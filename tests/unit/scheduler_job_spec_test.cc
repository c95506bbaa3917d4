// Job specs from YAML and JSON: every field, defaults, round trip, and one refusal per bad field.
#include <gtest/gtest.h>

#include "common/job_spec.h"

namespace fp8rt::sched {
namespace {

constexpr char kFullYaml[] = R"(
name: gpt-350m.fp8
config:
  model: {n_layer: 24, n_embd: 1024}
  data: {train: /data/corpus.txt}
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
  EXPECT_EQ(s.config.model.n_layer, 24);
  EXPECT_EQ(s.config.train.batch_size, 8);
  EXPECT_EQ(s.config.data.train.at(0), "/data/corpus.txt");
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
  auto plain = ParseJobSpec(R"({"name": "p", "config_path": "c.yaml"})");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->precision.has_value()) << "no precision given: the config's decides";
  EXPECT_EQ(r->gpus_per_node, 1);
  EXPECT_TRUE(r->gpu_types.empty());
  EXPECT_EQ(r->fallback, Fallback::kBf16);
  EXPECT_EQ(r->priority, 0);
  EXPECT_TRUE(r->preemptible);
  EXPECT_EQ(r->max_restarts, 3);
  EXPECT_FALSE(r->allow_mixed_gpu_types);
}

TEST(SchedJobSpec, ToJsonRoundTrips) {
  // As the store keeps it (the config an object, every key), and as fp8ctl sends it.
  auto a = ParseJobSpec(kFullYaml);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = ParseJobSpec(a->ToJson(), SpecSource::kStored);
  ASSERT_TRUE(b.ok()) << b.status().ToString() << "\n" << a->ToJson();
  EXPECT_EQ(*a, *b) << a->ToJson();
  EXPECT_NE(a->ToJson().find("\"config\":{\"name\":\"run\",\"precision\":\"fp8\",\"model\":{"),
            std::string::npos)
      << "the config is an object: " << a->ToJson();
  auto c = ParseJobSpec(a->ToJson(SpecSource::kUser));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*a, *c);
  auto path = ParseJobSpec("{name: a, config_path: x.yaml, fallback: fail}");
  ASSERT_TRUE(path.ok());
  const std::string sent = path->ToJson(SpecSource::kUser);
  EXPECT_EQ(sent.find("\"config\""), std::string::npos) << "the scheduler reads the file: " << sent;
  auto d = ParseJobSpec(sent);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*path, *d);
  // A stored spec holds its config; one without is not a stored spec.
  EXPECT_FALSE(ParseJobSpec(sent, SpecSource::kStored).ok());
  // Older stores kept the config as a JSON string: it still reads.
  auto old = ParseJobSpec(
      R"({"name": "o", "config": "{\"data\":{\"train\":\"/d/c.txt\"}}", "precision": "fp8"})",
      SpecSource::kStored);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->config.data.train.at(0), "/d/c.txt");
}

// The config inside a spec is the typed training config, read by the one reader: a typo or an
// impossible value is refused naming the key and (YAML) the line, and the config's parallel
// layout must fit the gang.
TEST(SchedJobSpec, TheConfigIsCheckedWithItsLineAndAgainstTheGang) {
  auto typo = ParseJobSpec("name: t\nconfig:\n  data: {train: /d}\n  train:\n    batch_sise: 8\n");
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().message().rfind("config: unknown field 'train.batch_sise' at line 5", 0),
            0u)
      << typo.status().message();
  auto range = ParseJobSpec("name: t\nconfig: {data: {train: /d}, train: {lr: 50}}\n");
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("train.lr = 50 is out of range"), std::string::npos)
      << range.status().message();
  auto tp = ParseJobSpec(
      "name: t\nnodes: 3\nconfig: {data: {train: /d}, model: {n_head: 4}, parallel: {tp: 2}}\n");
  ASSERT_FALSE(tp.ok());
  EXPECT_NE(tp.status().message().find("parallel.tp = 2 does not divide the job's 3 rank(s)"),
            std::string::npos)
      << tp.status().message();
  auto dp =
      ParseJobSpec("name: t\ngpus_per_node: 4\nconfig: {data: {train: /d}, parallel: {dp: 2}}\n");
  ASSERT_FALSE(dp.ok());
  EXPECT_NE(dp.status().message().find("parallel.dp = 2 x tp = 1 is not the job's 4 rank(s)"),
            std::string::npos)
      << dp.status().message();
}

// What a careless or hostile spec gets: the documented limit, the field named.
TEST(SchedJobSpec, LimitsAreTheDocumentedOnesAndNameTheField) {
  auto long_name = ParseJobSpec(StrCat("name: ", std::string(10000, 'a'), "\nconfig_path: c\n"));
  ASSERT_FALSE(long_name.ok());
  EXPECT_NE(long_name.status().message().find("10000 bytes long; at most 128 are allowed"),
            std::string::npos)
      << long_name.status().message();
  auto huge = ParseJobSpec("name: a\nconfig_path: c\nnodes: 9223372036854775808\n");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().message(),
            "nodes = 9223372036854775808 is out of range [1, 4096] at line 3");
  auto escape = ParseJobSpec("{\"name\": \"a\\u001b[2Jb\", \"config_path\": \"c\"}");
  ASSERT_FALSE(escape.ok());
  EXPECT_NE(escape.status().message().find("name = 'a\\x1b[2Jb' has '\\x1b'"), std::string::npos)
      << escape.status().message();
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

// A job as a user submits it: YAML or JSON text -> JobSpec, validated strictly (unknown fields
// refused by name; errors name the field, the value, what is allowed and, for YAML, the line).
// The training config inside is the typed RunConfig (common/train_config.h): fp8ctl checks a spec
// with this before sending it, the scheduler again before storing it, and the node daemon reads
// the config it hands fp8train from here. Stored and shown as JSON with the config an object.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/precision.h"
#include "common/status.h"
#include "common/strict_yaml.h"
#include "common/train_config.h"

namespace fp8rt {

// The documented range of every number in a spec (docs/API.md); anything outside, NaN and
// infinities included, is refused naming the field.
inline constexpr size_t kMaxJobNameBytes = 128;
inline constexpr int kMaxNodes = 4096;
inline constexpr int kMaxGpusPerNode = 1024;  // as many as a node may register
inline constexpr size_t kMaxGpuTypes = 64;
inline constexpr double kMaxMemoryGib = 1 << 20;  // 1 PiB per GPU
inline constexpr int64_t kMaxFallbackTimeoutS = 10LL * 365 * 86400;
inline constexpr int kMaxPriority = 1'000'000;  // |priority|; users are limited further by the API
inline constexpr int64_t kMaxCheckpointInterval = 1'000'000'000'000;
inline constexpr int kMaxRestarts = 1000;
inline constexpr size_t kMaxConfigPath = 4096;

enum class SpecSource {
  // What a user sends: exactly one of `config` and `config_path`. A config_path spec comes back
  // with a default `config` and unvalidated; the scheduler reads the file (ReadConfigPath) and
  // calls Validate().
  kUser,
  // What the job store and the node daemons read back: `config` always, `config_path` beside it
  // when the config came from a file.
  kStored,
};

struct JobSpec {
  std::string name;  // [A-Za-z0-9._-], 1..128 chars. Default: "" (required)
  // The training config: given inline (`config`), or read from `config_path` by the scheduler
  // when the job is submitted (the file is read once, as sbatch copies its script). Default: {}
  RunConfig config;
  // Where `config` was read from; "" for an inline config. Default: ""
  std::string config_path;
  int nodes = 1;                       // gang size in nodes, 1..4096. Default: 1
  int gpus_per_node = 1;               // 1..1024. Default: 1
  std::vector<std::string> gpu_types;  // allowed GpuInfo::name values; empty = any. Default: {}
  int min_compute_capability = 0;      // 10 * major + minor (8.9 -> 89). Default: 0 (any)
  double min_memory_gib = 0;           // per GPU, 0..2^20 and finite. Default: 0
  // Overrides config.precision (fp8ctl submit --precision); unset: the config's. Default: unset
  std::optional<Precision> precision;
  Fallback fallback = Fallback::kBf16;  // only used when the job asks for fp8. Default: bf16
  int64_t fallback_timeout_s = 3600;    // only with fallback wait; 0..10 years. Default: 3600
  int priority = 0;         // -1e6..1e6; higher runs first and may preempt lower. Default: 0
  bool preemptible = true;  // Default: true
  int64_t checkpoint_interval = 1000;  // steps between checkpoints, 1..1e12. Default: 1000
  int max_restarts = 3;                // node-loss requeues before FAILED, 0..1000. Default: 3
  bool allow_mixed_gpu_types = false;  // may one gang span GPU types. Default: false

  int total_gpus() const { return nodes * gpus_per_node; }
  // The precision the job asks for: `precision` when set, else the config's.
  PrecisionRequest requested_precision() const {
    return RequestPrecision(config.precision, precision);
  }
  // Everything a spec must satisfy once its config is there: the name's rules, and the config's
  // parallel layout fitting the gang (parallel.tp divides nodes x gpus_per_node; dp x tp equals
  // it when dp is set). Errors name the field.
  Status Validate() const;
  // Canonical JSON with `config` an object (RunConfigToJson); ParseJobSpec(ToJson(), kStored)
  // gives back an equal spec. As kUser (what fp8ctl sends): a config_path spec without its
  // config, which the scheduler reads.
  std::string ToJson(SpecSource as = SpecSource::kStored) const;
  bool operator==(const JobSpec&) const = default;
};

// Parses YAML or JSON (JSON is YAML) and validates.
Result<JobSpec> ParseJobSpec(const std::string& text, SpecSource source = SpecSource::kUser);
// The same for a document already parsed (fp8ctl reads the user's file once).
Result<JobSpec> ReadJobSpec(const strict::Value& root, SpecSource source = SpecSource::kUser);

// A compute capability given as "8.9" or 8.9 -> 89 (errors name `path`).
Result<int> ParseComputeCapability(const strict::Value& v, const std::string& path);

}  // namespace fp8rt

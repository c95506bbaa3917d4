// A job as a user submits it: YAML or JSON text -> JobSpec, validated strictly (unknown fields
// refused by name; errors name the field, the value and what is allowed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/precision.h"
#include "common/status.h"
#include "common/strict_yaml.h"

namespace fp8rt::sched {

// The precisions and the compute-capability rule are common/precision.h's, shared with fp8train.
using fp8rt::FormatComputeCapability;
using fp8rt::ParsePrecision;
using fp8rt::Precision;
using fp8rt::PrecisionName;

// What a job asking for fp8 does when the GPUs it can get are not FP8-capable.
enum class Fallback {
  kBf16,  // run bf16 at once on whatever fits
  kWait,  // wait up to fallback_timeout_s for FP8 GPUs, then run bf16
  kFail,  // fail if the cluster has no FP8-capable placement for it at all
};
const char* FallbackName(Fallback f);

// The documented range of every number in a spec (docs/API.md); anything outside, NaN and
// infinities included, is refused naming the field.
inline constexpr int kMaxNodes = 4096;
inline constexpr int kMaxGpusPerNode = 1024;  // as many as a node may register
inline constexpr size_t kMaxGpuTypes = 64;
inline constexpr double kMaxMemoryGib = 1 << 20;  // 1 PiB per GPU
inline constexpr int64_t kMaxFallbackTimeoutS = 10LL * 365 * 86400;
inline constexpr int kMaxPriority = 1'000'000;  // |priority|; users are limited further by the API
inline constexpr int64_t kMaxCheckpointInterval = 1'000'000'000'000;
inline constexpr int kMaxRestarts = 1000;
inline constexpr size_t kMaxConfigPath = 4096;

struct JobSpec {
  std::string name;         // [A-Za-z0-9._-], 1..128 chars. Default: "" (required)
  std::string config_yaml;  // trainer config given inline, as canonical JSON text. Default: ""
  std::string config_path;  // or a path to it; exactly one of the two. Default: ""
  int nodes = 1;            // gang size in nodes, 1..4096. Default: 1
  int gpus_per_node = 1;    // 1..1024. Default: 1
  std::vector<std::string> gpu_types;     // allowed GpuInfo::name values; empty = any. Default: {}
  int min_compute_capability = 0;         // 10 * major + minor (8.9 -> 89). Default: 0 (any)
  double min_memory_gib = 0;              // per GPU, 0..2^20 and finite. Default: 0
  Precision precision = Precision::kFp8;  // Default: fp8
  Fallback fallback = Fallback::kBf16;    // only used when precision is fp8. Default: bf16
  int64_t fallback_timeout_s = 3600;      // only with fallback wait; 0..10 years. Default: 3600
  int priority = 0;         // -1e6..1e6; higher runs first and may preempt lower. Default: 0
  bool preemptible = true;  // Default: true
  int64_t checkpoint_interval = 1000;  // steps between checkpoints, 1..1e12. Default: 1000
  int max_restarts = 3;                // node-loss requeues before FAILED, 0..1000. Default: 3
  bool allow_mixed_gpu_types = false;  // may one gang span GPU types. Default: false

  int total_gpus() const { return nodes * gpus_per_node; }
  // Canonical JSON; ParseJobSpec(ToJson()) gives back an equal spec.
  std::string ToJson() const;
  bool operator==(const JobSpec&) const = default;
};

// Whether the job's inline trainer config (fp8ctl sends the config inside the job) asks for
// fp8.scaling: block, whose GEMMs (cuBLASLt's 1x128 / 128x128 block-scaled modes) exist on compute
// capability 9.0 only. A config_path job's file is read by the node daemon, not here: false.
bool UsesBlockScaling(const JobSpec& s);
inline constexpr int kFp8BlockComputeCapability = 90;

// Parses YAML or JSON (JSON is YAML) and validates.
Result<JobSpec> ParseJobSpec(const std::string& text);

// The config_path rule, checked at submit time (the node daemon checks again when it reads the
// file): a relative path, resolved by the daemon against its config directory, may not leave it
// ("a/../../b" does); an absolute one must lie under one of `roots` (absolute directories). The
// check is lexical: "..", "." and repeated slashes are resolved first.
Status CheckConfigPath(const std::string& path, const std::vector<std::string>& roots);

// A compute capability given as "8.9" or 8.9 -> 89 (errors name `path`).
Result<int> ParseComputeCapability(const strict::Value& v, const std::string& path);


}  // namespace fp8rt::sched

// The training precisions, the compute-capability rules that say which a GPU can run, and the one
// decision of the precision a job runs in: for the trainer (runtime/device.cc), the scheduler's
// placement (scheduler/placement.cc) and fp8ctl, which all read it from here.
#pragma once

#include <climits>
#include <optional>
#include <string>

#include "common/fp8_recipe.h"
#include "common/status.h"

namespace fp8rt {

enum class Precision { kFp8, kBf16, kFp32 };
const char* PrecisionName(Precision p);  // "fp8", "bf16", "fp32"
// `field` names the setting in the error ("precision = 'fp16' is not one of: fp8, bf16, fp32").
Result<Precision> ParsePrecision(const std::string& s, const char* field = "precision");

// FP8 tensor cores need compute capability 8.9 (Ada, Hopper and later); BF16 needs 8.0 (Ampere).
inline constexpr int kFp8MinComputeCapability = 89;
inline constexpr int kBf16MinComputeCapability = 80;
// fp8.scaling: block runs cuBLASLt's 1x128 / 128x128 block-scaled GEMMs, which exist on compute
// capability 9.0 (Hopper) only.
inline constexpr int kFp8BlockComputeCapability = 90;
// The compute capability (10 * major + minor) a GPU needs to run `p`; 0 for fp32.
int MinComputeCapability(Precision p);
// "8.9" for 89.
std::string FormatComputeCapability(int cc);

// The compute capabilities whose GPUs run `p` under `scaling` (FP8 block scaling: 9.0 only).
struct CcRange {
  int min = 0;
  int max = INT_MAX;
  bool Contains(int cc) const { return cc >= min && cc <= max; }
};
CcRange ComputeCapabilities(Precision p, ScalingMode scaling = ScalingMode::kDelayed);
// The rule in words: "FP8 needs compute capability 8.9", "fp8.scaling: block needs compute
// capability 9.0 (Hopper)", "BF16 needs compute capability 8.0".
std::string PrecisionNeeds(Precision p, ScalingMode scaling = ScalingMode::kDelayed);

// What a job asking for FP8 does when the GPUs it can get do not run it.
enum class Fallback {
  kBf16,  // run bf16 at once on whatever fits
  kWait,  // wait up to fallback_timeout_s for FP8 GPUs, then run bf16
  kFail,  // fail if the cluster has no FP8-capable placement for it at all
};
const char* FallbackName(Fallback f);  // "bf16", "wait", "fail"
Result<Fallback> ParseFallback(const std::string& s, const char* field = "fallback");

// Where a job's precision came from.
enum class PrecisionSource {
  kConfig,    // the training config's `precision`
  kOverride,  // an explicit override: the job spec's `precision` (fp8ctl submit --precision),
              // fp8train --precision
  kFallback,  // the GPUs do not run what was asked: the fallback policy chose
};
const char* PrecisionSourceName(PrecisionSource s);  // "config", "override", "fallback"

// What a job asks for: the override when there is one, else the config's precision.
struct PrecisionRequest {
  Precision precision = Precision::kFp8;
  PrecisionSource source = PrecisionSource::kConfig;  // kConfig or kOverride
};
PrecisionRequest RequestPrecision(Precision config, std::optional<Precision> override_precision);

struct PrecisionDecision {
  Precision precision = Precision::kFp8;
  PrecisionSource source = PrecisionSource::kConfig;
  // Why, in words: "running fp8 (from the config)", "running bf16 (from the override)",
  // "FP8 needs compute capability 8.9 (A100: 8.0); running bf16 (fallback)".
  std::string reason;
};
// The precision a job runs in on GPUs whose lowest compute capability is `cc`, that GPU named
// `gpus` in the reason ("NVIDIA A100") (0: CPU slots, which run every precision, FP8 emulated). A
// request the GPUs run is honoured. Otherwise, with `fallback_allowed`, the best precision below it
// they run (bf16, else fp32), with the rule in the reason; without, FailedPrecondition naming the
// rule.
Result<PrecisionDecision> DecidePrecision(const PrecisionRequest& request, ScalingMode scaling,
                                          int cc, const std::string& gpus, bool fallback_allowed);

}  // namespace fp8rt

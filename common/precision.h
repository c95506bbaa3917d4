// The training precisions and the compute-capability rule that says which a GPU can run: one
// definition for the trainer (runtime/device.cc) and the scheduler (scheduler/placement.cc).
#pragma once

#include <string>

#include "common/status.h"

namespace fp8rt {

enum class Precision { kFp8, kBf16, kFp32 };
const char* PrecisionName(Precision p);  // "fp8", "bf16", "fp32"
// `field` names the setting in the error ("precision = 'fp16' is not one of: fp8, bf16, fp32").
Result<Precision> ParsePrecision(const std::string& s, const char* field = "precision");

// FP8 tensor cores need compute capability 8.9 (Ada, Hopper and later); BF16 needs 8.0 (Ampere).
inline constexpr int kFp8MinComputeCapability = 89;
inline constexpr int kBf16MinComputeCapability = 80;
// The compute capability (10 * major + minor) a GPU needs to run `p`; 0 for fp32.
int MinComputeCapability(Precision p);
// "8.9" for 89.
std::string FormatComputeCapability(int cc);

}  // namespace fp8rt

// The FP8 recipe as a training config names it (fp8.scaling, fp8.amax_algo, fp8.recipe,
// fp8.history_len, fp8.margin): plain types shared by the config reader (common/train_config.h),
// which every program uses, and the kernels that act on them (kernels/fp8.h, kernels/scaling.h).
#pragma once

#include <cstdint>

#include "common/status.h"

namespace fp8rt {

// How a tensor's scale is chosen. Delayed: from an amax history of earlier steps. Current: from
// this tensor's own amax (one extra pass). Block: one scale per 1 x 128 / 128 x 128 block, from
// that block's amax in the cast itself (cuBLASLt's block-scaled GEMMs, Hopper only).
enum class ScalingMode : uint8_t { kDelayed, kCurrent, kBlock };
const char* ScalingModeName(ScalingMode s);  // "delayed", "current", "block"

// Which amax a delayed scale is computed from.
enum class AmaxAlgo : uint8_t {
  kMax,         // the largest amax in the whole history window (NaN entries ignored)
  kMostRecent,  // this step's amax only
};
const char* AmaxAlgoName(AmaxAlgo a);  // "max", "most_recent"

// Which FP8 format each tensor role uses.
enum class Fp8Recipe : uint8_t {
  kE4M3,    // every tensor E4M3
  kHybrid,  // E4M3 for forward tensors (weights, activations), E5M2 for gradients
};
const char* Fp8RecipeName(Fp8Recipe r);  // "e4m3", "hybrid"

struct DelayedScalingConfig {
  // Steps of amax history kept per tensor (ring buffer), 1..1024. Default: 1024.
  int history_len = 1024;
  // How the history becomes the amax the scale is computed from. Default: kMax.
  AmaxAlgo algo = AmaxAlgo::kMax;
  // Headroom: scales are divided by 2^margin, 0..32. Default: 0.
  int margin = 0;
  // Formats of forward and gradient tensors. Default: kHybrid.
  Fp8Recipe recipe = Fp8Recipe::kHybrid;

  // InvalidArgument naming the field, its value and the allowed range.
  Status Validate() const;
  bool operator==(const DelayedScalingConfig&) const = default;
};

}  // namespace fp8rt
